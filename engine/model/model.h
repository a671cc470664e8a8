// A decoder-only transformer as read from GGUF: hyper-parameters and what
// varies per family (ModelConfig, filled from the architecture table in
// architecture.h and the file's keys) and the tensors of each layer
// (ModelTensors, pointers into the mapped file). load_model() checks every
// tensor's presence, type and exact shape, so the forward passes can trust
// them. The forward passes read the ModelConfig fields, never the family name.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"

namespace clchat {

// How RoPE pairs a head's values: (2i, 2i + 1) as llama's GGUF weights are
// stored, or (i, i + n_rot / 2) as GPT-NeoX and most later families do.
enum class RopeStyle { Adjacent, Neox };
// The FFN's gate activation: silu(g) * u (SwiGLU) or gelu_tanh(g) * u (GeGLU).
enum class FfnActivation { Silu, GeluTanh };

struct ModelConfig {
  std::string arch;   // general.architecture ("llama", "gemma3", ...)
  std::string name;   // general.name, or the file's stem
  int n_embd = 0;     // embedding length
  int n_layer = 0;    // blocks
  int n_head = 0;     // query heads
  int n_head_kv = 0;  // key/value heads (GQA)
  int head_dim = 0;   // attention.key_length, else n_embd / n_head
  int n_ff = 0;       // FFN hidden size
  int n_vocab = 0;    // rows of token_embd
  int n_ctx_train = 0;
  int n_rot = 0;  // rotated dimensions per head
  RopeStyle rope_style = RopeStyle::Adjacent;
  float rope_freq_base = 10000.0f;  // layers of full attention
  float rope_freq_scale = 1.0f;     // linear scaling of positions (rope.scaling.factor^-1)
  // Sliding-window layers: their own base (Gemma 3: 10,000, 1e6 elsewhere),
  // no position scaling.
  float rope_freq_base_swa = 10000.0f;
  bool rope_freq_factors = false;  // rope_freqs.weight divides each pair's frequency (Llama 3.1+)
  float rms_eps = 1e-5f;
  float embed_scale = 1.0f;  // x = token_embd[id] * embed_scale (Gemma: sqrt(n_embd))
  float attn_scale = 0.0f;   // q.k scale: 1/sqrt(head_dim) (set by the loader; Gemma 3 27B differs)
  bool qk_norm = false;      // RMSNorm of each q and k head (attn_q_norm, attn_k_norm)
  bool post_norms = false;   // RMSNorm of the attention's and the FFN's output before the residual
  bool qkv_bias = false;     // attn_q/k/v.bias added after the projections (Qwen 2)
  FfnActivation ffn_act = FfnActivation::Silu;
  // Sliding-window attention: a position sees the last `sliding_window`
  // positions (itself included) in the layers where swa_layer[il] is set.
  int sliding_window = 0;
  std::vector<bool> swa_layer;   // n_layer entries, all false without a window
  bool tied_embeddings = false;  // no output.weight: the lm_head is token_embd

  int n_embd_q() const { return n_head * head_dim; }
  // The kernels scale q.k by 1/sqrt(head_dim); a model that wants another
  // scale has q multiplied by q_scale() first (head_rows).
  bool custom_attn_scale() const {
    return attn_scale != 0.0f && std::abs(attn_scale * std::sqrt(float(head_dim)) - 1.0f) > 1e-6f;
  }
  float q_scale() const {
    return attn_scale == 0.0f ? 1.0f : attn_scale * std::sqrt(float(head_dim));
  }
  int n_embd_kv() const { return n_head_kv * head_dim; }
  bool is_swa(int il) const { return swa_layer.empty() ? false : bool(swa_layer[size_t(il)]); }
  // Layer il's RoPE base and position scale.
  float rope_base(int il) const { return is_swa(il) ? rope_freq_base_swa : rope_freq_base; }
  float rope_scale(int il) const { return is_swa(il) ? 1.0f : rope_freq_scale; }
  // The llama graph (SmolLM2, Llama 2 and 3, TinyLlama): adjacent-pair RoPE
  // (its scale and frequency factors live in the RoPE table), SiLU, q as
  // wide as the embedding, none of the other options above. The decode
  // plan's fused kernels and the persistent decode kernels take only these;
  // every other model runs on the general path (ClPrefill's kernels).
  bool plain_llama() const {
    return rope_style == RopeStyle::Adjacent && ffn_act == FfnActivation::Silu &&
           n_embd_q() == n_embd && embed_scale == 1.0f && !qk_norm && !post_norms && !qkv_bias &&
           sliding_window == 0 && !custom_attn_scale();
  }
};

// Shapes in GGUF order ([values per row, rows]); the optional tensors are
// null unless the config asks for them.
struct LayerTensors {
  const GgufTensor* attn_norm;                 // [n_embd]
  const GgufTensor* wq;                        // [n_embd, n_embd_q]
  const GgufTensor* wk;                        // [n_embd, n_embd_kv]
  const GgufTensor* wv;                        // [n_embd, n_embd_kv]
  const GgufTensor* wo;                        // [n_embd_q, n_embd]
  const GgufTensor* ffn_norm;                  // [n_embd]
  const GgufTensor* ffn_gate;                  // [n_embd, n_ff]
  const GgufTensor* ffn_up;                    // [n_embd, n_ff]
  const GgufTensor* ffn_down;                  // [n_ff, n_embd]
  const GgufTensor* bq = nullptr;              // [n_embd_q]   qkv_bias
  const GgufTensor* bk = nullptr;              // [n_embd_kv]
  const GgufTensor* bv = nullptr;              // [n_embd_kv]
  const GgufTensor* q_norm = nullptr;          // [head_dim]   qk_norm
  const GgufTensor* k_norm = nullptr;          // [head_dim]
  const GgufTensor* post_attn_norm = nullptr;  // [n_embd]     post_norms
  const GgufTensor* post_ffn_norm = nullptr;   // [n_embd]
};

struct ModelTensors {
  // Row ranges of fused tensors (Phi-3's attn_qkv and gate-and-up ffn_up)
  // that the layers point at as if they were tensors of their own.
  std::vector<std::shared_ptr<const GgufTensor>> views;
  const GgufTensor* token_embd;            // [n_embd, n_vocab]
  const GgufTensor* output_norm;           // [n_embd]
  const GgufTensor* output;                // [n_embd, n_vocab]; == token_embd when tied
  const GgufTensor* rope_freqs = nullptr;  // [n_rot / 2] F32, rope_freq_factors
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
