// Row dot products for CPU devices (PoCL), shared by kernels/matvec_cpu.cl
// (one launch per matrix) and kernels/decode_persistent_cpu.cl (one launch
// per token); built before either. No kernels here.
//
// Device weight layout (engine/cl/weights.h): per block of 32 values 16
// nibble bytes (byte j holds value j in its low half, value j + 16 in its
// high half) or 32 int8, and the fp16 scales in a separate array (Q4_1: a
// (scale, min) pair per block); F32 and F16 rows as they are.
//
// Algorithm: a work-item computes NR whole rows with explicit 8-wide float
// vectors (one AVX2 register) and no local memory, barriers or
// cross-work-item reductions. Bytes 0..7 of a Q4 block hold values 0..7 (low
// nibbles) and 16..23 (high), bytes 8..15 values 8..15 and 24..31: widening 8
// bytes to int32 lanes (one vpmovzxbd from memory) and taking `& 15` and
// `>> 4` gives two float8 of codes that line up with contiguous float8 loads
// of x. Q4_0's offset 8 and Q4_1's minimum use the block sum of x, computed
// once per block for all rows; Q8_0 widens 8 int8 at a time. The fp16 scale
// is broadcast and converted with F16C. fma(), not mad(): PoCL did not
// contract mad() into vfmadd. Per block the products go into a float8
// accumulator per row, summed horizontally once per row. The NR rows (even:
// RoPE needs the pair (2i, 2i + 1) in one work-item) share each load of x.
// All arithmetic is float32 multiply-add, like matvec.cl. rows_dot_x16
// (further down) is the version both CPU decode paths take for the block
// types with integer codes: x as 16-bit integers with a scale per 32 values,
// vpmaddwd. (A first try of int16 x, in 2026-11, moved SmolLM2's logits by
// 1.8e-3; with a scale per 32 values the kernel is within 1e-5 of the
// float64 product of the quantized x, test_cl_cpu_dot_x16.)
//
// Q5_1, Q4_K, Q5_K and Q6_K (the layer types of K-quant mixes; Q4_K and Q5_K
// reach the device in their own layout only where a scale exceeds fp16, else
// as Q4_1 / Q5_1: engine/cl/block_layout.h) take the
// nibble loop with their extra bits or'ed in from small tables (q5_high,
// q6_high) and their own scale records. The other quantized types
// (kernels/quant_blocks.cl, built before this file) are read 8 values at a
// time by block_values8 with the same x loads and accumulators; BF16 rows
// like F32 ones. Q5_0 is among them: the engine stores it as Q8_0 on CPU
// devices (engine/cl/block_layout.h, device_type), whose int8 loop took
// SmolLM2 Q4_K_M's gate/up from 5.3-5.6 to 3.3-3.7 ms per token.
//
// The weight type is a parameter that is a literal at every call (GGML ids:
// 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, ...), and rows_dot is always inlined, so
// each call compiles to the loop of its type alone; one program can then
// hold matrices of several types (the persistent kernel's).

#ifndef NR
#define NR 4
#endif
#ifndef CPU_PORTABLE
#define CPU_PORTABLE 0
#endif
#if NR % 2 != 0
#error "NR must be even"
#endif
// Software prefetch distance in rows. A row of SmolLM2's down projection is
// 864 bytes of nibbles; NR of them read block by block are short
// interleaved streams that the hardware prefetchers did not follow: the
// first load of each cache line stalled (perf), and down-shaped matvecs ran
// at 12.6 G weights/s on 2 cores, 20.7 with a prefetch 8 rows ahead. In the
// persistent decode kernel 8 and 16 rows took the token from ~12 ms to ~8
// (16 a little ahead of 8, 4 and 32 behind; the VM's noise is ~10%).
#define PF_ROWS 16

// Loops over a work-item's NR rows, unrolled so the accumulators stay in
// registers (PoCL's pipeline left a 2-trip loop rolled, accumulators on the stack).
#define FOR_ROWS(r) __attribute__((opencl_unroll_hint)) for (int r = 0; r < NR; ++r)
#define CPU_INLINE inline __attribute__((always_inline))

inline float hsum8(float8 v) {
  const float4 a = v.lo + v.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}

// F16C through clang's target builtin (PoCL compiles for the host CPU and
// defines __F16C__ when it has it); -DCPU_PORTABLE=1 (tests) or another CPU
// selects the portable conversion.
#if defined(__F16C__) && !CPU_PORTABLE
#define USE_F16C 1
typedef short v8hi_t __attribute__((vector_size(16)));
#else
#define USE_F16C 0
#endif

