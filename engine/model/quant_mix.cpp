// The per-tensor type rule of llama-quantize (llama.cpp, src/llama-quant.cpp:
// llama_tensor_get_type_impl and tensor_type_fallback, 2026), restricted to
// what clchat's models are: llama architecture, dense (no experts), no
// importance matrix, not the 70B shape (whose attn_v gets one more step),
// every tensor quantized from scratch. These are facts about llama.cpp's
// choices, written out here as a table:
//
//   file type  default  attn_v                  ffn_down                attn_output
//   Q2_K       Q2_K     Q4_K if gqa>=4 else Q3_K Q3_K                   Q3_K
//   Q3_K_S     Q3_K     -                       -                       -
//   Q3_K_M     Q3_K     Q5_K if il<2 else Q4_K  Q5_K if il<n/16 else Q4_K  Q4_K
//   Q3_K_L     Q3_K     Q5_K                    Q5_K                    Q5_K
//   Q4_K_S     Q4_K     Q5_K if il<4            Q5_K if il<n/8          -
//   Q4_K_M     Q4_K     Q6_K if more_bits(il)   Q6_K if more_bits(il)   -
//   Q5_K_S     Q5_K     -                       -                       -
//   Q5_K_M     Q5_K     Q6_K if more_bits(il)   Q6_K if more_bits(il)   -
//   Q6_K       Q6_K     -                       -                       -
//   IQ4_NL     IQ4_NL   Q5_K if gqa>=4          Q5_K if il<n/8          -
//   IQ4_XS     IQ4_XS   Q5_K if gqa>=4          Q5_K if il<n/8          -
// ("-": the default type; n: layers; gqa: n_head / n_head_kv; attn_q,
// attn_k, ffn_gate, ffn_up always get the default.)
//   more_bits(il) = il < n/8 || il >= 7n/8 || (il - n/8) % 3 == 2
// (integer division): the first and last eighth of the layers and every third
// one between them, 14 of SmolLM2's 30.
//
// The lm_head (output.weight, or token_embd.weight when the model ties it) is
// Q8_0 when its rows are not whole blocks of the default type, else Q6_K
// (Q8_0 stays Q8_0). An untied token_embd.weight gets the default type.
//
// Last, a type whose block does not divide the row length falls back:
// Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; IQ4_XS ->
// IQ4_NL; and F16 if the fallback does not fit either. (llama.cpp moved Q2_K's
// and Q3_K's fallback from IQ4_NL to Q4_0 in July 2024, PR #8489.) SmolLM2's
// rows of 576 take every fallback; its ffn_down rows of 1536 none.
//
// The single-type mixes give the seven layer matrices their type (with the
// same fallback for the 256-value types) and the embedding Q8_0, as clchat's
// synthetic models always had.
#include "engine/model/quant_mix.h"

#include <algorithm>
#include <cctype>

