// Quantizers of the 256-value super-block types: Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K and IQ4_XS (layouts in ggml_types.h, formulas in dequantize.cpp).
// clchat's own method, in three steps per super-block:
//  1. Each group (16 or 32 values) gets a float scale (and, for the
//     asymmetric types, a float offset): min/max or abs-max to start, then
//     two rounds of least squares over the codes that scale gives.
//  2. The super-block scale d (and dmin) is the largest group scale (offset)
//     over the top of the group-scale code range: 15 for Q2_K's 4 bits, 63
//     for Q4_K/Q5_K's unsigned 6 bits, 31 for Q3_K's and IQ4_XS's signed 6
//     bits, 127 for Q6_K's int8. It is rounded up to the next fp16, so that
//     group's scale stays within the codes even when d is an fp16 subnormal.
//  3. Each group's scale code is the floor or the ceiling of scale / d
//     (and the same for the offset), whichever gives the smaller squared
//     error once the values are coded again against the stored, quantized
//     scale. The codes written are those.
// The result is a valid block with close to uniform-quantizer error; it is
// not llama.cpp's (imatrix-weighted, searched) choice, nor meant to be.
#include <cstring>
#include <type_traits>

#include "engine/gguf/quant.h"
#include "engine/gguf/quantize_impl.h"

