// Synthetic models: exact tensor shapes and types of a real model with
// deterministic random weights, so GPU benchmarks and tests need not ship the
// real weights. Matrices are uniform with standard deviation 1/sqrt(n_in)
// (activations stay O(1) through the layers); norm weights are near 1.
// Matrix types come either from layer_type/embd_type or from a QuantMix
// (engine/model/quant_mix.h: a single type, or llama-quantize's per-tensor
// rule for a file type such as Q4_K_M).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/quant_mix.h"

namespace clchat {

struct SyntheticSpec {
  std::string name = "synthetic";
  // A family of architecture.h: its optional tensors (biases, head norms,
  // post-norms) are written with the rest.
  std::string arch = "llama";
  int head_dim = 0;         // 0: n_embd / n_head (else attention.key_length)
  int sliding_window = 0;   // attention.sliding_window (0: none)
  bool rope_freqs = false;  // rope_freqs.weight with Llama 3.2's factors (factor 32, ctx 8192)
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 128;
  int n_vocab = 256;
  int n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  GgmlType layer_type = GgmlType::Q4_0;  // the seven matrices of each layer
  GgmlType embd_type = GgmlType::Q8_0;   // token embedding (and output when not tied)
  // When set, every matrix's type is mix_tensor_type()'s (layer_type and
  // embd_type are not used) and general.file_type is the mix's llama_ftype.
  std::optional<QuantMix> mix;
  bool tied = true;
  uint64_t seed = 1;
};

// Presets with the shapes of real models, all with a tied Q8_0 embedding:
// "smollm2-135m" (576 embd, 30 layers, 9 heads, 3 KV heads, FFN 1536, vocab
// 49152), "smollm2-360m" (960 x 32, 15 / 5 heads, FFN 2560), "smollm2-1.7b"
// (2048 x 24, 32 / 32 heads, FFN 8192), "llama-3.2-1b" (2048 x 16, 32 / 8
// heads, FFN 8192, vocab 128256, Llama 3's RoPE frequency factors),
// "qwen2.5-0.5b" (qwen2: 896 x 24, 14 / 2 heads, FFN 4864, vocab 151936,
// q/k/v biases), "gemma3-270m" (gemma3: 640 x 18, 4 / 1 heads of 256, FFN
// 2048, vocab 262144, window 512), "phi-3-mini" (phi3: 3072 x 32, 32 / 32
// heads, FFN 8192, vocab 32064, fused attn_qkv and gate-and-up). Throws
// std::invalid_argument naming the known ones.
SyntheticSpec synthetic_preset(std::string_view name);
// "smollm2-135m, smollm2-360m, ..." for help texts and errors.
const std::string& synthetic_preset_names();

// Builds the model. With `vocab_from`, its tokenizer.* metadata is copied (its
// vocabulary size must equal spec.n_vocab).
GgufWriter make_synthetic_model(const SyntheticSpec& spec, const GgufFile* vocab_from = nullptr);

// Writes the model to a fresh temporary file and returns its path (the caller
// removes it).
std::string write_synthetic_model_tmp(const SyntheticSpec& spec);

}  // namespace clchat