namespace clchat {

namespace {

// llama_ftype ids are llama.h's (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15, ...).
constexpr QuantMix k_mixes[] = {
    // single types
    {"q4_0", GgmlType::Q4_0, false, 2},
    {"q4_1", GgmlType::Q4_1, false, 3},
    {"q5_0", GgmlType::Q5_0, false, 8},
    {"q5_1", GgmlType::Q5_1, false, 9},
    {"q8_0", GgmlType::Q8_0, false, 7},
    {"q3_k", GgmlType::Q3_K, false, -1},  // llama-quantize reads these three as
    {"q4_k", GgmlType::Q4_K, false, -1},  // the _M mixes; here they are the
    {"q5_k", GgmlType::Q5_K, false, -1},  // single types
    {"f32", GgmlType::F32, false, 0},
    {"f16", GgmlType::F16, false, 1},
    {"bf16", GgmlType::BF16, false, 32},
    // llama-quantize file types
    {"q2_k", GgmlType::Q2_K, true, 10},
    {"q3_k_s", GgmlType::Q3_K, true, 11},
    {"q3_k_m", GgmlType::Q3_K, true, 12},
    {"q3_k_l", GgmlType::Q3_K, true, 13},
    {"q4_k_s", GgmlType::Q4_K, true, 14},
    {"q4_k_m", GgmlType::Q4_K, true, 15},
    {"q5_k_s", GgmlType::Q5_K, true, 16},
    {"q5_k_m", GgmlType::Q5_K, true, 17},
    {"q6_k", GgmlType::Q6_K, true, 18},
    {"iq4_nl", GgmlType::IQ4_NL, true, 25},
    {"iq4_xs", GgmlType::IQ4_XS, true, 30},
};

bool is(const QuantMix& mix, std::string_view name) { return std::string_view(mix.name) == name; }

bool more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The 32-value type a 256-value type falls back to (llama.cpp's table).
GgmlType fallback(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      return GgmlType::Q4_0;
    case GgmlType::Q4_K:
      return GgmlType::Q5_0;
    case GgmlType::Q5_K:
      return GgmlType::Q5_1;
    case GgmlType::Q6_K:
      return GgmlType::Q8_0;
    case GgmlType::IQ4_XS:
      return GgmlType::IQ4_NL;
    default:
      return t;  // no fallback: quantizing such a row fails
  }
}

GgmlType fit_rows(GgmlType t, uint64_t n_in) {
  if (n_in % uint64_t(ggml_block_size(t)) == 0) return t;
  const GgmlType f = fallback(t);
  if (f == t) return t;
  return n_in % uint64_t(ggml_block_size(f)) == 0 ? f : GgmlType::F16;
}

// llama_tensor_get_type_impl's choice before the fallback.
GgmlType llama_rule(const QuantMix& mix, std::string_view name, uint64_t n_in, int il,
                    const MixModel& m) {
  const int n = m.n_layer;
  const bool lm_head = name == "output.weight" || (m.tied && name == "token_embd.weight");
  if (lm_head) {
    if (n_in % uint64_t(ggml_block_size(mix.type)) != 0) return GgmlType::Q8_0;
    return mix.type == GgmlType::Q8_0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  }
  if (name == "token_embd.weight") return mix.type;
  const bool iq4 = is(mix, "iq4_nl") || is(mix, "iq4_xs");
  if (contains(name, "attn_v.weight")) {
    if (is(mix, "q2_k")) return m.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    if (is(mix, "q3_k_m")) return il < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    if (is(mix, "q3_k_l")) return GgmlType::Q5_K;
    if (iq4 && m.n_gqa >= 4) return GgmlType::Q5_K;
    if ((is(mix, "q4_k_m") || is(mix, "q5_k_m")) && more_bits(il, n)) return GgmlType::Q6_K;
    if (is(mix, "q4_k_s") && il < 4) return GgmlType::Q5_K;
    return mix.type;
  }
  if (contains(name, "ffn_down")) {
    if (is(mix, "q2_k")) return GgmlType::Q3_K;
    if (is(mix, "q3_k_m")) return il < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    if (is(mix, "q3_k_l")) return GgmlType::Q5_K;
    if (is(mix, "q4_k_m") && more_bits(il, n)) return GgmlType::Q6_K;
    if (iq4 && il < n / 8) return GgmlType::Q5_K;
    if (is(mix, "q5_k_m") && more_bits(il, n)) return GgmlType::Q6_K;
    if (is(mix, "q4_k_s") && il < n / 8) return GgmlType::Q5_K;
    return mix.type;
  }
  if (contains(name, "attn_output.weight")) {
    if (is(mix, "q2_k")) return GgmlType::Q3_K;
    if (is(mix, "q3_k_m")) return GgmlType::Q4_K;
    if (is(mix, "q3_k_l")) return GgmlType::Q5_K;
  }
  return mix.type;
}

}  // namespace

std::span<const QuantMix> quant_mixes() { return k_mixes; }

std::optional<QuantMix> quant_mix_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  for (const QuantMix& mix : k_mixes) {
    if (is(mix, lower)) return mix;
  }
  return std::nullopt;
}

const std::string& quant_mix_names() {
  static const std::string names = [] {
    std::string s;
    for (const QuantMix& mix : k_mixes) s += (s.empty() ? "" : ", ") + std::string(mix.name);
    return s;
  }();
  return names;
}

std::optional<std::string> llama_file_type_name(uint64_t file_type) {
  for (const QuantMix& mix : k_mixes) {
    if (mix.file_type >= 0 && uint64_t(mix.file_type) == file_type) {
      std::string s = mix.name;
      std::transform(s.begin(), s.end(), s.begin(),
                     [](unsigned char c) { return char(std::toupper(c)); });
      return s;
    }
  }
  return std::nullopt;
}

GgmlType mix_tensor_type(const QuantMix& mix, std::string_view name, uint64_t n_in, int il,
                         const MixModel& model) {
  if (!mix.llama_rule) {
    if (name == "token_embd.weight" || name == "output.weight") return GgmlType::Q8_0;
    return fit_rows(mix.type, n_in);
  }
  return fit_rows(llama_rule(mix, name, n_in, il, model), n_in);
}

}  // namespace clchat
