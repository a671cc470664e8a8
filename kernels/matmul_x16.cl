// Prefill matrix-matrix product on CPU devices with the activations as
// 16-bit integers, for Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights
// (-DWTYPE=2, 3, 7, 8, 12, 13 or 14; Q5_0 is Q8_0 on CPU devices) in the
// block layout of engine/cl/block_layout.h (payloads and scale records in
// separate buffers; K-quants as their groups of 32 with float scales).
//
// Why 16 bits: with llama.cpp's 8-bit activations (one scale per 32 values,
// or per 16 in that experiment) the kernel ran 1.8x faster, but SmolLM2-135M-Instruct's
// logits moved 2-13% (||delta|| / ||ref||) on a ChatML prompt, its first reply
// token flipped against the float64 reference where the reference's margin
// is ~3 (llama.cpp's CPU build flips it the same way), and greedy ids
// flipped at margins of 0.06: outside the accuracy budget (greedy ids up to
// the first margin < 0.05). At 16 bits the logits stay within 2e-4.
//
// quantize_x16 turns a chunk's activations into int16 values with a float
// scale per 32 (d = max|x| / 32767, q = round-half-even(x / d)), laid out for
// the product in records of a block of 32 values and a group of 8 tokens,
// record (b, g) at b * x16_groups(n_tok) + g (the groups of a block side by
// side, so that a work-item's groups are one pointer apart by constants):
// 16 pair words of 32 bytes, word 8 h + 2 u + p holding values 16 h + 4 u +
// p and 16 h + 4 u + p + 2 (h the half, u 0..3, p 0..1) for each of the 8
// tokens (two shorts a token): the pairs vpmaddwd multiplies, in the order
// the weights' bytes give them; then the 8 tokens' scales d and the sums of
// the quantized block, sum(d q), for the weights' offsets (Q4_0's -8, the m
// of Q4_1, Q5_1, Q4_K and Q5_K).
//
// matmul_x16: out[t][r] (+)= sum_k W[r][k] d q[t][k]. A work-item takes
// X16_VR rows and X16_TG groups of 8 tokens. Per block and row (and half,
// for Q6_K's scale per 16 values), the 8 token lanes of a 256-bit register
// sum the block's products in 32 bits (vpmaddwd of the weight pair, the same
// in every lane, and the tokens' pairs), then float multiply-adds apply the
// scales. The blocks go in chunks of X16_KC with a work-group barrier after
// each: PoCL runs a work-group's items one after another in one thread, from
// barrier to barrier, so the chunk's activations (X16_TG x X16_KC records, ~9 KB) stay
// in L1 for all the group's rows instead of streaming a whole row's from L2
// per item (2-core EPYC, 576 x 1536 Q4_0 x 512 tokens: 67 against 58 G MAC/s,
// where the same loop reading one L1-resident record reaches 71).
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
#define X16_KC 4  // blocks between barriers (2-8 measured alike; 1 slower, a whole row slower)

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 7 && WTYPE != 8 && WTYPE != 12 && WTYPE != 13 && \
    WTYPE != 14
#error \
    "matmul_x16: WTYPE must be Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (2, 3, 7, 8, 12, 13, 14)"
#endif
#define FIFTH_BIT (WTYPE == 7 || WTYPE == 13)  // Q5_1, Q5_K: bit j of qh is bit 4 of value j

#define KB 32
#define TOKS 8                 // tokens per group: the 32-bit lanes of a 256-bit register
// xq's record per block and group of 8 tokens: 16 pair words, then the 8
// tokens' scales d and sums sum(d q) (floats)
#define X16_RECORD (16 * 32 + 2 * 32)
#define X16_D_OFFSET (16 * 32)
#define X16_S_OFFSET (16 * 32 + 32)
#define X16_HALVES (WTYPE == 14 ? 2 : 1)  // sums kept per half: Q6_K's scale per 16 values

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

// Weight scales stored as fp16 (Q4_0, Q8_0: d; Q4_1, Q5_1: d, m): F16C's
// vcvtph2ps where the target has it (PoCL's x86 devices), vload_half
// elsewhere (which PoCL builds as ~20 integer instructions).
#if X16_AVX2 && defined(__F16C__)
typedef short short8_ __attribute__((ext_vector_type(8)));
inline float2 load_half2(const __global half* p, size_t i) {
  const uint h = ((const __global uint*)p)[i];
  return as_float4(__builtin_ia32_vcvtph2ps(__builtin_astype((uint4)(h, 0u, 0u, 0u), short8_))).xy;
}
inline float load_half1(const __global half* p, size_t i) {
  const ushort h = ((const __global ushort*)p)[i];
  return as_float4(__builtin_ia32_vcvtph2ps((short8_)((short)h, 0, 0, 0, 0, 0, 0, 0))).x;
}
#else
inline float2 load_half2(const __global half* p, size_t i) { return vload_half2(i, p); }
inline float load_half1(const __global half* p, size_t i) { return vload_half(i, p); }
#endif