// fp16 bits -> float, broadcast to 8 lanes; exact for every value (zero,
// subnormals, inf, NaN). PoCL's vload_half is a branchy scalar routine that
// cost more than the 32 multiply-adds of the block it scales; with F16C this
// is vpbroadcastw + vcvtph2ps.
inline float8 half_to_float8(ushort h) {
#if USE_F16C
  const short b = (short)h;
  const v8hi_t v = {b, b, b, b, b, b, b, b};
  return __builtin_ia32_vcvtph2ps256(v);
#else
  const uint em = h & 0x7fff;
  const float sub = (float)em * 0x1p-24f;      // zero and subnormals
  const uint norm = (em << 13) + 0x38000000u;  // exponent bias 15 -> 127
  const uint inf_nan = (em << 13) | 0x7f800000u;
  const uint bits = em < 0x400 ? as_uint(sub) : em >= 0x7c00 ? inf_nan : norm;
  return (float8)as_float(bits | (h & 0x8000u) << 16);
#endif
}

// The Q5 types' fifth bits, 8 values at a time: entry b holds (bit i of b) << 4 in
// lane i, so one 32-byte load and an or put a qh byte into 8 codes (shifting
// and masking qh per lane took Q5_0 decode to 0.6x of Q4_1's).
#define Q5H(b)                                                                         \
  {((b)&1) << 4, ((b)&2) << 3, ((b)&4) << 2, ((b)&8) << 1, (b)&16, ((b)&32) >> 1, ((b)&64) >> 2, \
   ((b)&128) >> 3}
#define Q5H4(b) Q5H(b), Q5H((b) + 1), Q5H((b) + 2), Q5H((b) + 3)
#define Q5H16(b) Q5H4(b), Q5H4((b) + 4), Q5H4((b) + 8), Q5H4((b) + 12)
#define Q5H64(b) Q5H16(b), Q5H16((b) + 16), Q5H16((b) + 32), Q5H16((b) + 48)
__constant int q5_high[256][8] __attribute__((aligned(32))) = {Q5H64(0), Q5H64(64), Q5H64(128),
                                                               Q5H64(192)};

// Q6_K's top two bits, 4 values at a time, with the codes' offset 32: entry
// b holds (bits 2i, 2i + 1 of b) * 16 - 32 in lane i, so that or-ing it into
// a nibble gives c - 32 (two's complement: -32 and -16 leave bits 0-3 clear),
// without 4 subtractions per block (the Q6_K dot 5-10% faster, one core).
#define Q6H(b) {(((b)&3) << 4) - 32, (((b)&12) << 2) - 32, ((b)&48) - 32, (((b)&192) >> 2) - 32}
#define Q6H4(b) Q6H(b), Q6H((b) + 1), Q6H((b) + 2), Q6H((b) + 3)
#define Q6H16(b) Q6H4(b), Q6H4((b) + 4), Q6H4((b) + 8), Q6H4((b) + 12)
#define Q6H64(b) Q6H16(b), Q6H16((b) + 16), Q6H16((b) + 32), Q6H16((b) + 48)
__constant int q6_high[256][4] __attribute__((aligned(16))) = {Q6H64(0), Q6H64(64), Q6H64(128),
                                                               Q6H64(192)};

// 1/sqrt(mean(x^2) + eps) over n values.
inline float rms_scale(const __global float* x, int n, float eps) {
  float8 acc = 0.0f;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const float8 v = vload8(0, x + i);
    acc = mad(v, v, acc);
  }
  float ss = hsum8(acc);
  for (; i < n; ++i) ss += x[i] * x[i];
  return rsqrt(ss / n + eps);
}

