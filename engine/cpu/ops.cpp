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

double rope_angle(const RopeParams& p, int pos, int i) {
  const double theta =
      double(pos) * double(p.scale) * std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
  return p.factors ? theta / double(p.factors[i]) : theta;
}

void rope(float* x, int n_heads, int head_dim, int pos, const RopeParams& p) {
  const int half = p.n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const double theta = rope_angle(p, pos, i);
      const double c = std::cos(theta), s = std::sin(theta);
      float& a_ref = p.style == RopeStyle::Adjacent ? v[2 * i] : v[i];
      float& b_ref = p.style == RopeStyle::Adjacent ? v[2 * i + 1] : v[i + half];
      const double a = a_ref, b = b_ref;
      a_ref = float(a * c - b * s);
      b_ref = float(a * s + b * c);
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
