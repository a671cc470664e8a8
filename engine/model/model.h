// A llama-architecture model as read from GGUF: hyper-parameters (ModelConfig)
// and the tensors of each layer (ModelTensors, pointers into the mapped file).
// load_model() checks every tensor's presence, type and exact shape, so the
// forward passes can trust them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"

namespace clchat {

struct ModelConfig {
  std::string arch;   // general.architecture ("llama")
  std::string name;   // general.name, or the file's stem
  int n_embd = 0;     // embedding length
  int n_layer = 0;    // blocks
  int n_head = 0;     // query heads
  int n_head_kv = 0;  // key/value heads (GQA)
  int head_dim = 0;   // n_embd / n_head
  int n_ff = 0;       // FFN hidden size
  int n_vocab = 0;    // rows of token_embd
  int n_ctx_train = 0;
  int n_rot = 0;  // rotated dimensions per head (adjacent pairs)
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the lm_head is token_embd

  int n_embd_kv() const { return n_head_kv * head_dim; }
};

struct LayerTensors {
  const GgufTensor* attn_norm;  // [n_embd]
  const GgufTensor* wq;         // [n_embd, n_embd]
  const GgufTensor* wk;         // [n_embd, n_embd_kv]
  const GgufTensor* wv;         // [n_embd, n_embd_kv]
  const GgufTensor* wo;         // [n_embd, n_embd]
  const GgufTensor* ffn_norm;   // [n_embd]
  const GgufTensor* ffn_gate;   // [n_embd, n_ff]
  const GgufTensor* ffn_up;     // [n_embd, n_ff]
  const GgufTensor* ffn_down;   // [n_ff, n_embd]
};

struct ModelTensors {
  const GgufTensor* token_embd;   // [n_embd, n_vocab]
  const GgufTensor* output_norm;  // [n_embd]
  const GgufTensor* output;       // [n_embd, n_vocab]; == token_embd when tied
  std::vector<LayerTensors> layers;
};

struct Model {
  std::unique_ptr<GgufFile> file;
  ModelConfig config;
  ModelTensors tensors;
};

// Reads hyper-parameters from `file` and checks tensors; throws GgufError.
ModelConfig read_model_config(const GgufFile& file);
ModelTensors find_model_tensors(const GgufFile& file, const ModelConfig& config);
// Opens and checks a model file; throws GgufError with the file name.
Model load_model(const std::string& path);

// The types of the seven layer matrices with their counts, most common
// first (ties: in GGML's id order).
std::vector<std::pair<GgmlType, int>> layer_weight_types(const Model& model);
// For display: the layer matrices' type ("Q4_1") when they share one; for a
// mix, llama-quantize's file type from general.file_type ("Q4_K_M mix")
// when it names one of quant_mix.h's, else the types, most common first
// ("Q5_0, Q4_K, Q6_K, Q8_0").
std::string describe_weight_type(const Model& model);

}  // namespace clchat