// dots[r] = W[row0 + r] . x' for r < NR (rows past n_rows read row row0
// instead, so every load stays inside the matrix), x' = x or x * g; W has
// type wt. use_g and wt are literals at every call: the compiler drops the
// unused paths.
CPU_INLINE void rows_dot(const int wt, const __global uchar* wq, const __global ushort* ws,
                         int n_in, int row0, int n_rows, const __global float* x,
                         const __global float* g, const int use_g, float* dots) {
  size_t row[NR];
  FOR_ROWS(r) row[r] = (size_t)(row0 + r < n_rows ? row0 + r : row0);
  float8 acc[NR];
  FOR_ROWS(r) acc[r] = 0.0f;

  if (wt == 0 || wt == 1 || wt == 30) {
    const __global float* wf = (const __global float*)wq;
    const __global half* wh = (const __global half*)wq;
    const __global ushort* wb = (const __global ushort*)wq;
    float tail[NR];
    FOR_ROWS(r) tail[r] = 0.0f;
    int i = 0;
    for (; i + 8 <= n_in; i += 8) {
      float8 xv = vload8(0, x + i);
      if (use_g) xv *= vload8(0, g + i);
      FOR_ROWS(r) {
        const size_t at = row[r] * n_in + i;
        const float8 wv = wt == 0   ? vload8(0, wf + at)
                          : wt == 1 ? vload_half8(0, wh + at)  // F16, BF16: not tuned
                                    : as_float8(convert_uint8(vload8(0, wb + at)) << 16);
        acc[r] = fma(wv, xv, acc[r]);
      }
    }
    for (; i < n_in; ++i) {
      const float xv = use_g ? x[i] * g[i] : x[i];
      FOR_ROWS(r) {
        const size_t at = row[r] * n_in + i;
        tail[r] += plain_value(wt, wq, at) * xv;
      }
    }
    FOR_ROWS(r) dots[r] = hsum8(acc[r]) + tail[r];
    return;
  }

  // Blocks of x are 128-byte aligned (buffers are, and a block is 32
  // floats): plain float8 loads. vload16 became 8-byte pieces on PoCL.
  const __global float8* x8 = (const __global float8*)x;
  const __global float8* g8 = (const __global float8*)g;
  const int nb = n_in / 32;
  size_t blk[NR];  // the row's first block
  FOR_ROWS(r) blk[r] = row[r] * nb;
  // Prefetches may point past the matrix (they never fault).
  const int line_blocks = 64 / QT_QB(wt);  // blocks per 64-byte line
  const size_t pf_blocks = (size_t)PF_ROWS * nb;
  FOR_ROWS(r) __builtin_prefetch((const __global uchar*)ws + (blk[r] + pf_blocks) * QT_SB(wt));
  for (int b = 0; b < nb; ++b) {
    float8 x0 = x8[4 * b], x1 = x8[4 * b + 1], x2 = x8[4 * b + 2], x3 = x8[4 * b + 3];
    if (use_g) {
      x0 *= g8[4 * b];
      x1 *= g8[4 * b + 1];
      x2 *= g8[4 * b + 2];
      x3 *= g8[4 * b + 3];
    }
    const float8 xs = (x0 + x1) + (x2 + x3);  // Q4_0: the codes' offset 8; Q4_1, Q5_1, K: mins
    if (b % line_blocks == 0) {
      FOR_ROWS(r) __builtin_prefetch(wq + (blk[r] + b + pf_blocks) * QT_QB(wt));
    }
    if (wt == 7 || wt == 12 || wt == 13 || wt == 14) {
      // Q5_1, Q4_K, Q5_K, Q6_K (the layer types of K-quant mixes): the
      // nibbles as above, the extra bits from the record, one float8 of codes
      // per 8 values.
      FOR_ROWS(r) {
        const __global uchar8* qb = (const __global uchar8*)(wq + (blk[r] + b) * 16);
        const int8 v0 = convert_int8(qb[0]), v1 = convert_int8(qb[1]);
        int8 c0 = v0 & 15, c1 = v1 & 15, c2 = v0 >> 4, c3 = v1 >> 4;
        if (wt == 14) {
          const uint4 rec = ((const __global uint4*)ws)[blk[r] + b];  // s0, s1, h0, h1
          // bits 2i, 2i + 1 of h0 (values 0-15) / h1 (16-31) to bits 4, 5, minus 32
          c0 |= (int8)(vload4(0, q6_high[rec.z & 0xff]), vload4(0, q6_high[(rec.z >> 8) & 0xff]));
          c1 |= (int8)(vload4(0, q6_high[(rec.z >> 16) & 0xff]), vload4(0, q6_high[rec.z >> 24]));
          c2 |= (int8)(vload4(0, q6_high[rec.w & 0xff]), vload4(0, q6_high[(rec.w >> 8) & 0xff]));
          c3 |= (int8)(vload4(0, q6_high[(rec.w >> 16) & 0xff]), vload4(0, q6_high[rec.w >> 24]));
          const float8 lo = fma(convert_float8(c0), x0, convert_float8(c1) * x1);
          const float8 hi = fma(convert_float8(c2), x2, convert_float8(c3) * x3);
          acc[r] = fma((float8)as_float(rec.x), lo, fma((float8)as_float(rec.y), hi, acc[r]));
          continue;
        }
        // The record: scale, min factor and, for the Q5 types, qh.
        float8 d, m;
        uint qh = 0;
        if (wt == 12 || wt == 13) {
          const uint4 rec = wt == 13 ? ((const __global uint4*)ws)[blk[r] + b]
                                     : (uint4)(((const __global uint2*)ws)[blk[r] + b], 0u, 0u);
          d = (float8)as_float(rec.x);
          m = (float8)-as_float(rec.y);
          qh = rec.z;
        } else {
          const uint2 rec = ((const __global uint2*)ws)[blk[r] + b];  // d, m, qh
          d = half_to_float8((ushort)rec.x);
          m = half_to_float8((ushort)(rec.x >> 16));
          qh = rec.y;
        }
        if (wt != 12) {
          c0 |= vload8(0, q5_high[qh & 0xff]);
          c1 |= vload8(0, q5_high[(qh >> 8) & 0xff]);
          c2 |= vload8(0, q5_high[(qh >> 16) & 0xff]);
          c3 |= vload8(0, q5_high[qh >> 24]);
        }
        float8 t = fma(convert_float8(c0), x0, convert_float8(c1) * x1);
        t = fma(convert_float8(c2), x2, fma(convert_float8(c3), x3, t));
        acc[r] = fma(d, t, fma(m, xs, acc[r]));
      }
      continue;
    }
    if (QT_GENERIC(wt)) {
      FOR_ROWS(r) {
        const __global uchar* s8 = (const __global uchar*)ws;
        float8 t = block_values8(wt, wq, s8, blk[r] + b, 0) * x0;
        t = fma(block_values8(wt, wq, s8, blk[r] + b, 1), x1, t);
        t = fma(block_values8(wt, wq, s8, blk[r] + b, 2), x2, t);
        acc[r] = fma(block_values8(wt, wq, s8, blk[r] + b, 3), x3, acc[r] + t);
      }
      continue;
    }
    FOR_ROWS(r) {
      if (wt == 8) {
        // Eight int8 at a time: one vpmovsxbd from memory each.
        const __global char8* c = (const __global char8*)(wq + (blk[r] + b) * 32);
        float8 t = convert_float8(convert_int8(c[0])) * x0;
        t = fma(convert_float8(convert_int8(c[1])), x1, t);
        t = fma(convert_float8(convert_int8(c[2])), x2, t);
        t = fma(convert_float8(convert_int8(c[3])), x3, t);
        acc[r] = fma(half_to_float8(ws[blk[r] + b]), t, acc[r]);
      } else {
        // Bytes 0..7 hold values 0..7 (low nibbles) and 16..23 (high), bytes
        // 8..15 values 8..15 and 24..31: each group of 8 bytes widened to
        // int32 lanes (one vpmovzxbd from memory) gives two float8 of codes.
        const __global uchar8* qb = (const __global uchar8*)(wq + (blk[r] + b) * 16);
        const int8 v0 = convert_int8(qb[0]), v1 = convert_int8(qb[1]);
        float8 t = convert_float8(v0 & 15) * x0;
        t = fma(convert_float8(v1 & 15), x1, t);
        t = fma(convert_float8(v0 >> 4), x2, t);
        t = fma(convert_float8(v1 >> 4), x3, t);
        if (wt == 2) {
          acc[r] = fma(half_to_float8(ws[blk[r] + b]), fma((float8)-8.0f, xs, t), acc[r]);
        } else {
          const ushort2 dm = ((const __global ushort2*)ws)[blk[r] + b];
          acc[r] = fma(half_to_float8(dm.x), t, acc[r]);
          acc[r] = fma(half_to_float8(dm.y), xs, acc[r]);
        }
      }
    }
  }
  FOR_ROWS(r) dots[r] = hsum8(acc[r]);
}

