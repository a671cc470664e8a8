// What a forward pass can report besides its output: per-layer statistics of
// the hidden state (debug readback mode) and device times (profiling).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace clchat {

struct HiddenStats {
  double mean = 0, rms = 0, min = 0, max = 0;
  int64_t n_nan = 0, n_inf = 0;
};
HiddenStats compute_hidden_stats(std::span<const float> x);

struct DebugReport {
  int pos = -1;                                // position the report belongs to
  std::vector<HiddenStats> after_attention;    // one per layer
  std::vector<HiddenStats> after_ffn;          // one per layer
  std::vector<std::pair<int32_t, float>> top;  // top-5 (id, probability)
};

// The top `k` logits as (id, softmax probability), highest first; ties go to
// the lower id and NaN never ranks.
std::vector<std::pair<int32_t, float>> top_probabilities(std::span<const float> logits, size_t k);

struct ProfileReport {
  std::vector<double> layer_us;             // device time per layer, last token
  std::map<std::string, double> kernel_us;  // per kernel name, summed over the token
  double total_us = 0;
  int n_launches = 0;

  // One launch of `label` in layer `layer` (-1: none) that took `us`.
  void add(const std::string& label, int layer, double us) {
    kernel_us[label] += us;
    if (layer >= 0 && size_t(layer) < layer_us.size()) layer_us[size_t(layer)] += us;
    total_us += us;
    ++n_launches;
  }
};

}  // namespace clchat
