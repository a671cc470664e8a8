// Statistics for debug readback mode.
#include "engine/forward_reports.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace clchat {

HiddenStats compute_hidden_stats(std::span<const float> x) {
  HiddenStats s;
  double sum = 0, sum_sq = 0;
  int64_t n = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  for (float v : x) {
    if (std::isnan(v)) {
      ++s.n_nan;
      continue;
    }
    if (std::isinf(v)) ++s.n_inf;
    sum += v;
    sum_sq += double(v) * v;
    s.min = std::min(s.min, double(v));
    s.max = std::max(s.max, double(v));
    ++n;
  }
  if (n > 0) {
    s.mean = sum / double(n);
    s.rms = std::sqrt(sum_sq / double(n));
  } else {
    s.min = s.max = 0;
  }
  return s;
}

std::vector<std::pair<int32_t, float>> top_probabilities(std::span<const float> logits, size_t k) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) order.push_back(int32_t(i));
  }
  k = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double max = k ? logits[size_t(order[0])] : 0.0;
  double sum = 0;
  for (int32_t i : order) sum += std::exp(double(logits[size_t(i)]) - max);
  std::vector<std::pair<int32_t, float>> top;
  for (size_t i = 0; i < k; ++i) {
    top.emplace_back(order[i], float(std::exp(double(logits[size_t(order[i])]) - max) / sum));
  }
  return top;
}

}  // namespace clchat
