// Weight-type mixes: which GGML type each matrix of a llama-architecture
// model gets. A mix is either a single type for the seven layer matrices
// (q4_0, q4_k, f16, ...: the embedding stays Q8_0) or one of llama-quantize's
// file types (q4_k_m, q3_k_s, q2_k, q6_k, iq4_xs, ...), for which
// mix_tensor_type() follows llama.cpp's per-tensor rule (llama_tensor_get_type
// in src/llama-quant.cpp, as of llama.cpp in 2026) for a dense llama model
// quantized without an importance matrix. quant_mix.cpp states the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/gguf/ggml_types.h"

namespace clchat {

struct QuantMix {
  const char* name;   // as --quant spells it: "q4_k_m"
  GgmlType type;      // the single type, or the file type's default type (Q4_K for q4_k_m)
  bool llama_rule;    // true: llama-quantize's per-tensor rule; false: a single type
  int32_t file_type;  // llama_ftype id for general.file_type (15 for Q4_K_M); -1: none
};

// Every mix: the single types first, then llama-quantize's file types.
std::span<const QuantMix> quant_mixes();
// The mix `name` stands for (case-insensitive), or nullopt.
std::optional<QuantMix> quant_mix_from_name(std::string_view name);
// Every accepted name, comma separated: "q4_0, q4_1, ..., iq4_xs".
const std::string& quant_mix_names();
// The llama-quantize file type with this general.file_type id among the
// mixes above ("Q4_K_M"), or nullopt.
std::optional<std::string> llama_file_type_name(uint64_t file_type);

// What the rule reads about the model besides a tensor's name and shape.
struct MixModel {
  int n_layer = 1;   // blocks (llama.cpp counts attn_v and ffn_down tensors: the same here)
  int n_gqa = 1;     // n_head / n_head_kv
  bool tied = true;  // no output.weight: token_embd is also the lm_head
};

// The type of the weight matrix `name` ("blk.7.attn_v.weight",
// "token_embd.weight", "output.weight") with rows of n_in values, in layer
// `il` (ignored outside layers). One-dimensional tensors (norms) are not
// quantized: they stay F32 and are not asked about. When n_in is not a whole
// number of the chosen type's blocks, llama-quantize's fallback applies
// (Q4_K -> Q5_0, Q6_K -> Q8_0, ...; F16 if even that does not fit).
GgmlType mix_tensor_type(const QuantMix& mix, std::string_view name, uint64_t n_in, int il,
                         const MixModel& model);

}  // namespace clchat
