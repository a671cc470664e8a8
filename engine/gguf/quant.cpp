// Float32 <-> GGML storage types. Quantizers follow GGML's scalar reference
// routines (quantize_row_q4_0_ref and friends), so files written here load in
// llama.cpp and dequantize identically.
#include "engine/gguf/quant.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace clchat {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return uint16_t(sign | 0x7e00);   // NaN
  if (abs >= 0x477ff000) return uint16_t(sign | 0x7c00);  // overflow -> inf (rounds past 65504)
  if (abs < 0x38800000) {                                 // subnormal or zero in half
    if (abs < 0x33000000) return uint16_t(sign);          // below half of the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(sign | half);
}

namespace {

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

}  // namespace

void quantize_row(GgmlType type, const float* src, uint8_t* dst, uint64_t n) {
  const uint64_t nb = n / k_quant_block;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::Q4_0:
      quantize_q4_0(src, reinterpret_cast<BlockQ4_0*>(dst), nb);
      return;
    case GgmlType::Q4_1:
      quantize_q4_1(src, reinterpret_cast<BlockQ4_1*>(dst), nb);
      return;
    case GgmlType::Q8_0:
      quantize_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), nb);
      return;
    default:
      break;
  }
  throw std::invalid_argument(std::string("quantize_row: no quantizer for ") +
                              ggml_type_name(type));
}

std::vector<uint8_t> quantize_matrix(GgmlType type, std::span<const float> values, uint64_t n) {
  const auto row_bytes = ggml_row_bytes(type, n);
  if (!row_bytes || n == 0 || values.size() % n != 0) {
    throw std::invalid_argument(std::string("quantize_matrix: row length ") + std::to_string(n) +
                                " does not fit type " + ggml_type_name(type));
  }
  const uint64_t rows = values.size() / n;
  std::vector<uint8_t> out(rows * *row_bytes);
  for (uint64_t r = 0; r < rows; ++r) {
    quantize_row(type, values.data() + r * n, out.data() + r * *row_bytes, n);
  }
  return out;
}

}  // namespace clchat