// Groups of 8 tokens in a chunk of n_tok, rounded up to whole tiles of
// X16_TG groups (quantize_x16 writes the padding as zeros): the stride of
// xq between blocks, in records.
inline int x16_groups(int n_tok) {
  return (n_tok + TOKS * X16_TG - 1) / (TOKS * X16_TG) * X16_TG;
}

// x (floats, token t at x + t * ld_x) -> xq for tokens 0 .. n_tok - 1,
// record (b, g) at xq + (b * x16_groups(n_tok) + g) * X16_RECORD; tokens
// n_tok .. the end of their tile get zeros (the last group's work-item
// writes the tile's padding groups). A work-item takes a block of a group:
// the 8 rows of 32 floats transposed (kernels/cpu_transpose.cl) into 32
// float8s of one value for the 8 tokens, so that the scale, codes and pair
// words come out along token lanes, a 32-byte store a word. Launch: global
// (n_in / 32, ceil(n_tok / 8)).
__kernel void quantize_x16(const __global float* x, int ld_x, int n_in, int n_tok,
                           __global uchar* xq) {
  const int b = get_global_id(0);
  const int g = get_global_id(1);
  const int n_blocks = n_in / KB;
  if (b >= n_blocks || g * TOKS >= n_tok) return;
  const int n_groups = x16_groups(n_tok);
  __global uchar* rec = xq + ((size_t)b * n_groups + g) * X16_RECORD;
  if (g == (n_tok - 1) / TOKS) {
    for (int pad = g + 1; pad < n_groups; ++pad) {
      __global uint* z = (__global uint*)(rec + (pad - g) * X16_RECORD);
      for (int i = 0; i < X16_RECORD / 4; ++i) z[i] = 0u;
    }
  }
  float8 v[KB];  // v[k]: value k of the block, lane t: token 8 g + t
  __attribute__((opencl_unroll_hint)) for (int j = 0; j < KB / 8; ++j) {
    float8 rows[TOKS];
    __attribute__((opencl_unroll_hint)) for (int t = 0; t < TOKS; ++t) {
      const int tok = g * TOKS + t;
      rows[t] = tok < n_tok ? vload8(j, x + (size_t)tok * ld_x + b * KB) : (float8)(0.0f);
    }
    transpose8x8(rows, v + 8 * j);
  }
  float8 amax = (float8)(0.0f);
  __attribute__((opencl_unroll_hint)) for (int k = 0; k < KB; ++k) amax = fmax(amax, fabs(v[k]));
  const float8 d = amax / 32767.0f;
  const float8 id = select((float8)(0.0f), (float8)(32767.0f) / amax, amax > (float8)(0.0f));
  __global short16_* words = (__global short16_*)rec;
  int8 isum = (int8)(0);
  __attribute__((opencl_unroll_hint)) for (int w = 0; w < 16; ++w) {
    // word w = 8 h + 2 u + p: values 16 h + 4 u + p and that + 2
    const int k = 16 * (w / 8) + 4 * ((w % 8) / 2) + w % 2;
    const int8 ca = convert_int8_rte(v[k] * id), cb = convert_int8_rte(v[k + 2] * id);
    isum += ca + cb;
    const short8 a = convert_short8(ca), c = convert_short8(cb);
    words[w] = (short16_)(a.s0, c.s0, a.s1, c.s1, a.s2, c.s2, a.s3, c.s3, a.s4, c.s4, a.s5, c.s5,
                          a.s6, c.s6, a.s7, c.s7);
  }
  vstore8(d, 0, (__global float*)(rec + X16_D_OFFSET));
  vstore8(d * convert_float8(isum), 0, (__global float*)(rec + X16_S_OFFSET));
}

