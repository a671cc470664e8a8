// Prefill matrix-matrix product on CPU devices with the activations as
// 16-bit integers, for Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights
// (-DWTYPE=2, 3, 7, 8, 12, 13 or 14; Q5_0 is Q8_0 on CPU devices) in the
// block layout of engine/cl/block_layout.h (payloads and scale records in
// separate buffers; K-quants as their groups of 32 with float scales).
//
// Why 16 bits: with llama.cpp's 8-bit activations (one scale per 32 values,
// or per 16 here) the kernel ran 1.8x faster, but SmolLM2-135M-Instruct's
// logits moved 2-13% (||delta|| / ||ref||) on a ChatML prompt, its first reply
// token flipped against the float64 reference where the reference's margin
// is ~3 (llama.cpp's CPU build flips it the same way), and greedy ids
// flipped at margins of 0.06: outside the accuracy budget (greedy ids up to
// the first margin < 0.05). At 16 bits the logits stay within 2e-4.
//
// quantize_x16 turns a chunk's activations into int16 values with a float
// scale per 16 (d = max|x| / 32767, q = round-half-even(x / d)), laid out for
// the product: tokens in groups of 8; per group and block of 32 values, 16
// pair words of 32 bytes, word 8 h + 2 u + p holding values
// 16 h + 4 u + p and 16 h + 4 u + p + 2 (h the half, u 0..3, p 0..1) for each
// of the 8 tokens (two shorts a token): the pairs vpmaddwd multiplies, in
// the order the weights' bytes give them. Alongside, per group and block:
// the two halves' scales for the 8 tokens (16 floats) and the sum of the
// quantized block, sum(d q) (8 floats), for the weights' offsets (Q4_0's -8,
// the m of Q4_1, Q5_1, Q4_K and Q5_K).
//
// matmul_x16: out[t][r] (+)= sum_k W[r][k] d q[t][k]. A work-item takes
// X16_VR rows and X16_TG groups of 8 tokens. Per block, row and half, the 8
// token lanes of a 256-bit register sum the half's 16 products in 32 bits
// (vpmaddwd of the weight pair, the same in every lane, and the tokens'
// pairs), then float multiply-adds apply the scales.
//
// On x86 with AVX2 (__AVX2__, PoCL's host device) vpmaddwd is clang's
// builtin; elsewhere (or with -DX16_PORTABLE=1, for the tests) the same
// arithmetic in portable OpenCL C, so the kernel runs and is tested on any
// device.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef X16_VR
#define X16_VR 1
#endif
#ifndef X16_TG
#define X16_TG 4
#endif

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 7 && WTYPE != 8 && WTYPE != 12 && WTYPE != 13 && \
    WTYPE != 14
#error \
    "matmul_x16: WTYPE must be Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (2, 3, 7, 8, 12, 13, 14)"
#endif
#define FIFTH_BIT (WTYPE == 7 || WTYPE == 13)  // Q5_1, Q5_K: bit j of qh is bit 4 of value j

#define KB 32
#define TOKS 8                 // tokens per group: the 32-bit lanes of a 256-bit register
#define GROUP_BYTES (16 * 32)  // xq bytes per group and block: 16 pair words

#if defined(__AVX2__) && !defined(X16_PORTABLE)
#define X16_AVX2 1
#else
#define X16_AVX2 0
#endif

typedef short short16_ __attribute__((ext_vector_type(16)));
typedef ushort ushort16_ __attribute__((ext_vector_type(16)));

// 32-bit lanes: a[2i] * b[2i] + a[2i+1] * b[2i+1] (vpmaddwd).
inline int8 madd_pairs(short16_ a, short16_ b) {
#if X16_AVX2
  return as_int8(__builtin_ia32_pmaddwd256(a, b));
#else
  int8 r;
  int* p = (int*)&r;
  for (int i = 0; i < 8; ++i) {
    p[i] = (int)a[2 * i] * (int)b[2 * i] + (int)a[2 * i + 1] * (int)b[2 * i + 1];
  }
  return r;
#endif
}