// ---- 16-bit activations ----------------------------------------------------
//
// rows_dot_x16 is rows_dot for the block types whose codes are small
// integers (X16_TYPE: Q4_0, Q4_1, Q5_1, Q8_0 and the Q5_0 stored as it,
// Q4_K, Q5_K, Q6_K) with x given as 16-bit integers: per block of 32 values
// one float scale d (max |x| / 32767, q = round-half-even(x / d)), and the
// block's sum of d q for the offsets and minimums. The codes are widened to
// 16 bits (one vpmovzxbw of the 16 nibble bytes: values 0..15 in the low
// nibbles, 16..31 in the high ones, the order of x) and vpmaddwd sums their
// products with x's pairs into 8 32-bit lanes; one conversion to float per
// block and row, where the float loop converts 32 codes. The codes of a
// block times 32767 stay far inside 32 bits (|code| <= 128: 4 products of
// at most 2^22 a lane). kernels/matmul_x16.cl does the same for prefill;
// its accuracy notes apply.
#define X16_TYPE(t) \
  ((t) == 2 || (t) == 3 || (t) == 7 || (t) == 8 || (t) == 12 || (t) == 13 || (t) == 14)
// The address space of x's 16-bit form: __global (the persistent kernel:
// a slot per work-group) unless the program is built with -DX16_AS=__local
// (matvec_cpu.cl: one per work-group in local memory).
#ifndef X16_AS
#define X16_AS __global
#endif
// x's 16-bit form: q (n values), and per block of 32 the scale d and sum s.
typedef struct {
  const X16_AS short16* q;  // two short16 a block: values 0..15, 16..31
  const X16_AS float* d;
  const X16_AS float* s;
} X16;

