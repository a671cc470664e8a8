// GGML storage types -> float32, value for value as GGML's reference
// dequantizers (and the gguf Python package's) compute them: every product
// and sum in float32, in the order written here (engine/CMakeLists.txt
// builds this file with -ffp-contract=off so no multiply-add is fused).
#include <cstring>
#include <stdexcept>

#include "engine/gguf/kquant_scales.h"
#include "engine/gguf/quant.h"

namespace clchat {

namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void dequantize_q4_0(const BlockQ4_0* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = float((b[i].qs[j] & 0x0f) - 8) * d;
      y[j + 16] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = float(b[i].qs[j] & 0x0f) * d + m;
      y[j + 16] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// Value j's code: nibble j (low halves for j < 16) with bit j of qh as bit 4.
int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int nibble = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
  return nibble | int((qh >> j) & 1) << 4;
}

void dequantize_q5_0(const BlockQ5_0* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 32; ++j) y[j] = float(q5_code(b[i].qs, qh, j) - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 32; ++j) y[j] = float(q5_code(b[i].qs, qh, j)) * d + m;
  }
}

void dequantize_q8_0(const BlockQ8_0* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = float(b[i].qs[j]) * d;
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(k_iq4_values[b[i].qs[j] & 0x0f]);
      y[j + 16] = d * float(k_iq4_values[b[i].qs[j] >> 4]);
    }
  }
}

// Q2_K: values 128 h + 32 s + l (h < 2, s < 4, l < 32) hold bits 2s, 2s + 1
// of qs[32 h + l]; group g = 8 h + 2 s + l / 16 of 16 values has scale
// d * (scales[g] & 15) and min dmin * (scales[g] >> 4).
void dequantize_q2_k(const BlockQ2_K* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      const uint8_t sc = b[i].scales[v / 16];
      const float dl = d * float(sc & 15);
      const float ml = dmin * float(sc >> 4);
      y[v] = dl * float((b[i].qs[32 * h + l] >> (2 * s)) & 3) - ml;
    }
  }
}

// Q3_K: value v = 128 h + 32 s + l has low bits 2s, 2s + 1 of qs[32 h + l]
// and, as its third bit, bit (4 h + s) of hmask[l]; a clear third bit means
// code - 4. Group v / 16 scales it by d * scale.
void dequantize_q3_k(const BlockQ3_K* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    const float d = fp16_to_fp32(b[i].d);
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      const float dl = d * float(q3_k_scale(b[i].scales, v / 16));
      const int low = (b[i].qs[32 * h + l] >> (2 * s)) & 3;
      const bool high = (b[i].hmask[l] >> (4 * h + s)) & 1;
      y[v] = dl * float(low - (high ? 0 : 4));
    }
  }
}

// Q4_K (qh null) and Q5_K: group g covers values 32 g .. 32 g + 31, the low
// (g even) or high nibbles of qs[32 (g / 2) + l]; Q5_K's bit g of qh[l] is
// the fifth bit of value 32 g + l. Value: d * scale * code - dmin * min.
void dequantize_k4_super_block(uint16_t d16, uint16_t dmin16, const uint8_t* scales,
                               const uint8_t* qs, const uint8_t* qh, float* y) {
  const float d = fp16_to_fp32(d16);
  const float dmin = fp16_to_fp32(dmin16);
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    k4_scale_min(scales, g, &sc, &m);
    const float dl = d * float(sc), ml = dmin * float(m);
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = qs[32 * (g / 2) + l];
      const int code = (g % 2 ? q >> 4 : q & 15) | (qh ? ((qh[l] >> g) & 1) << 4 : 0);
      y[32 * g + l] = dl * float(code) - ml;
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    dequantize_k4_super_block(b[i].d, b[i].dmin, b[i].scales, b[i].qs, nullptr, y);
  }
}

void dequantize_q5_k(const BlockQ5_K* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    dequantize_k4_super_block(b[i].d, b[i].dmin, b[i].scales, b[i].qs, b[i].qh, y);
  }
}

