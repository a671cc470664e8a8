#include "engine/cpu/ops.h"

#include <cmath>

namespace clchat::cpu {

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const double scale = 1.0 / std::sqrt(ss / n + double(eps));
  for (int i = 0; i < n; ++i) out[i] = float(double(x[i]) * scale * double(weight[i]));
}

void matvec(float* out, const float* x, const float* w, int n, int d) {
  for (int r = 0; r < d; ++r) {
    const float* row = w + int64_t(r) * n;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += double(row[i]) * double(x[i]);
    out[r] = float(sum);
  }
}

void rope(float* x, int n_heads, int head_dim, int n_rot, int pos, float freq_base) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < n_rot; i += 2) {
      const double theta = pos * std::pow(double(freq_base), -double(i) / n_rot);
      const double c = std::cos(theta), s = std::sin(theta);
      const double a = v[i], b = v[i + 1];
      v[i] = float(a * c - b * s);
      v[i + 1] = float(a * s + b * c);
    }
  }
}

void softmax(float* x, int n) {
  double max = x[0];
  for (int i = 1; i < n; ++i) max = std::max(max, double(x[i]));
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i]) - max);
  for (int i = 0; i < n; ++i) x[i] = float(std::exp(double(x[i]) - max) / sum);
}

int32_t argmax(std::span<const float> x) {
  int32_t best = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[size_t(best)]) best = int32_t(i);
  }
  return best < 0 ? 0 : best;
}

}  // namespace clchat::cpu
