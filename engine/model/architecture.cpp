#include "engine/model/architecture.h"

#include <array>

namespace clchat {

namespace {

constexpr RopeStyle kAdjacent = RopeStyle::Adjacent, kNeox = RopeStyle::Neox;
constexpr FfnActivation kSilu = FfnActivation::Silu, kGelu = FfnActivation::GeluTanh;

// Sources: llama.cpp's llm_build_* graphs and hparams (src/llama-model.cpp)
// and the families' published configs (Gemma 3: query_pre_attn_scalar =
// head_dim for the sizes up to 12B, sliding_window_pattern 6, rope_local_base_freq
// 10,000; Qwen 2/3: use_sliding_window false; Phi-3: llama.cpp disables the
// window its converter writes).
constexpr std::array<ArchitectureTraits, 5> kArchitectures = {{
    // name    rope      ffn    qk_norm post  bias   embed  period swa_base window
    {"llama", kAdjacent, kSilu, false, false, false, false, 0, 10000.0f, false},
    {"qwen2", kNeox, kSilu, false, false, true, false, 0, 10000.0f, false},
    {"qwen3", kNeox, kSilu, true, false, false, false, 0, 10000.0f, false},
    {"phi3", kNeox, kSilu, false, false, false, false, 0, 10000.0f, false},
    {"gemma3", kNeox, kGelu, true, true, false, true, 6, 10000.0f, true},
}};

}  // namespace

const ArchitectureTraits* find_architecture(std::string_view arch) {
  for (const ArchitectureTraits& a : kArchitectures) {
    if (a.name == arch) return &a;
  }
  return nullptr;
}

std::string known_architectures() {
  std::string list;
  for (const ArchitectureTraits& a : kArchitectures) {
    list += (list.empty() ? "" : ", ") + std::string(a.name);
  }
  return list;
}

}  // namespace clchat