inline short16_ load_pairs(const __global uchar* p) {
  return __builtin_astype(vload8(0, (const __global uint*)p), short16_);
}

// A 32-bit word of 4 bytes in every lane pair: lanes 2i, 2i + 1 hold
// bytes 0 | 1 << 8 and 2 | 3 << 8.
inline ushort16_ splat_word(uint w) { return __builtin_astype((uint8)(w), ushort16_); }

// x (floats, token t at x + t * ld_x) -> xq, xd, xs for tokens 0 .. n_tok - 1;
// tokens n_tok .. to the end of their group get zeros. A work-item takes a
// block of a group of 8 tokens: the 8 rows of 32 floats transposed
// (kernels/cpu_transpose.cl) into 32 float8s of one value for the 8 tokens,
// so that the scales, codes and pair words come out along token lanes, a
// 32-byte store a word. (One work-item per token and block, the first form,
// took 252 ms of a 2,048-token prefill's 5.4 s on the 2-core EPYC.) Launch:
// global (n_in / 32, ceil(n_tok / 8)).
__kernel void quantize_x16(const __global float* x, int ld_x, int n_in, int n_tok,
                           __global uchar* xq, __global float* xd, __global float* xs) {
  const int b = get_global_id(0);
  const int g = get_global_id(1);
  const int n_blocks = n_in / KB;
  if (b >= n_blocks || g * TOKS >= n_tok) return;
  const size_t gb = (size_t)g * n_blocks + b;
  float8 v[KB];  // v[k]: value k of the block, lane t: token 8 g + t
  __attribute__((opencl_unroll_hint)) for (int j = 0; j < KB / 8; ++j) {
    float8 rows[TOKS];
    __attribute__((opencl_unroll_hint)) for (int t = 0; t < TOKS; ++t) {
      const int tok = g * TOKS + t;
      rows[t] = tok < n_tok ? vload8(j, x + (size_t)tok * ld_x + b * KB) : (float8)(0.0f);
    }
    transpose8x8(rows, v + 8 * j);
  }
  __global short16_* words = (__global short16_*)(xq + gb * GROUP_BYTES);
  float8 sum = (float8)(0.0f);
  __attribute__((opencl_unroll_hint)) for (int h = 0; h < 2; ++h) {  // values 16 h .. 16 h + 15
    float8 amax = (float8)(0.0f);
    __attribute__((opencl_unroll_hint)) for (int k = 0; k < 16; ++k) {
      amax = fmax(amax, fabs(v[16 * h + k]));
    }
    const float8 d = amax / 32767.0f;
    const float8 id = select((float8)(0.0f), (float8)(32767.0f) / amax, amax > (float8)(0.0f));
    int8 isum = (int8)(0);
    __attribute__((opencl_unroll_hint)) for (int w = 0; w < 8; ++w) {
      // word 8 h + w (w = 2 u + p): values 16 h + 4 u + p and that + 2
      const int k = 16 * h + 4 * (w / 2) + w % 2;
      const int8 ca = convert_int8_rte(v[k] * id), cb = convert_int8_rte(v[k + 2] * id);
      isum += ca + cb;
      const short8 a = convert_short8(ca), c = convert_short8(cb);
      words[8 * h + w] = (short16_)(a.s0, c.s0, a.s1, c.s1, a.s2, c.s2, a.s3, c.s3, a.s4, c.s4,
                                    a.s5, c.s5, a.s6, c.s6, a.s7, c.s7);
    }
    vstore8(d, 0, xd + (gb * 2 + h) * TOKS);
    sum += d * convert_float8(isum);
  }
  vstore8(sum, 0, xs + gb * TOKS);
}