namespace clchat::quant_detail {

namespace {

// The nearest fp16 at or above f >= 0 (as stored): a super-block scale
// rounded down would leave its largest group past the top scale code.
float fp16_round_up(float f) {
  uint16_t h = fp32_to_fp16(f);
  if (fp16_to_fp32(h) < f && h < 0x7c00) ++h;
  return fp16_to_fp32(h);
}

// ---- asymmetric groups: x = s q - o, q in [0, qmax], o >= 0 ----------------------

// Squared error of x[0..n) coded against scale s and offset o; codes to q.
float asym_error(const float* x, int n, float s, float o, int qmax, uint8_t* q) {
  const float is = s > 0.0f ? 1.0f / s : 0.0f;
  float err = 0.0f;
  for (int j = 0; j < n; ++j) {
    q[j] = uint8_t(s > 0.0f ? round_clamp((x[j] + o) * is, 0, qmax) : 0);
    const float e = x[j] - (s * float(q[j]) - o);
    err += e * e;
  }
  return err;
}

// A group's float scale and offset: the range [min(x, 0), max(x)] split in
// qmax steps, then least squares of x on the codes (o kept >= 0: the types
// store it as an unsigned multiple of dmin).
void fit_asym(const float* x, int n, int qmax, float* s_out, float* o_out) {
  const auto [lo_it, hi_it] = std::minmax_element(x, x + n);
  const float lo = std::min(*lo_it, 0.0f);
  float o = -lo, s = (*hi_it - lo) / float(qmax);
  uint8_t q[32];
  float best = asym_error(x, n, s, o, qmax, q);
  for (int it = 0; it < 2 && s > 0.0f; ++it) {
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
      sq += q[j], sx += x[j], sqq += double(q[j]) * q[j], sqx += double(q[j]) * x[j];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) break;
    double s_ls = (n * sqx - sq * sx) / det;
    double o_ls = (s_ls * sq - sx) / n;
    if (o_ls < 0) o_ls = 0, s_ls = sqq > 0 ? sqx / sqq : 0;  // best fit through 0
    if (!(s_ls > 0)) break;
    uint8_t q2[32];
    const float err = asym_error(x, n, float(s_ls), float(o_ls), qmax, q2);
    if (!(err < best)) break;
    best = err, s = float(s_ls), o = float(o_ls);
    std::memcpy(q, q2, size_t(n));
  }
  *s_out = s;
  *o_out = o;
}

// Codes of one asymmetric super-block: group scales sc[g] and offsets m[g]
// (both in [0, smax]) against fp16 d and dmin; codes q[256] in [0, qmax].
struct AsymCodes {
  uint16_t d, dmin;
  uint8_t sc[16], m[16];
  uint8_t q[256];
};

AsymCodes quantize_asym(const float* x, int n_groups, int group, int qmax, int smax) {
  float s[16], o[16], s_max = 0.0f, o_max = 0.0f;
  for (int g = 0; g < n_groups; ++g) {
    fit_asym(x + g * group, group, qmax, &s[g], &o[g]);
    s_max = std::max(s_max, s[g]);
    o_max = std::max(o_max, o[g]);
  }
  AsymCodes c;
  const float d = fp16_round_up(s_max / float(smax));
  const float dmin = fp16_round_up(o_max / float(smax));
  c.d = fp32_to_fp16(d);
  c.dmin = fp32_to_fp16(dmin);
  for (int g = 0; g < n_groups; ++g) {
    const float* xg = x + g * group;
    const float s_steps = d > 0.0f ? s[g] / d : 0.0f;
    const float o_steps = dmin > 0.0f ? o[g] / dmin : 0.0f;
    float best = INFINITY;
    for (const int sc :
         {round_clamp(std::floor(s_steps), 0, smax), round_clamp(std::ceil(s_steps), 0, smax)}) {
      for (const int m :
           {round_clamp(std::floor(o_steps), 0, smax), round_clamp(std::ceil(o_steps), 0, smax)}) {
        uint8_t q[32];
        const float err = asym_error(xg, group, d * float(sc), dmin * float(m), qmax, q);
        if (err < best) {
          best = err;
          c.sc[g] = uint8_t(sc);
          c.m[g] = uint8_t(m);
          std::memcpy(c.q + g * group, q, size_t(group));
        }
      }
    }
  }
  return c;
}

// ---- symmetric groups: x = s q, q in [qlo, qhi] --------------------------------

float sym_error(const float* x, int n, float s, int qlo, int qhi, int8_t* q) {
  const float is = s != 0.0f ? 1.0f / s : 0.0f;
  float err = 0.0f;
  for (int j = 0; j < n; ++j) {
    q[j] = int8_t(round_clamp(x[j] * is, qlo, qhi));
    const float e = x[j] - s * float(q[j]);
    err += e * e;
  }
  return err;
}

// A group's signed float scale: the largest |x| on either end code (qlo or
// qhi), whichever fits better, then least squares (sum x q / sum q^2).
float fit_sym(const float* x, int n, int qlo, int qhi) {
  const float ext = signed_abs_max(x, n);
  if (ext == 0.0f) return 0.0f;
  int8_t q[32];
  float s = ext / float(qlo), best = sym_error(x, n, s, qlo, qhi, q);
  const float s_hi = ext / float(qhi);
  const float err_hi = sym_error(x, n, s_hi, qlo, qhi, q);
  if (err_hi < best) best = err_hi, s = s_hi;
  for (int it = 0; it < 2; ++it) {
    sym_error(x, n, s, qlo, qhi, q);
    float sxq = 0.0f, sqq = 0.0f;
    for (int j = 0; j < n; ++j) sxq += x[j] * float(q[j]), sqq += float(q[j]) * float(q[j]);
    if (sqq <= 0.0f) break;
    const float s_ls = sxq / sqq;
    const float err = sym_error(x, n, s_ls, qlo, qhi, q);
    if (!(err < best)) break;
    best = err, s = s_ls;
  }
  return s;
}

// Scale codes in [-smax - 1, smax] for signed group scales s[g] against one
// fp16 d (= max |s| / smax); err(g, group scale) picks floor or ceiling.
template <typename ErrorFn>
float quantize_signed_scales(const float* s, int n_groups, int smax, int* sc, ErrorFn err) {
  float s_abs_max = 0.0f;
  for (int g = 0; g < n_groups; ++g) s_abs_max = std::max(s_abs_max, std::fabs(s[g]));
  const float d = fp16_round_up(s_abs_max / float(smax));
  for (int g = 0; g < n_groups; ++g) {
    const float steps = d > 0.0f ? s[g] / d : 0.0f;
    const int lo = round_clamp(std::floor(steps), -smax - 1, smax);
    const int hi = round_clamp(std::ceil(steps), -smax - 1, smax);
    sc[g] = lo == hi || err(g, d * float(lo)) <= err(g, d * float(hi)) ? lo : hi;
  }
  return d;
}

// Symmetric super-block with integer codes in [qlo, qhi] (Q3_K, Q6_K): group
// scale codes sc[g], codes q[256] (signed, before any storage offset).
struct SymCodes {
  float d;
  int sc[16];
  int8_t q[256];
};

SymCodes quantize_sym(const float* x, int n_groups, int group, int qlo, int qhi, int smax) {
  float s[16];
  for (int g = 0; g < n_groups; ++g) s[g] = fit_sym(x + g * group, group, qlo, qhi);
  SymCodes c;
  int8_t q[32];
  c.d = quantize_signed_scales(s, n_groups, smax, c.sc, [&](int g, float sg) {
    return sym_error(x + g * group, group, sg, qlo, qhi, q);
  });
  for (int g = 0; g < n_groups; ++g) {
    sym_error(x + g * group, group, c.d * float(c.sc[g]), qlo, qhi, c.q + g * group);
  }
  return c;
}

}  // namespace

