// The model families clchat runs, as data: what each one's graph does
// differently from llama's, in the terms of ModelConfig (model.h). The loader
// combines a family's traits with the file's keys (model.cpp); nothing else
// looks at the family's name.
//
//   family  RoPE      FFN    extras
//   llama   adjacent  SiLU   rope_freqs.weight (Llama 3.1+) when present
//   qwen2   NeoX      SiLU   q/k/v biases
//   qwen3   NeoX      SiLU   q/k head norms
//   phi3    NeoX      SiLU   fused attn_qkv and gate-and-up ffn_up (split
//                            into views by the loader, any family may have
//                            them); its sliding-window key is ignored, as
//                            llama.cpp does
//   gemma3  NeoX      GELU   embeddings x sqrt(n_embd); q/k head norms;
//                            post-attention and post-FFN norms; a sliding
//                            window on 5 of every 6 layers, with RoPE base
//                            10,000 there (llama.cpp's gemma3 graph)
#pragma once

#include <string>
#include <string_view>

#include "engine/model/model.h"

namespace clchat {

struct ArchitectureTraits {
  std::string_view name;  // general.architecture
  RopeStyle rope_style;
  FfnActivation ffn_act;
  bool qk_norm;
  bool post_norms;
  bool qkv_bias;
  bool embed_scale_sqrt;  // embeddings x sqrt(n_embd)
  // Sliding-window pattern when the file sets attention.sliding_window:
  // layer il uses the window unless il % swa_period == swa_period - 1
  // (0: every layer).
  int swa_period;
  float rope_freq_base_swa;  // RoPE base of the sliding-window layers
  bool uses_window;          // whether attention.sliding_window applies
};

// The family named `arch`, or null.
const ArchitectureTraits* find_architecture(std::string_view arch);
// "llama, qwen2, qwen3, phi3, gemma3".
std::string known_architectures();

}  // namespace clchat