// Q6_K: value v = 128 h + 32 s + l has its low 4 bits in ql[64 h + 32 (s % 2)
// + l] (low nibble for s < 2, else high), its top 2 bits at bits 2s, 2s + 1
// of qh[32 h + l]; code - 32, times d * scales[v / 16].
void dequantize_q6_k(const BlockQ6_K* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    const float d = fp16_to_fp32(b[i].d);
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      const uint8_t lo = b[i].ql[64 * h + 32 * (s % 2) + l];
      const int code = (s < 2 ? lo & 15 : lo >> 4) | ((b[i].qh[32 * h + l] >> (2 * s)) & 3) << 4;
      y[v] = d * float(b[i].scales[v / 16]) * float(code - 32);
    }
  }
}

// IQ4_XS: group g (32 values) has the 6-bit scale (nibble g % 2 of
// scales_l[g / 2]) | (bits 2g, 2g + 1 of scales_h) << 4, offset 32; its 16
// bytes of qs hold codes as IQ4_NL's block does.
void dequantize_iq4_xs(const BlockIQ4_XS* b, float* y, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, y += 256) {
    const float d = fp16_to_fp32(b[i].d);
    for (int g = 0; g < 8; ++g) {
      const int ls =
          ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b[i].scales_h >> (2 * g)) & 3) << 4;
      const float dl = d * float(ls - 32);
      const uint8_t* qs = b[i].qs + 16 * g;
      for (int j = 0; j < 16; ++j) {
        y[32 * g + j] = dl * float(k_iq4_values[qs[j] & 15]);
        y[32 * g + j + 16] = dl * float(k_iq4_values[qs[j] >> 4]);
      }
    }
  }
}

template <typename Block>
const Block* blocks(const uint8_t* src) {
  return reinterpret_cast<const Block*>(src);
}

}  // namespace

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, uint64_t n) {
  const uint64_t nb = n / uint64_t(ggml_block_size(type));
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = type == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      return;
    case GgmlType::Q4_0:
      return dequantize_q4_0(blocks<BlockQ4_0>(src), dst, nb);
    case GgmlType::Q4_1:
      return dequantize_q4_1(blocks<BlockQ4_1>(src), dst, nb);
    case GgmlType::Q5_0:
      return dequantize_q5_0(blocks<BlockQ5_0>(src), dst, nb);
    case GgmlType::Q5_1:
      return dequantize_q5_1(blocks<BlockQ5_1>(src), dst, nb);
    case GgmlType::Q8_0:
      return dequantize_q8_0(blocks<BlockQ8_0>(src), dst, nb);
    case GgmlType::Q2_K:
      return dequantize_q2_k(blocks<BlockQ2_K>(src), dst, nb);
    case GgmlType::Q3_K:
      return dequantize_q3_k(blocks<BlockQ3_K>(src), dst, nb);
    case GgmlType::Q4_K:
      return dequantize_q4_k(blocks<BlockQ4_K>(src), dst, nb);
    case GgmlType::Q5_K:
      return dequantize_q5_k(blocks<BlockQ5_K>(src), dst, nb);
    case GgmlType::Q6_K:
      return dequantize_q6_k(blocks<BlockQ6_K>(src), dst, nb);
    case GgmlType::IQ4_NL:
      return dequantize_iq4_nl(blocks<BlockIQ4_NL>(src), dst, nb);
    case GgmlType::IQ4_XS:
      return dequantize_iq4_xs(blocks<BlockIQ4_XS>(src), dst, nb);
  }
}

std::vector<float> dequantize_matrix(GgmlType type, std::span<const uint8_t> bytes, uint64_t n,
                                     uint64_t rows) {
  const auto row_bytes = ggml_row_bytes(type, n);
  if (!row_bytes || bytes.size() < rows * *row_bytes) {
    throw std::invalid_argument("dequantize_matrix: buffer too small for its shape");
  }
  std::vector<float> out(rows * n);
  for (uint64_t r = 0; r < rows; ++r) {
    dequantize_row(type, bytes.data() + r * *row_bytes, out.data() + r * n, n);
  }
  return out;
}

}  // namespace clchat
