// GGUF blocks -> the device layout of block_layout.h.
#include "engine/cl/block_layout.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/gguf/kquant_scales.h"
#include "engine/gguf/quant.h"

namespace clchat {

namespace {

template <typename T>
void put(uint8_t* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}

// 32 codes of 4 bits (their low 4 bits) -> 16 nibble bytes.
void put_nibbles(uint8_t* dst, const int* codes) {
  for (int j = 0; j < 16; ++j) dst[j] = uint8_t((codes[j] & 15) | (codes[j + 16] & 15) << 4);
}
// 32 codes of 2 bits -> 8 bytes: byte k holds values k, k + 8, k + 16, k + 24.
void put_crumbs(uint8_t* dst, const int* codes) {
  for (int k = 0; k < 8; ++k) {
    dst[k] = uint8_t((codes[k] & 3) | (codes[k + 8] & 3) << 2 | (codes[k + 16] & 3) << 4 |
                     (codes[k + 24] & 3) << 6);
  }
}
// Bit `bit` of each of 32 codes -> a word whose bit j is value j's.
uint32_t bit_plane(const int* codes, int bit) {
  uint32_t w = 0;
  for (int j = 0; j < 32; ++j) w |= uint32_t((codes[j] >> bit) & 1) << j;
  return w;
}

// One 32-value group's output: its payload and record.
struct Out {
  uint8_t* q;
  uint8_t* s;
};

void legacy_block(GgmlType type, const uint8_t* b, Out o) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
      std::memcpy(o.q, b + 2, 16);
      std::memcpy(o.s, b, 2);
      return;
    case GgmlType::Q4_1:
      std::memcpy(o.q, b + 4, 16);
      std::memcpy(o.s, b, 4);
      return;
    case GgmlType::Q5_0:
      std::memcpy(o.q, b + 6, 16);
      std::memcpy(o.s, b, 2);
      put<uint16_t>(o.s + 2, 0);
      std::memcpy(o.s + 4, b + 2, 4);
      return;
    case GgmlType::Q5_1:
      std::memcpy(o.q, b + 8, 16);
      std::memcpy(o.s, b, 8);
      return;
    case GgmlType::Q8_0:
      std::memcpy(o.q, b + 2, 32);
      std::memcpy(o.s, b, 2);
      return;
    default:
      throw std::logic_error("legacy_block: not a 32-value block type");
  }
}

// Group g of a Q4_K / Q5_K super-block: its 32 codes (Q5_K's with the fifth
// bit) and its float scale d sc and minimum dmin m, GGML's products.
void k4_group(GgmlType type, const uint8_t* raw, int g, int* c, float* scale, float* min) {
  const bool q5 = type == GgmlType::Q5_K;
  const auto* b4 = reinterpret_cast<const BlockQ4_K*>(raw);
  const auto* b5 = reinterpret_cast<const BlockQ5_K*>(raw);
  const uint8_t* qs = (q5 ? b5->qs : b4->qs) + 32 * (g / 2);
  for (int l = 0; l < 32; ++l) {
    c[l] = g % 2 ? qs[l] >> 4 : qs[l] & 15;
    if (q5) c[l] |= ((b5->qh[l] >> g) & 1) << 4;
  }
  int sc, m;
  k4_scale_min(q5 ? b5->scales : b4->scales, g, &sc, &m);
  *scale = fp16_to_fp32(q5 ? b5->d : b4->d) * float(sc);
  *min = fp16_to_fp32(q5 ? b5->dmin : b4->dmin) * float(m);
}

// Group g (values 32 g .. 32 g + 31) of a super-block.
void super_group(GgmlType type, const uint8_t* raw, int g, Out o) {
  int c[32];
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = type == GgmlType::Q5_K;
      float scale, min;
      k4_group(type, raw, g, c, &scale, &min);
      put_nibbles(o.q, c);
      put<float>(o.s, scale);
      put<float>(o.s + 4, min);
      if (q5) {
        put<uint32_t>(o.s + 8, bit_plane(c, 4));
        put<uint32_t>(o.s + 12, 0);
      }
      return;
    }
    case GgmlType::Q6_K: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(raw);
      const int h = g / 4, sub = g % 4;
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b->ql[64 * h + 32 * (sub % 2) + l];
        c[l] = (sub < 2 ? lo & 15 : lo >> 4) | ((b->qh[32 * h + l] >> (2 * sub)) & 3) << 4;
      }
      const float d = fp16_to_fp32(b->d);
      put_nibbles(o.q, c);
      put<float>(o.s, d * float(b->scales[2 * g]));
      put<float>(o.s + 4, d * float(b->scales[2 * g + 1]));
      for (int half = 0; half < 2; ++half) {
        uint32_t w = 0;
        for (int j = 0; j < 16; ++j) w |= uint32_t(c[16 * half + j] >> 4) << (2 * j);
        put<uint32_t>(o.s + 8 + 4 * half, w);
      }
      return;
    }
    case GgmlType::Q3_K: {
      const auto* b = reinterpret_cast<const BlockQ3_K*>(raw);
      const int h = g / 4, sub = g % 4;
      for (int l = 0; l < 32; ++l) {
        c[l] = ((b->qs[32 * h + l] >> (2 * sub)) & 3) | ((b->hmask[l] >> (4 * h + sub)) & 1) << 2;
      }
      put_crumbs(o.q, c);
      std::memcpy(o.s, &b->d, 2);
      put<int8_t>(o.s + 2, int8_t(q3_k_scale(b->scales, 2 * g)));
      put<int8_t>(o.s + 3, int8_t(q3_k_scale(b->scales, 2 * g + 1)));
      put<uint32_t>(o.s + 4, bit_plane(c, 2));
      return;
    }
    case GgmlType::Q2_K: {
      const auto* b = reinterpret_cast<const BlockQ2_K*>(raw);
      const int h = g / 4, sub = g % 4;
      for (int l = 0; l < 32; ++l) c[l] = (b->qs[32 * h + l] >> (2 * sub)) & 3;
      put_crumbs(o.q, c);
      std::memcpy(o.s, &b->d, 2);
      std::memcpy(o.s + 2, &b->dmin, 2);
      o.s[4] = b->scales[2 * g];
      o.s[5] = b->scales[2 * g + 1];
      put<uint16_t>(o.s + 6, 0);
      return;
    }
    case GgmlType::IQ4_XS: {
      const auto* b = reinterpret_cast<const BlockIQ4_XS*>(raw);
      const int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b->scales_h >> (2 * g)) & 3)
                                                                        << 4;
      std::memcpy(o.q, b->qs + 16 * g, 16);
      put<float>(o.s, fp16_to_fp32(b->d) * float(ls - 32));
      return;
    }
    default:
      throw std::logic_error("super_group: not a super-block type");
  }
}

}  // namespace

