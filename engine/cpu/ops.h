// Scalar reference operations: float32 storage, float64 accumulation, written
// for reading. They are the oracle the OpenCL kernels are tested against.
// Output comes first, as in llama2.c: op(out, in..., sizes).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "engine/model/model.h"

namespace clchat::cpu {

// out = x / sqrt(mean(x^2) + eps) * weight
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
// W (d rows of n) @ x (n,) -> out (d,)
void matvec(float* out, const float* x, const float* w, int n, int d);
// Rotates pair i of each head's first n_rot values by the angle
// pos * scale * freq_base^(-2i / n_rot) / factors[i] (factors: null = 1).
// The pair is (x[2i], x[2i+1]) for RopeStyle::Adjacent ("normal" RoPE, as
// GGUF stores llama weights), (x[i], x[i + n_rot/2]) for RopeStyle::Neox.
struct RopeParams {
  RopeStyle style = RopeStyle::Adjacent;
  int n_rot = 0;
  float freq_base = 10000.0f;
  float scale = 1.0f;
  const float* factors = nullptr;
};
void rope(float* x, int n_heads, int head_dim, int pos, const RopeParams& p);
// The rotation angle of pair i at position pos.
double rope_angle(const RopeParams& p, int pos, int i);
void softmax(float* x, int n);
inline float silu(float x) { return float(double(x) / (1.0 + std::exp(-double(x)))); }
// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  const double v = x;
  return float(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}
// Index of the largest value: NaN never wins, +inf does, ties go to the lowest
// index; returns 0 when every value is NaN.
int32_t argmax(std::span<const float> x);

}  // namespace clchat::cpu