// Q2_K: 16 groups of 16, codes 0..3, 4-bit scale and min. Value v = 128 h +
// 32 s + l sits at bits 2s, 2s + 1 of qs[32 h + l].
void quantize_q2_k(const float* x, BlockQ2_K* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 256) {
    const AsymCodes c = quantize_asym(x, 16, 16, 3, 15);
    std::memset(&b[i], 0, sizeof(BlockQ2_K));
    b[i].d = c.d;
    b[i].dmin = c.dmin;
    for (int g = 0; g < 16; ++g) b[i].scales[g] = uint8_t(c.sc[g] | c.m[g] << 4);
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      b[i].qs[32 * h + l] |= uint8_t(c.q[v] << (2 * s));
    }
  }
}

// Q3_K: 16 groups of 16, values (code - 4) with code 0..7, signed 6-bit
// scales stored + 32: low nibbles in scales[0..7] (groups 8..15 in the high
// halves), top bit pairs in scales[8 + g % 4] at bits 2 (g / 4). Code bits
// 0, 1 go to qs as Q2_K's, bit 2 to bit 4 h + s of hmask[l].
void quantize_q3_k(const float* x, BlockQ3_K* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 256) {
    const SymCodes c = quantize_sym(x, 16, 16, -4, 3, 31);
    std::memset(&b[i], 0, sizeof(BlockQ3_K));
    b[i].d = fp32_to_fp16(c.d);
    for (int g = 0; g < 16; ++g) {
      const int u = c.sc[g] + 32;
      b[i].scales[g % 8] |= uint8_t((u & 15) << (g < 8 ? 0 : 4));
      b[i].scales[8 + g % 4] |= uint8_t((u >> 4) << (2 * (g / 4)));
    }
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      const int code = c.q[v] + 4;
      b[i].qs[32 * h + l] |= uint8_t((code & 3) << (2 * s));
      b[i].hmask[l] |= uint8_t((code >> 2) << (4 * h + s));
    }
  }
}

namespace {

// Q4_K's and Q5_K's 12 scale bytes for 8 6-bit scales and mins (the inverse
// of kquant_scales.h's k4_scale_min).
void pack_k4_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int g = 0; g < 4; ++g) {
    s[g] = uint8_t(sc[g] | (sc[g + 4] >> 4) << 6);
    s[g + 4] = uint8_t(m[g] | (m[g + 4] >> 4) << 6);
    s[g + 8] = uint8_t((sc[g + 4] & 15) | (m[g + 4] & 15) << 4);
  }
}