// Bytes of x16_quantize's output for n values (a multiple of 32): q, then d
// and s; 128-byte aligned sections.
#define X16_BYTES(n) ((n)*2 + ((n) / 32 * 8 + 127) / 128 * 128)

// The 16-bit form of n values at `at` (X16_BYTES(n) bytes).
inline X16 x16_view(X16_AS uchar* at, int n) {
  const X16_AS float* d = (const X16_AS float*)(at + n * 2);
  const X16 r = {(const X16_AS short16*)at, d, d + n / 32};
  return r;
}

// x' (n values, a multiple of 32) -> its 16-bit form at `out` (X16_BYTES(n)),
// x' = x, or x * scale * g (rounded as norm_into's x[i] * scale * g[i]) when
// g is given.
inline X16 x16_quantize(const __global float* x, const __global float* g, float scale, int n,
                        X16_AS uchar* out) {
  X16_AS short* q = (X16_AS short*)out;
  X16_AS float* d = (X16_AS float*)(out + n * 2);
  X16_AS float* s = d + n / 32;
  for (int b = 0; b < n / 32; ++b) {
    float8 v0 = vload8(4 * b, x), v1 = vload8(4 * b + 1, x);
    float8 v2 = vload8(4 * b + 2, x), v3 = vload8(4 * b + 3, x);
    if (g) {
      v0 = v0 * scale * vload8(4 * b, g);
      v1 = v1 * scale * vload8(4 * b + 1, g);
      v2 = v2 * scale * vload8(4 * b + 2, g);
      v3 = v3 * scale * vload8(4 * b + 3, g);
    }
    const float8 a = fmax(fmax(fabs(v0), fabs(v1)), fmax(fabs(v2), fabs(v3)));
    const float4 a4 = fmax(a.lo, a.hi);
    const float amax = fmax(fmax(a4.x, a4.y), fmax(a4.z, a4.w));
    // Blocks below 2^-110 (~8e-34) become zeros: 32767 / amax stays finite.
    const float id = amax >= 0x1p-110f ? 32767.0f / amax : 0.0f;
    const int8 c0 = convert_int8_rte(v0 * id), c1 = convert_int8_rte(v1 * id);
    const int8 c2 = convert_int8_rte(v2 * id), c3 = convert_int8_rte(v3 * id);
    vstore8(convert_short8(c0), 4 * b, q);
    vstore8(convert_short8(c1), 4 * b + 1, q);
    vstore8(convert_short8(c2), 4 * b + 2, q);
    vstore8(convert_short8(c3), 4 * b + 3, q);
    const int8 cs = (c0 + c1) + (c2 + c3);
    const int4 c4 = cs.lo + cs.hi;
    // An inf or NaN in the block (exponent bits all set; integer tests, which
    // -cl-fast-relaxed-math keeps) makes the scale and sum NaN, so it reaches
    // every dot product as the float loop's arithmetic would spread it.
    const int8 e = max(max(as_int8(v0) & 0x7fffffff, as_int8(v1) & 0x7fffffff),
                       max(as_int8(v2) & 0x7fffffff, as_int8(v3) & 0x7fffffff));
    const int4 e4 = max(e.lo, e.hi);
    const bool finite = max(max(e4.x, e4.y), max(e4.z, e4.w)) < 0x7f800000;
    d[b] = finite ? amax / 32767.0f : as_float(0x7fc00000);
    s[b] = d[b] * (float)((c4.x + c4.y) + (c4.z + c4.w));
  }
  return x16_view(out, n);
}

// 32-bit lanes: a[2i] * b[2i] + a[2i + 1] * b[2i + 1] (vpmaddwd).
inline int8 madd_pairs16(short16 a, short16 b) {
#if defined(__AVX2__) && !CPU_PORTABLE
  return as_int8(__builtin_ia32_pmaddwd256(a, b));
#else
  const int16 p = convert_int16(a) * convert_int16(b);
  return p.even + p.odd;
#endif
}