// Launch: global (ceil(n_rows / X16_VR) or more, ceil(n_tok / (8 * X16_TG))),
// local (any, 1). out[t * ld_out + out_off + r] for r < n_rows, t < n_tok.
__kernel void matmul_x16(const __global uint* wq, const __global void* ws, int n_in, int n_rows,
                         const __global uchar* xq, int n_tok, __global float* out, int ld_out,
                         int out_off, int accumulate) {
  const int r0 = get_global_id(0) * X16_VR;
  // Every item of a work-group reaches its barriers: items past the rows or
  // tiles compute on clamped ones and store nothing.
  const int n_groups = x16_groups(n_tok);
  const int tile = min((int)get_global_id(1), n_groups / X16_TG - 1);
  const bool stores = r0 < n_rows && get_global_id(1) == tile;
  const int n_blocks = n_in / KB;
  const size_t x_step = (size_t)n_groups * X16_RECORD;  // between blocks
  const __global uchar* xb = xq + (size_t)tile * X16_TG * X16_RECORD;
  size_t blk0[X16_VR];  // the rows' first blocks
#pragma unroll
  for (int i = 0; i < X16_VR; ++i) blk0[i] = (size_t)min(r0 + i, n_rows - 1) * n_blocks;

  float8 acc[X16_VR][X16_TG];
#pragma unroll
  for (int i = 0; i < X16_VR; ++i)
#pragma unroll
    for (int j = 0; j < X16_TG; ++j) acc[i][j] = (float8)(0.0f);

  for (int kc = 0; kc < n_blocks; kc += X16_KC) {
    const int kend = min(kc + X16_KC, n_blocks);
    for (int b = kc; b < kend; ++b, xb += x_step) {
      float8 dx[X16_TG], sx[X16_TG];
#pragma unroll
      for (int j = 0; j < X16_TG; ++j) {
        dx[j] = vload8(0, (const __global float*)(xb + j * X16_RECORD + X16_D_OFFSET));
        sx[j] = vload8(0, (const __global float*)(xb + j * X16_RECORD + X16_S_OFFSET));
      }
#pragma unroll
      for (int i = 0; i < X16_VR; ++i) {
        const size_t blk = blk0[i] + b;
        int8 s[X16_TG][X16_HALVES];  // per token group (and half): sum of code x q
#pragma unroll
        for (int j = 0; j < X16_TG; ++j)
#pragma unroll
          for (int h = 0; h < X16_HALVES; ++h) s[j][h] = (int8)(0);
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
            const __global uchar* xg = xb + j * X16_RECORD;
            s[j][0] += madd_pairs(p0, load_pairs(xg + 32 * (8 * h + 2 * u)));
            s[j][0] += madd_pairs(p1, load_pairs(xg + 32 * (8 * h + 2 * u + 1)));
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
            const __global uchar* xg = xb + j * X16_RECORD;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int sh = X16_HALVES == 2 ? h : 0;
              s[j][sh] += madd_pairs(pr[h][0], load_pairs(xg + 32 * (8 * h + 2 * u)));
              s[j][sh] += madd_pairs(pr[h][1], load_pairs(xg + 32 * (8 * h + 2 * u + 1)));
            }
          }
        }
#endif
#if WTYPE == 14  // a scale per half
        const float2 sc = vload2(0, (const __global float*)ws + blk * 4);
#elif WTYPE == 8 || WTYPE == 2
        const float dw = load_half1((const __global half*)ws, blk);
#elif WTYPE == 3
        const float2 dm = load_half2((const __global half*)ws, blk);
#elif WTYPE == 7  // Q5_1: half d, m, then qh
        const float2 dm = load_half2((const __global half*)ws, blk * 2);
#else             // Q4_K, Q5_K: s c - m (records of 8 and 16 bytes)
        const float2 sm = vload2(0, (const __global float*)ws + blk * (WTYPE == 13 ? 4 : 2));
#endif
#pragma unroll
        for (int j = 0; j < X16_TG; ++j) {
#if WTYPE == 14
          acc[i][j] = fma(convert_float8(s[j][0]) * dx[j], (float8)(sc.x),
                          fma(convert_float8(s[j][1]) * dx[j], (float8)(sc.y), acc[i][j]));
#else
          const float8 cx = convert_float8(s[j][0]) * dx[j];  // sum of code x value
#if WTYPE == 8
          acc[i][j] = fma(cx, (float8)(dw), acc[i][j]);
#elif WTYPE == 2
          acc[i][j] = fma(fma(sx[j], -8.0f, cx), (float8)(dw), acc[i][j]);
#elif WTYPE == 3 || WTYPE == 7
          acc[i][j] = fma(cx, (float8)(dm.x), fma(sx[j], (float8)(dm.y), acc[i][j]));
#else
          acc[i][j] = fma(cx, (float8)(sm.x), fma(sx[j], (float8)(-sm.y), acc[i][j]));
#endif
#endif
        }
      }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }

  if (!stores) return;
#pragma unroll
  for (int j = 0; j < X16_TG; ++j) {
#pragma unroll
    for (int l = 0; l < TOKS; ++l) {
      const int t = (tile * X16_TG + j) * TOKS + l;
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
