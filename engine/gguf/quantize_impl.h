// Block quantizers behind quantize_row() (engine/gguf/quant.cpp), one per
// GGML type, each writing `nb` whole blocks from nb * block-size floats.
//   quantize_block32.cpp: the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1,
//     Q8_0, IQ4_NL) and the IQ4 code search that IQ4_XS shares.
//   quantize_kquants.cpp: the 256-value super-block types (Q2_K..Q6_K,
//     IQ4_XS), whose per-group scales are themselves quantized to 4, 6 or 8
//     bits against one or two fp16 super-block scales.
// Internal to engine/gguf: callers use quant.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/gguf/ggml_types.h"

namespace clchat::quant_detail {

// Nearest integer to v, clamped to [lo, hi]; NaN gives lo.
inline int round_clamp(float v, int lo, int hi) {
  if (!(v > float(lo))) return lo;
  if (v >= float(hi)) return hi;
  return std::clamp(int(std::lround(v)), lo, hi);
}

// The value of largest magnitude, with its sign (0 for an empty or all-zero
// span): the symmetric types map it onto their most negative code.
inline float signed_abs_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// The IQ4 code (index into k_iq4_values) whose value is nearest to t.
int iq4_nearest_code(float t);
// Sum of squared errors of x[0..n) coded as d * k_iq4_values[nearest code].
float iq4_sq_error(const float* x, int n, float d);
// A scale for x[0..n) under the IQ4 codes: the best of a small grid around
// "the largest |x| lands on an end code", then refined by least squares.
float iq4_best_scale(const float* x, int n);

void quantize_q4_0(const float* x, BlockQ4_0* b, uint64_t nb);
void quantize_q4_1(const float* x, BlockQ4_1* b, uint64_t nb);
void quantize_q5_0(const float* x, BlockQ5_0* b, uint64_t nb);
void quantize_q5_1(const float* x, BlockQ5_1* b, uint64_t nb);
void quantize_q8_0(const float* x, BlockQ8_0* b, uint64_t nb);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* b, uint64_t nb);

void quantize_q2_k(const float* x, BlockQ2_K* b, uint64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* b, uint64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* b, uint64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* b, uint64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* b, uint64_t nb);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* b, uint64_t nb);

}  // namespace clchat::quant_detail