// 8 fp16 values -> floats (vcvtph2ps with F16C).
inline float8 halves_to_float8(ushort8 h) {
#if USE_F16C
  return __builtin_ia32_vcvtph2ps256(as_short8(h));
#else
  float8 r;
  float* p = (float*)&r;
  for (int i = 0; i < 8; ++i) p[i] = half_to_float8(((ushort*)&h)[i]).s0;
  return r;
#endif
}

// Bit i of h (Q5_0, Q5_1, Q5_K's qh for 16 values) as bit 4 of lane i.
// Compares, not table loads: PoCL split a table's 16-byte loads into pieces
// (Q5_1 decode ran at 0.4x of Q4_1's).
inline short16 fifth_bits16(ushort h) {
  const ushort16 bit = (ushort16)(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                  16384, 32768);
  return as_short16(((ushort16)h & bit) != (ushort16)0) & (short16)16;
}

// Bits 2i and 2i + 1 of h (Q6_K's top bits of 16 values) as bits 4 and 5
// of lane i, minus 32 (the codes' offset), to be or'ed into the nibbles:
// one dword broadcast and a swizzle put h's low half in lanes 0-7 and its
// high half in 8-15, a multiply by 2^(14 - 2i) lifts lane i's bits to 14 and
// 15, one shift for all lanes brings them down. (AVX2 has no per-lane
// 16-bit shift: the per-lane shifts this replaced became 32-bit halves and
// packs, and the two half-word broadcasts 7 instructions; Q6_K's rows ran
// at 0.4x of Q4_K's bytes a second.)
inline short16 top_bits16(uint h) {
  const ushort16 v = as_ushort16((uint8)h).s0000000011111111;
  const ushort16 lift = (ushort16)(16384, 4096, 1024, 256, 64, 16, 4, 1, 16384, 4096, 1024, 256,
                                   64, 16, 4, 1);
  return as_short16(((v * lift) >> (ushort16)10) & (ushort16)0x30) - (short16)32;
}

// Q6_K block blk's codes minus 32 (values 0..15 in *lo, 16..31 in *hi).
CPU_INLINE void q6k_codes16(const __global uchar* wq, const __global ushort* ws, size_t blk,
                            short16* lo, short16* hi) {
  const short16 v = convert_short16(*(const __global uchar16*)(wq + blk * 16));
  const uint2 h = vload2(0, (const __global uint*)ws + blk * 4 + 2);  // the record's h0, h1
  *lo = (v & (short16)15) | top_bits16(h.x);
  *hi = (v >> (short16)4) | top_bits16(h.y);
}

// The codes of block blk (a matrix of block type X16_TYPE(wt), not Q6_K)
// times block b of x's 16-bit codes: 8 int lanes that sum to sum(c q).
// Q4_0's offset and the minimums are left to block_terms8.
CPU_INLINE int8 block_codes_x16(const int wt, const __global uchar* wq, const __global ushort* ws,
                                size_t blk, X16 x, int b) {
  short16 lo, hi;
  if (wt == 8) {
    const __global char16* c = (const __global char16*)(wq + blk * 32);
    lo = convert_short16(c[0]);
    hi = convert_short16(c[1]);
  } else {
    const short16 v = convert_short16(*(const __global uchar16*)(wq + blk * 16));
    lo = v & (short16)15;
    hi = v >> (short16)4;
    if (wt == 7 || wt == 13) {  // the fifth bits: qh, the record's second / third word
      const uint qh = ((const __global uint*)ws)[blk * (wt == 7 ? 2 : 4) + (wt == 7 ? 1 : 2)];
      lo |= fifth_bits16((ushort)qh);
      hi |= fifth_bits16((ushort)(qh >> 16));
    }
  }
  return madd_pairs16(lo, x.q[2 * b]) + madd_pairs16(hi, x.q[2 * b + 1]);
}