// Launch: global (ceil(n_rows / X16_VR), ceil(n_tok / (8 * X16_TG))), any
// local size. out[t * ld_out + out_off + r] for r < n_rows, t < n_tok.
__kernel void matmul_x16(const __global uint* wq, const __global void* ws, int n_in, int n_rows,
                         const __global uchar* xq, const __global float* xd,
                         const __global float* xs, int n_tok, __global float* out, int ld_out,
                         int out_off, int accumulate) {
  const int r0 = get_global_id(0) * X16_VR;
  const int g0 = get_global_id(1) * X16_TG;
  if (r0 >= n_rows || g0 * TOKS >= n_tok) return;
  const int n_blocks = n_in / KB;
  const int n_groups = (n_tok + TOKS - 1) / TOKS;
  int rows[X16_VR];
#pragma unroll
  for (int i = 0; i < X16_VR; ++i) rows[i] = min(r0 + i, n_rows - 1);
  int groups[X16_TG];
#pragma unroll
  for (int j = 0; j < X16_TG; ++j) groups[j] = min(g0 + j, n_groups - 1);

  float8 acc[X16_VR][X16_TG];
#pragma unroll
  for (int i = 0; i < X16_VR; ++i)
#pragma unroll
    for (int j = 0; j < X16_TG; ++j) acc[i][j] = (float8)(0.0f);

  for (int b = 0; b < n_blocks; ++b) {
    const __global uchar* xg[X16_TG];
    float8 dx0[X16_TG], dx1[X16_TG], sx[X16_TG];
#pragma unroll
    for (int j = 0; j < X16_TG; ++j) {
      const size_t gb = (size_t)groups[j] * n_blocks + b;
      xg[j] = xq + gb * GROUP_BYTES;
      dx0[j] = vload8(0, xd + gb * 2 * TOKS);
      dx1[j] = vload8(0, xd + (gb * 2 + 1) * TOKS);
      sx[j] = vload8(0, xs + gb * TOKS);
    }
#pragma unroll
    for (int i = 0; i < X16_VR; ++i) {
      const size_t blk = (size_t)rows[i] * n_blocks + b;
      int8 s[X16_TG][2];  // per token group and half: sum of code x q
#pragma unroll
      for (int j = 0; j < X16_TG; ++j) s[j][0] = s[j][1] = (int8)(0);
#if WTYPE == 8
      // 4 signed bytes per word, values 4 w .. 4 w + 3
      const uint8 wv = vload8(0, wq + blk * 8);
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const short16_ sw = __builtin_astype(splat_word(wv[w]), short16_);
        const short16_ p0 = (sw << (short16_)(8)) >> (short16_)(8);  // bytes 0, 2
        const short16_ p1 = sw >> (short16_)(8);                     // bytes 1, 3
        const int h = w / 4, u = w % 4;
#pragma unroll
        for (int j = 0; j < X16_TG; ++j) {
          s[j][h] += madd_pairs(p0, load_pairs(xg[j] + 32 * (8 * h + 2 * u)));
          s[j][h] += madd_pairs(p1, load_pairs(xg[j] + 32 * (8 * h + 2 * u + 1)));
        }
      }
#else
      // nibble byte k: value k (low half), k + 16 (high half); Q6_K adds
      // two top bits a value from h0 / h1 (values 0-15 / 16-31, 2 bits each)
      const uint4 wv = vload4(0, wq + blk * 4);
#if WTYPE == 14
      const uint2 top = vload2(1, (const __global uint*)ws + blk * 4);
#elif WTYPE == 7
      const uint qh = ((const __global uint*)ws)[blk * 2 + 1];
#elif WTYPE == 13
      const uint qh = ((const __global uint*)ws)[blk * 4 + 2];
#endif
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#if WTYPE == 14
        short16_ pr[2][2];  // [half][p]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint tb = ((h ? top.y : top.x) >> (8 * u)) & 0xffu;
          const uint hi2 =
              (tb & 3u) | ((tb & 0xcu) << 6) | ((tb & 0x30u) << 12) | ((tb & 0xc0u) << 18);
          const uint codes = ((h ? wv[u] >> 4 : wv[u]) & 0x0f0f0f0fu) | (hi2 << 4);
          const ushort16_ sw = splat_word(codes);
          pr[h][0] = __builtin_astype(sw & (ushort16_)(0xff), short16_) - (short16_)(32);
          pr[h][1] = __builtin_astype(sw >> (ushort16_)(8), short16_) - (short16_)(32);
        }
#elif FIFTH_BIT
        // pair words as in the Q4 branch below, with the fifth bits of
        // values 16 h + 4 u + p and + 2 at bits 4 and 20
        const uint f = qh >> (4 * u), g = qh >> (16 + 4 * u);
        const uint w = wv[u];
        const short16_ pr[2][2] = {
            {__builtin_astype(splat_word((w & 0x000f000fu) | ((f & 1u) << 4) | ((f & 4u) << 18)),
                              short16_),
             __builtin_astype(
                 splat_word(((w >> 8) & 0x000f000fu) | ((f & 2u) << 3) | ((f & 8u) << 17)),
                 short16_)},
            {__builtin_astype(
                 splat_word(((w >> 4) & 0x000f000fu) | ((g & 1u) << 4) | ((g & 4u) << 18)),
                 short16_),
             __builtin_astype(
                 splat_word(((w >> 12) & 0x000f000fu) | ((g & 2u) << 3) | ((g & 8u) << 17)),
                 short16_)}};
#else
        const ushort16_ sw = splat_word(wv[u]);
        const short16_ pr[2][2] = {
            {__builtin_astype(sw & (ushort16_)(15), short16_),
             __builtin_astype((sw >> (ushort16_)(8)) & (ushort16_)(15), short16_)},
            {__builtin_astype((sw >> (ushort16_)(4)) & (ushort16_)(15), short16_),
             __builtin_astype(sw >> (ushort16_)(12), short16_)}};
#endif
#pragma unroll
        for (int j = 0; j < X16_TG; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            s[j][h] += madd_pairs(pr[h][0], load_pairs(xg[j] + 32 * (8 * h + 2 * u)));
            s[j][h] += madd_pairs(pr[h][1], load_pairs(xg[j] + 32 * (8 * h + 2 * u + 1)));
          }
        }
      }
