// Float32 -> GGML storage types: the fp16 and bf16 conversions (bit for bit
// as GGML's) and quantize_row's dispatch to the block quantizers
// (quantize_block32.cpp, quantize_kquants.cpp). Every block they write is a
// valid GGUF block that llama.cpp loads; the Q4_0, Q4_1 and Q8_0 bytes are
// GGML's reference bytes, the other types' are clchat's own choice of scales.
#include "engine/gguf/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/gguf/quantize_impl.h"

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

template <typename Block>
Block* blocks(uint8_t* dst) {
  return reinterpret_cast<Block*>(dst);
}

}  // namespace

uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // NaN: quiet, sign kept
  // Round to nearest, ties to even: add just under half of the dropped
  // 16 bits, plus one when the kept part is odd. Overflow carries into inf.
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

void quantize_row(GgmlType type, const float* src, uint8_t* dst, uint64_t n) {
  using namespace quant_detail;
  const uint64_t block = uint64_t(ggml_block_size(type));
  if (n % block != 0) {
    throw std::invalid_argument("quantize_row: " + std::to_string(n) + " values are not whole " +
                                ggml_type_name(type) + " blocks");
  }
  const uint64_t nb = n / block;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::Q4_0:
      return quantize_q4_0(src, blocks<BlockQ4_0>(dst), nb);
    case GgmlType::Q4_1:
      return quantize_q4_1(src, blocks<BlockQ4_1>(dst), nb);
    case GgmlType::Q5_0:
      return quantize_q5_0(src, blocks<BlockQ5_0>(dst), nb);
    case GgmlType::Q5_1:
      return quantize_q5_1(src, blocks<BlockQ5_1>(dst), nb);
    case GgmlType::Q8_0:
      return quantize_q8_0(src, blocks<BlockQ8_0>(dst), nb);
    case GgmlType::IQ4_NL:
      return quantize_iq4_nl(src, blocks<BlockIQ4_NL>(dst), nb);
    case GgmlType::Q2_K:
      return quantize_q2_k(src, blocks<BlockQ2_K>(dst), nb);
    case GgmlType::Q3_K:
      return quantize_q3_k(src, blocks<BlockQ3_K>(dst), nb);
    case GgmlType::Q4_K:
      return quantize_q4_k(src, blocks<BlockQ4_K>(dst), nb);
    case GgmlType::Q5_K:
      return quantize_q5_k(src, blocks<BlockQ5_K>(dst), nb);
    case GgmlType::Q6_K:
      return quantize_q6_k(src, blocks<BlockQ6_K>(dst), nb);
    case GgmlType::IQ4_XS:
      return quantize_iq4_xs(src, blocks<BlockIQ4_XS>(dst), nb);
  }
  throw std::invalid_argument("quantize_row: unknown type id " + std::to_string(uint32_t(type)));
}

std::vector<uint8_t> quantize_matrix(GgmlType type, std::span<const float> values, uint64_t n) {
  const auto row_bytes = ggml_row_bytes(type, n);
  if (!row_bytes || n == 0 || values.size() % n != 0) {
    throw std::invalid_argument(std::string("quantize_matrix: row length ") + std::to_string(n) +
                                " does not fit type " + ggml_type_name(type));
  }
  const uint64_t rows = values.size() / n;
  std::vector<uint8_t> out(rows * *row_bytes);
  // Rows are independent: spread over the cores in contiguous ranges (the
  // bytes do not depend on the split). A 1B-shaped K-quant synth took ~2
  // minutes on one core.
  const auto quantize_rows = [&](uint64_t first, uint64_t last) {
    for (uint64_t r = first; r < last; ++r) {
      quantize_row(type, values.data() + r * n, out.data() + r * *row_bytes, n);
    }
  };
  const uint64_t work = rows * n;
  const unsigned n_threads =
      work < (1u << 20) ? 1u : std::max(1u, std::min(std::thread::hardware_concurrency(), 16u));
  std::vector<std::exception_ptr> errors(n_threads);
  std::vector<std::thread> threads;
  try {
    for (unsigned t = 1; t < n_threads; ++t) {
      threads.emplace_back([&, t] {
        try {
          quantize_rows(rows * t / n_threads, rows * (t + 1) / n_threads);
        } catch (...) {
          errors[t] = std::current_exception();
        }
      });
    }
  } catch (...) {  // no thread to be had: the ones started finish first
    for (std::thread& t : threads) t.join();
    throw;
  }
  try {
    quantize_rows(0, rows / n_threads);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

}  // namespace clchat