// Q4_K: 8 groups of 32, codes 0..15; group g in the low (g even) or high
// nibbles of qs[32 (g / 2) + l]. Q5_K (Block = BlockQ5_K): the same with
// codes 0..31, bit 4 of value 32 g + l at bit g of qh[l].
template <typename Block>
void quantize_k4_family(const float* x, Block* b, uint64_t nb) {
  constexpr bool q5 = std::is_same_v<Block, BlockQ5_K>;
  for (uint64_t i = 0; i < nb; ++i, x += 256) {
    const AsymCodes c = quantize_asym(x, 8, 32, q5 ? 31 : 15, 63);
    b[i].d = c.d;
    b[i].dmin = c.dmin;
    pack_k4_scales(c.sc, c.m, b[i].scales);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    if constexpr (q5) std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int v = 0; v < 256; ++v) {
      const int g = v / 32, l = v % 32;
      b[i].qs[32 * (g / 2) + l] |= uint8_t((c.q[v] & 15) << (4 * (g % 2)));
      if constexpr (q5) b[i].qh[l] |= uint8_t((c.q[v] >> 4) << g);
    }
  }
}

}  // namespace

void quantize_q4_k(const float* x, BlockQ4_K* b, uint64_t nb) { quantize_k4_family(x, b, nb); }
void quantize_q5_k(const float* x, BlockQ5_K* b, uint64_t nb) { quantize_k4_family(x, b, nb); }

// Q6_K: 16 groups of 16, values (code - 32) with code 0..63, int8 scales.
// Value v = 128 h + 32 s + l: low nibble in ql[64 h + 32 (s % 2) + l] (low
// half for s < 2), top 2 bits at bits 2s of qh[32 h + l].
void quantize_q6_k(const float* x, BlockQ6_K* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 256) {
    const SymCodes c = quantize_sym(x, 16, 16, -32, 31, 127);
    std::memset(&b[i], 0, sizeof(BlockQ6_K));
    b[i].d = fp32_to_fp16(c.d);
    for (int g = 0; g < 16; ++g) b[i].scales[g] = int8_t(c.sc[g]);
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = v / 32 % 4, l = v % 32;
      const int code = c.q[v] + 32;
      b[i].ql[64 * h + 32 * (s % 2) + l] |= uint8_t((code & 15) << (s < 2 ? 0 : 4));
      b[i].qh[32 * h + l] |= uint8_t((code >> 4) << (2 * s));
    }
  }
}

// IQ4_XS: 8 groups of 32 with IQ4_NL's codes, signed 6-bit group scales
// stored + 32: low nibble in scales_l[g / 2] (g odd: high half), top 2 bits
// at bits 2g of scales_h.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* b, uint64_t nb) {
  for (uint64_t i = 0; i < nb; ++i, x += 256) {
    float s[8];
    for (int g = 0; g < 8; ++g) s[g] = iq4_best_scale(x + 32 * g, 32);
    int sc[8];
    const float d = quantize_signed_scales(
        s, 8, 31, sc, [&](int g, float sg) { return iq4_sq_error(x + 32 * g, 32, sg); });
    std::memset(&b[i], 0, sizeof(BlockIQ4_XS));
    b[i].d = fp32_to_fp16(d);
    for (int g = 0; g < 8; ++g) {
      const int u = sc[g] + 32;
      b[i].scales_l[g / 2] |= uint8_t((u & 15) << (4 * (g % 2)));
      b[i].scales_h |= uint16_t((u >> 4) << (2 * g));
      const float dl = d * float(sc[g]);
      const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
      const float* xg = x + 32 * g;
      for (int j = 0; j < 16; ++j) {
        b[i].qs[16 * g + j] =
            uint8_t(iq4_nearest_code(xg[j] * id) | iq4_nearest_code(xg[j + 16] * id) << 4);
      }
    }
  }
}

}  // namespace clchat::quant_detail