#endif
#pragma unroll
      for (int j = 0; j < X16_TG; ++j) {
        const float8 c0 = convert_float8(s[j][0]) * dx0[j], c1 = convert_float8(s[j][1]) * dx1[j];
#if WTYPE == 14  // a scale per half
        const float2 sc = vload2(0, (const __global float*)ws + blk * 4);
        acc[i][j] = fma(c0, (float8)(sc.x), fma(c1, (float8)(sc.y), acc[i][j]));
#else
        const float8 cx = c0 + c1;  // sum of code x value
#if WTYPE == 8
        acc[i][j] = fma(cx, (float8)(vload_half(blk, (const __global half*)ws)), acc[i][j]);
#elif WTYPE == 2
        acc[i][j] = fma(fma(sx[j], -8.0f, cx), (float8)(vload_half(blk, (const __global half*)ws)),
                        acc[i][j]);
#elif WTYPE == 3
        const float2 dm = vload_half2(blk, (const __global half*)ws);
        acc[i][j] = fma(cx, (float8)(dm.x), fma(sx[j], (float8)(dm.y), acc[i][j]));
#elif WTYPE == 7  // Q5_1: half d, m, then qh
        const float2 dm = vload_half2(0, (const __global half*)ws + blk * 4);
        acc[i][j] = fma(cx, (float8)(dm.x), fma(sx[j], (float8)(dm.y), acc[i][j]));
#else             // Q4_K, Q5_K: s c - m (records of 8 and 16 bytes)
        const float2 sm = vload2(0, (const __global float*)ws + blk * (WTYPE == 13 ? 4 : 2));
        acc[i][j] = fma(cx, (float8)(sm.x), fma(sx[j], (float8)(-sm.y), acc[i][j]));
#endif
#endif
      }
    }
  }

#pragma unroll
  for (int j = 0; j < X16_TG; ++j) {
#pragma unroll
    for (int l = 0; l < TOKS; ++l) {
      const int t = (g0 + j) * TOKS + l;
      if (t >= n_tok) break;
      __global float* o = out + (size_t)t * ld_out + out_off;
#pragma unroll
      for (int i = 0; i < X16_VR; ++i) {
        if (r0 + i >= n_rows) break;
        const float v = ((const float*)&acc[i][j])[l];
        o[r0 + i] = accumulate ? o[r0 + i] + v : v;
      }
    }
  }
}