// For blocks blk .. blk + 7 of such a matrix and blocks b .. b + 7 of x: in
// lane j, the factor of block j's sum(c q) (its scale times x's) in *scale,
// and its offset or minimum term in *term (Q4_0: -8 d sum(x), Q4_1, Q5_1,
// Q4_K, Q5_K: m sum(x), Q8_0: 0). Eight blocks' records at a time, so a
// block's own work is the integer dot product and one multiply-add.
CPU_INLINE void block_terms8(const int wt, const __global ushort* ws, size_t blk, X16 x, int b,
                             float8* scale, float8* term) {
  const float8 dx = vload8(0, x.d + b), sx = vload8(0, x.s + b);
  float8 d, m = 0.0f;
  if (wt == 2 || wt == 8) {
    d = halves_to_float8(vload8(0, ws + blk));
    m = wt == 2 ? -8.0f * d : 0.0f;
  } else if (wt == 3) {
    const ushort16 dm = vload16(0, ws + blk * 2);
    d = halves_to_float8(dm.even);
    m = halves_to_float8(dm.odd);
  } else if (wt == 7) {
    const uint16 rec = vload16(0, (const __global uint*)ws + blk * 2);  // (d | m << 16, qh)
    d = halves_to_float8(convert_ushort8(rec.even & 0xffff));
    m = halves_to_float8(convert_ushort8(rec.even >> 16));
  } else if (wt == 12) {
    const uint16 rec = vload16(0, (const __global uint*)ws + blk * 2);  // (d, -m) as floats
    d = as_float8(rec.even);
    m = -as_float8(rec.odd);
  } else {  // Q5_K: (d, -m, qh, 0)
    const uint16 r0 = vload16(0, (const __global uint*)ws + blk * 4);
    const uint16 r1 = vload16(0, (const __global uint*)ws + blk * 4 + 16);
    d = as_float8((uint8)(r0.s048c, r1.s048c));
    m = -as_float8((uint8)(r0.s159d, r1.s159d));
  }
  *scale = d * dx;
  *term = m * sx;
}

// Block blk of a matrix of block type X16_TYPE(wt) times block b of x in
// 16-bit form, one block at a time (the ends of rows; not Q6_K): 8 float
// lanes that sum to the dot product.
CPU_INLINE float8 block_dot_x16(const int wt, const __global uchar* wq, const __global ushort* ws,
                                size_t blk, X16 x, int b) {
  const float8 dx = (float8)x.d[b];
  float8 d, m = 0.0f;
  if (wt == 2 || wt == 8) {
    d = half_to_float8(ws[blk]);
    if (wt == 2) m = -8.0f * d;
  } else if (wt == 3) {
    const ushort2 dm = ((const __global ushort2*)ws)[blk];
    d = half_to_float8(dm.x);
    m = half_to_float8(dm.y);
  } else if (wt == 7) {
    const uint rec = ((const __global uint*)ws)[blk * 2];  // d | m << 16
    d = half_to_float8((ushort)rec);
    m = half_to_float8((ushort)(rec >> 16));
  } else {  // Q4_K, Q5_K: float scale and minus the minimum
    const uint2 rec = vload2(0, (const __global uint*)ws + blk * (wt == 13 ? 4 : 2));
    d = (float8)as_float(rec.x);
    m = (float8)-as_float(rec.y);
  }
  const float8 t = convert_float8(block_codes_x16(wt, wq, ws, blk, x, b));
  return fma(d, t * dx, m * (float8)(x.s[b] * 0.125f));  // the term spread over the 8 lanes
}