int device_q_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 4;
    case GgmlType::F16:
    case GgmlType::BF16:
      return 2;
    case GgmlType::Q8_0:
      return 32;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      return 8;
    default:
      return 16;
  }
}

int device_s_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return 0;
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
      return 2;
    case GgmlType::Q4_1:
    case GgmlType::IQ4_XS:
      return 4;
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return 16;
    default:
      return 8;
  }
}

void repack_rows(GgmlType type, const uint8_t* data, int n_in, int rows, std::vector<uint8_t>& q,
                 std::vector<uint8_t>& s) {
  const auto row_bytes = ggml_row_bytes(type, uint64_t(n_in));
  if (!row_bytes || n_in <= 0 || rows < 0) {
    throw std::invalid_argument("repack_rows: row length does not fit type");
  }
  if (!ggml_is_quantized(type)) {
    q.assign(data, data + *row_bytes * size_t(rows));
    s.assign(4, 0);
    return;
  }
  const int qb = device_q_bytes(type), sb = device_s_bytes(type);
  const size_t groups = size_t(rows) * size_t(n_in / 32);
  q.assign(groups * size_t(qb), 0);
  s.assign(groups * size_t(sb), 0);
  const int bytes = ggml_block_bytes(type);
  const size_t n_blocks = size_t(rows) * size_t(n_in / ggml_block_size(type));
  const bool super = ggml_block_size(type) == k_super_block;
  for (size_t i = 0; i < n_blocks; ++i) {
    const uint8_t* raw = data + i * size_t(bytes);
    if (!super) {
      legacy_block(type, raw, {&q[i * qb], &s[i * sb]});
      continue;
    }
    for (int g = 0; g < 8; ++g) {
      const size_t at = i * 8 + size_t(g);
      super_group(type, raw, g, {&q[at * qb], &s[at * sb]});
    }
  }
}

GgmlType device_type(GgmlType type, bool cpu_device) {
  if (type == GgmlType::Q4_K) return GgmlType::Q4_1;
  if (type == GgmlType::Q5_K) return GgmlType::Q5_1;
  return cpu_device && type == GgmlType::Q5_0 ? GgmlType::Q8_0 : type;
}

std::vector<uint8_t> q5_0_as_q8_0(const uint8_t* data, size_t n_blocks) {
  std::vector<uint8_t> out(n_blocks * sizeof(BlockQ8_0));
  for (size_t i = 0; i < n_blocks; ++i) {
    BlockQ5_0 b;
    std::memcpy(&b, data + i * sizeof(BlockQ5_0), sizeof b);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    BlockQ8_0 o;
    o.d = b.d;
    for (int j = 0; j < 16; ++j) {
      o.qs[j] = int8_t(((b.qs[j] & 15) | ((qh >> j) & 1) << 4) - 16);
      o.qs[j + 16] = int8_t(((b.qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
    std::memcpy(out.data() + i * sizeof(BlockQ8_0), &o, sizeof o);
  }
  return out;
}

namespace {

uint16_t fp16_scale(float v) {
  const uint16_t h = fp32_to_fp16(v);
  if ((h & 0x7c00) == 0x7c00) {
    throw std::range_error("a K-quant block scale (" + std::to_string(v) +
                           ") exceeds the fp16 range of the device layout");
  }
  return h;
}

}  // namespace

std::vector<uint8_t> k_quant_as_legacy(GgmlType type, const uint8_t* data, size_t n_super) {
  if (type != GgmlType::Q4_K && type != GgmlType::Q5_K) {
    throw std::logic_error("k_quant_as_legacy: not Q4_K or Q5_K");
  }
  const bool q5 = type == GgmlType::Q5_K;
  const size_t in_bytes = size_t(ggml_block_bytes(type));
  const size_t out_bytes = q5 ? sizeof(BlockQ5_1) : sizeof(BlockQ4_1);
  std::vector<uint8_t> out(n_super * 8 * out_bytes);
  for (size_t i = 0; i < n_super; ++i) {
    for (int g = 0; g < 8; ++g) {
      int c[32];
      float scale, min;
      k4_group(type, data + i * in_bytes, g, c, &scale, &min);
      uint8_t* o = out.data() + (i * 8 + size_t(g)) * out_bytes;
      put<uint16_t>(o, fp16_scale(scale));
      put<uint16_t>(o + 2, fp16_scale(-min));
      if (q5) put<uint32_t>(o + 4, bit_plane(c, 4));
      put_nibbles(o + (q5 ? 8 : 4), c);
    }
  }
  return out;
}

}  // namespace clchat
