// Quantizers of the 32-value block types. Q4_0, Q4_1 and Q8_0 compute what
// GGML's scalar reference routines compute (tests/gguf/test_quant.cpp checks
// hand-computed bytes). Q5_0, Q5_1 and IQ4_NL are clchat's own, simple
// choices: a per-block abs-max or min/max scale, codes rounded against the
// fp16-rounded scale that is stored; IQ4_NL searches its scale (see
// iq4_best_scale). Any valid block dequantizes, so these need not match
// llama.cpp's bytes, only keep the error small.
#include <array>
#include <cstring>

#include "engine/gguf/quant.h"
#include "engine/gguf/quantize_impl.h"

namespace clchat::quant_detail {

namespace {

float fp16_round(float f) { return fp16_to_fp32(fp32_to_fp16(f)); }

// Packs 32 codes of up to 5 bits as the Q5 types store them: nibble j of the
// 16 bytes (low half: value j, high half: value j + 16), bit j of qh: bit 4.
void pack_q5(const uint8_t* codes, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((codes[j] & 15) | (codes[j + 16] & 15) << 4);
    h |= uint32_t(codes[j] >> 4) << j;
    h |= uint32_t(codes[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh, &h, 4);
}

}  // namespace

void quantize_q4_0(const float* x, BlockQ4_0* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float v = x[i * 32 + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const float x0 = x[i * 32 + j] * id;
      const float x1 = x[i * 32 + 16 + j] * id;
      const uint8_t q0 = uint8_t(std::min(15, int(x0 + 8.5f)));
      const uint8_t q1 = uint8_t(std::min(15, int(x1 + 8.5f)));
      b[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    float min = INFINITY, max = -INFINITY;
    for (int j = 0; j < 32; ++j) {
      min = std::min(min, x[i * 32 + j]);
      max = std::max(max, x[i * 32 + j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(min);
    for (int j = 0; j < 16; ++j) {
      const float x0 = (x[i * 32 + j] - min) * id;
      const float x1 = (x[i * 32 + 16 + j] - min) * id;
      const uint8_t q0 = uint8_t(std::min(15, int(x0 + 0.5f)));
      const uint8_t q1 = uint8_t(std::min(15, int(x1 + 0.5f)));
      b[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

// Q5_0: x = (q - 16) d. The value of largest magnitude takes code 0 (-16 d),
// so its sign decides d's; codes round against the stored fp16 d.
void quantize_q5_0(const float* x, BlockQ5_0* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 32) {
    const float d = fp16_round(signed_abs_max(x, 32) / -16.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t codes[32];
    for (int j = 0; j < 32; ++j) codes[j] = uint8_t(round_clamp(x[j] * id + 16.0f, 0, 31));
    b[i].d = fp32_to_fp16(d);
    pack_q5(codes, b[i].qs, b[i].qh);
  }
}

// Q5_1: x = q d + m with m the block's minimum and d its range / 31, both as
// stored (fp16); codes round against them.
void quantize_q5_1(const float* x, BlockQ5_1* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 32) {
    const auto [lo, hi] = std::minmax_element(x, x + 32);
    const float m = fp16_round(*lo);
    const float d = fp16_round((*hi - m) / 31.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t codes[32];
    for (int j = 0; j < 32; ++j) codes[j] = uint8_t(round_clamp((x[j] - m) * id, 0, 31));
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(m);
    pack_q5(codes, b[i].qs, b[i].qh);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) b[i].qs[j] = int8_t(std::roundf(x[i * 32 + j] * id));
  }
}

// ---- IQ4: 16 non-uniform levels (k_iq4_values, ascending) times a scale ----

// Midpoints between neighbouring code values: the nearest code to t is the
// number of midpoints below t (a tie goes to the lower code). Counting
// without branches keeps the scale search below cheap enough for whole models.
int iq4_nearest_code(float t) {
  static constexpr auto mid = [] {
    std::array<float, 15> m{};
    for (int i = 0; i < 15; ++i) m[size_t(i)] = 0.5f * float(k_iq4_values[i] + k_iq4_values[i + 1]);
    return m;
  }();
  int code = 0;
  for (const float m : mid) code += t > m;
  return code;
}

float iq4_sq_error(const float* x, int n, float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  float err = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float e = x[j] - d * float(k_iq4_values[iq4_nearest_code(x[j] * id)]);
    err += e * e;
  }
  return err;
}

// The end codes are -127 and +113: the largest |x| may sit on either, and a
// slightly smaller scale (0.9) often fits the bulk better at the cost of
// clipping the extreme a little. Four candidates, then the least-squares
// scale for the best one's codes (sum x v / sum v^2) if that is better still.
float iq4_best_scale(const float* x, int n) {
  const float ext = signed_abs_max(x, n);
  if (ext == 0.0f) return 0.0f;
  float best_d = 0.0f, best_err = INFINITY;
  for (const float end : {-127.0f, 113.0f}) {
    for (const float f : {1.0f, 0.9f}) {
      const float d = f * ext / end;
      const float err = iq4_sq_error(x, n, d);
      if (err < best_err) best_d = d, best_err = err;
    }
  }
  float sxv = 0.0f, svv = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float v = float(k_iq4_values[iq4_nearest_code(x[j] / best_d)]);
    sxv += x[j] * v;
    svv += v * v;
  }
  if (svv > 0.0f) {
    const float d = sxv / svv;
    if (d != 0.0f && iq4_sq_error(x, n, d) < best_err) best_d = d;
  }
  return best_d;
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 32) {
    const float d = fp16_round(iq4_best_scale(x, 32));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      b[i].qs[j] = uint8_t(iq4_nearest_code(x[j] * id) | iq4_nearest_code(x[j + 16] * id) << 4);
    }
  }
}

}  // namespace clchat::quant_detail