// rows_dot (x' = x, no g) of a block type X16_TYPE(wt) with x in 16-bit
// form. Row after row, each read front to back (x again per row, from L1),
// with the software prefetch PF_ROWS rows ahead: in a probe of lm_head-sized
// Q8_0 rows this streamed 1.2-1.9x faster than NR rows read block by block
// as rows_dot does (whole decode tokens measured alike within the VM's
// noise). Eight blocks at a time take their scales and terms from
// block_terms8 (Q6_K: its two scales a block times x's, as a vector); the
// rest of a row goes block by block. Two accumulators a row, for even and
// odd blocks (Q6_K: values 0..15 and 16..31). (The rows and
// the eight blocks unrolled, the first version, made the first start with an
// empty kernel cache 8 s longer for SmolLM2 Q4_1, this one 3.6 s, and
// decoded no faster.)
CPU_INLINE void rows_dot_x16(const int wt, const __global uchar* wq, const __global ushort* ws,
                             int n_in, int row0, int n_rows, X16 x, float* dots) {
  const int nb = n_in / 32;
  // Rows one at a time, not unrolled: they share only x, and each copy of
  // the block loop costs PoCL build time at a user's first start.
  __attribute__((opencl_unroll_hint(1))) for (int r = 0; r < NR; ++r) {
    const size_t blk = (size_t)(row0 + r < n_rows ? row0 + r : row0) * nb;
    float8 acc0 = 0.0f, acc1 = 0.0f, terms = 0.0f;
    int b = 0;
    __builtin_prefetch((const __global uchar*)ws + (blk + PF_ROWS * nb) * QT_SB(wt));
    if (wt == 14) {
      // Q6_K: two scales a block, times x's, for eight blocks at a time.
      for (; b + 8 <= nb; b += 8) {
        const uint16 r0 = vload16(0, (const __global uint*)ws + (blk + b) * 4);
        const uint16 r1 = vload16(0, (const __global uint*)ws + (blk + b) * 4 + 16);
        const float8 dx = vload8(0, x.d + b);
        float f0[8], f1[8];
        vstore8(as_float8((uint8)(r0.s048c, r1.s048c)) * dx, 0, f0);
        vstore8(as_float8((uint8)(r0.s159d, r1.s159d)) * dx, 0, f1);
        for (int j = 0; j < 8; ++j) {
          if (j % (64 / QT_QB(wt)) == 0) {
            __builtin_prefetch(wq + (blk + PF_ROWS * nb + b + j) * QT_QB(wt));
          }
          short16 lo, hi;
          q6k_codes16(wq, ws, blk + b + j, &lo, &hi);
          acc0 = fma(convert_float8(madd_pairs16(lo, x.q[2 * (b + j)])), (float8)f0[j], acc0);
          acc1 = fma(convert_float8(madd_pairs16(hi, x.q[2 * (b + j) + 1])), (float8)f1[j], acc1);
        }
      }
    } else {
      for (; b + 8 <= nb; b += 8) {
        float8 sc, tm;
        block_terms8(wt, ws, blk + b, x, b, &sc, &tm);
        terms += tm;
        float f[8];
        vstore8(sc, 0, f);
        for (int j = 0; j < 8; j += 2) {
          if (j % (64 / QT_QB(wt)) == 0) {
            __builtin_prefetch(wq + (blk + PF_ROWS * nb + b + j) * QT_QB(wt));
          }
          acc0 = fma(convert_float8(block_codes_x16(wt, wq, ws, blk + b + j, x, b + j)),
                     (float8)f[j], acc0);
          acc1 = fma(convert_float8(block_codes_x16(wt, wq, ws, blk + b + j + 1, x, b + j + 1)),
                     (float8)f[j + 1], acc1);
        }
      }
    }
    // The rest of the row (K-quant rows are whole 256-value superblocks:
    // none for Q6_K).
    for (; wt != 14 && b < nb; ++b) {
      if ((b * QT_QB(wt)) % 64 == 0) __builtin_prefetch(wq + (blk + PF_ROWS * nb + b) * QT_QB(wt));
      acc0 += block_dot_x16(wt, wq, ws, blk + b, x, b);
    }
    dots[r] = hsum8(acc0 + acc1) + hsum8(terms);
  }
}

// NR row dot products from row0, with x * g * scale when g is given.
CPU_INLINE void norm_rows_dot(const int wt, const __global uchar* wq, const __global ushort* ws,
                              int n_in, int row0, int n_rows, const __global float* x,
                              const __global float* g, float scale, float* dots) {
  if (g) {
    rows_dot(wt, wq, ws, n_in, row0, n_rows, x, g, 1, dots);
    FOR_ROWS(r) dots[r] *= scale;
  } else {
    rows_dot(wt, wq, ws, n_in, row0, n_rows, x, 0, 0, dots);
  }
}

// Rows gr and gr + 1 (gr even) of the stacked [q; k; v] projection: RoPE on
// q and k pairs (the first n_rot dimensions of each head), then q -> q,
// k and v -> the cache at cache_off (floats; this layer and position).
inline void rope_store_pair(int gr, float a, float b, int n_embd, int n_embd_kv, int head_dim,
                            int n_rot, const __global float2* rope_cs, int pos, __global float* q,
                            __global float* k_cache, __global float* v_cache, ulong cache_off) {
  const int in_head = (gr < n_embd ? gr : gr - n_embd) % head_dim;
  if (gr < n_embd + n_embd_kv && in_head < n_rot) {
    const float2 cs = rope_cs[pos * (n_rot / 2) + in_head / 2];
    const float ra = a * cs.x - b * cs.y;
    b = a * cs.y + b * cs.x;
    a = ra;
  }
  __global float* dst;
  if (gr < n_embd) {
    dst = q + gr;
  } else if (gr < n_embd + n_embd_kv) {
    dst = k_cache + cache_off + (gr - n_embd);
  } else {
    dst = v_cache + cache_off + (gr - n_embd - n_embd_kv);
  }
  dst[0] = a;
  dst[1] = b;
}
