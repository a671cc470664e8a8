// Scalar reference operations: float32 storage, float64 accumulation, written
// for reading. They are the oracle the OpenCL kernels are tested against.
// Output comes first, as in llama2.c: op(out, in..., sizes).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

namespace clchat::cpu {

// out = x / sqrt(mean(x^2) + eps) * weight
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
// W (d rows of n) @ x (n,) -> out (d,)
void matvec(float* out, const float* x, const float* w, int n, int d);
// Rotates adjacent pairs (x[2i], x[2i+1]) of each head's first n_rot values by
// pos * freq_base^(-2i / n_rot) ("normal" RoPE, as GGUF stores llama weights).
void rope(float* x, int n_heads, int head_dim, int n_rot, int pos, float freq_base);
void softmax(float* x, int n);
inline float silu(float x) { return float(double(x) / (1.0 + std::exp(-double(x)))); }
// Index of the largest value: NaN never wins, +inf does, ties go to the lowest
// index; returns 0 when every value is NaN.
int32_t argmax(std::span<const float> x);

}  // namespace clchat::cpu
