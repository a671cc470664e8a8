// Prefill matrix-matrix product on CPU devices with 8-bit activations, for
// Q4_0, Q4_1 and Q8_0 weights (-DWTYPE=2, 3 or 8; Q5_0 is Q8_0 on CPU
// devices) in the block layout of engine/cl/block_layout.h (payloads and
// scale records in separate buffers).
//
// quantize_x_q8 turns a chunk's activations into int8 values with one float
// scale per 16 (d = max|x| / 127, q = round(x / d)): llama.cpp's Q8_0
// activations scale per 32; halves measured +0.19% perplexity above the
// float64 reference on SmolLM2's Q4_K_M file against +0.54% for whole blocks
// (llama.cpp: +0.34%), at the same speed. Laid out for the product: tokens in
// groups of 8, and per group and block of 32 values, eight 32-byte words,
// word w holding values 4w .. 4w + 3 for each of the 8 tokens (4 bytes per
// token). Alongside, per group and block: the scales of the two halves for
// the 8 tokens (16 floats), and sum(d * q) over the block (8 floats) for the
// weights' offsets (Q4_0's -8, Q4_1's m).
//
// matmul_q8: out[t][r] (+)= sum_k W[r][k] * d_x q[t][k]. A work-item takes
// Q8_VR rows and Q8_TG groups of 8 tokens. Per block, row and half, the 8
// token lanes of a 256-bit register sum the half's 16 products: vpmaddubsw
// (unsigned weight bytes times signed activation bytes, adjacent pairs
// summed to 16 bits; Q4 codes 0..15 against |q| <= 127 keep the 16 products
// within 30,480), then vpmaddwd with ones to 32 bits; then float
// multiply-adds apply the scales. Q8_0's signed weights go in as |w| with the
// sign moved onto the activation (vpsignb), widened after every step (two
// products of 127 * 127 fit 16 bits, four do not).
//
// On x86 with AVX2 (__AVX2__, PoCL's host device) the steps are clang's
// builtins for those instructions; elsewhere the same arithmetic in portable
// OpenCL C, so the kernel runs and is tested on any device.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef Q8_VR
#define Q8_VR 1
#endif
#ifndef Q8_TG
#define Q8_TG 4
#endif

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 8
#error "matmul_q8: WTYPE must be Q4_0 (2), Q4_1 (3) or Q8_0 (8)"
#endif

#define KB 32
#define TOKS 8                // tokens per group: the lanes of a 256-bit register
#define GROUP_BYTES (8 * 32)  // xq bytes per group and block

typedef char char32_ __attribute__((ext_vector_type(32)));
typedef short short16_ __attribute__((ext_vector_type(16)));

// 16-bit lanes: a[2i] * b[2i] + a[2i+1] * b[2i+1], a unsigned, b signed,
// saturated (never reached here).
// -DQ8_PORTABLE=1 takes the portable code on x86 too (the kernel tests).
#if defined(__AVX2__) && !defined(Q8_PORTABLE)
#define Q8_AVX2 1
#else
#define Q8_AVX2 0
#endif

inline short16_ maddubs(char32_ a, char32_ b) {
#if Q8_AVX2
  return __builtin_ia32_pmaddubsw256(a, b);
#else
  short16_ r;
  for (int i = 0; i < 16; ++i) {
    const int s =
        (int)(uchar)a[2 * i] * (int)b[2 * i] + (int)(uchar)a[2 * i + 1] * (int)b[2 * i + 1];
    r[i] = (short)clamp(s, -32768, 32767);
  }
  return r;
#endif
}

// 32-bit lanes: a[2i] + a[2i+1] (vpmaddwd with ones).
inline int8 widen_pairs(short16_ a) {
#if Q8_AVX2
  return as_int8(__builtin_ia32_pmaddwd256(a, (short16_)(1)));
#else
  int8 r;
  r.s0 = (int)a[0] + (int)a[1];
  r.s1 = (int)a[2] + (int)a[3];
  r.s2 = (int)a[4] + (int)a[5];
  r.s3 = (int)a[6] + (int)a[7];
  r.s4 = (int)a[8] + (int)a[9];
  r.s5 = (int)a[10] + (int)a[11];
  r.s6 = (int)a[12] + (int)a[13];
  r.s7 = (int)a[14] + (int)a[15];
  return r;
#endif
}

#if WTYPE == 8
// b with each byte's sign flipped where a's is negative, zeroed where a's is 0.
inline char32_ sign_bytes(char32_ b, char32_ a) {
#if Q8_AVX2
  return __builtin_ia32_psignb256(b, a);
#else
  return a < (char32_)(0) ? -b : a == (char32_)(0) ? (char32_)(0) : b;
#endif
}
#endif

inline char32_ load32(const __global uchar* p) {
  return __builtin_astype(vload8(0, (const __global uint*)p), char32_);
}

inline char32_ splat4(uint word) { return __builtin_astype((uint8)(word), char32_); }

// x (floats, token t at x + t * ld_x) -> xq, xd, xs for tokens 0 .. n_tok - 1;
// tokens n_tok .. to the end of their group get zeros. Launch: global
// (n_in / 32, round_up(n_tok, 8)).
__kernel void quantize_x_q8(const __global float* x, int ld_x, int n_in, int n_tok,
                            __global uchar* xq, __global float* xd, __global float* xs) {
  const int b = get_global_id(0);
  const int t = get_global_id(1);
  const int n_blocks = n_in / KB;
  if (b >= n_blocks) return;
  const int g = t / TOKS, lane = t % TOKS;
  const size_t gb = (size_t)g * n_blocks + b;
  __global uchar* q = xq + gb * GROUP_BYTES + 4 * lane;
  if (t >= n_tok) {
    for (int w = 0; w < 8; ++w) vstore4((uchar4)(0), 0, q + 32 * w);
    xd[gb * 2 * TOKS + lane] = 0.0f;
    xd[(gb * 2 + 1) * TOKS + lane] = 0.0f;
    xs[gb * TOKS + lane] = 0.0f;
    return;
  }
  const __global float* src = x + (size_t)t * ld_x + b * KB;
  float sum = 0.0f;
  for (int hf = 0; hf < 2; ++hf) {  // values 16 hf .. 16 hf + 15: words 4 hf .. 4 hf + 3
    float amax = 0.0f;
    for (int w = 4 * hf; w < 4 * hf + 4; ++w) {
      const float4 v = fabs(vload4(w, src));
      amax = fmax(amax, fmax(fmax(v.x, v.y), fmax(v.z, v.w)));
    }
    const float d = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int isum = 0;
    for (int w = 4 * hf; w < 4 * hf + 4; ++w) {
      const int4 c = convert_int4_rte(vload4(w, src) * id);
      isum += c.x + c.y + c.z + c.w;
      vstore4(as_uchar4(convert_char4(c)), 0, q + 32 * w);
    }
    xd[(gb * 2 + hf) * TOKS + lane] = d;
    sum += d * (float)isum;
  }
  xs[gb * TOKS + lane] = sum;
}

// Launch: global (ceil(n_rows / Q8_VR), ceil(n_tok / (8 * Q8_TG))), any
// local size. out[t * ld_out + out_off + r] for r < n_rows, t < n_tok.
__kernel void matmul_q8(const __global uint* wq, const __global void* ws, int n_in, int n_rows,
                        const __global uchar* xq, const __global float* xd,
                        const __global float* xs, int n_tok, __global float* out, int ld_out,
                        int out_off, int accumulate) {
  const int r0 = get_global_id(0) * Q8_VR;
  const int g0 = get_global_id(1) * Q8_TG;
  if (r0 >= n_rows || g0 * TOKS >= n_tok) return;
  const int n_blocks = n_in / KB;
  const int n_groups = (n_tok + TOKS - 1) / TOKS;
  int rows[Q8_VR];
#pragma unroll
  for (int i = 0; i < Q8_VR; ++i) rows[i] = min(r0 + i, n_rows - 1);
  int groups[Q8_TG];
#pragma unroll
  for (int j = 0; j < Q8_TG; ++j) groups[j] = min(g0 + j, n_groups - 1);

  float8 acc[Q8_VR][Q8_TG];
#pragma unroll
  for (int i = 0; i < Q8_VR; ++i)
#pragma unroll
    for (int j = 0; j < Q8_TG; ++j) acc[i][j] = (float8)(0.0f);

  for (int b = 0; b < n_blocks; ++b) {
    const __global uchar* xg[Q8_TG];
    float8 dx[Q8_TG], dx2[Q8_TG], sx[Q8_TG];
#pragma unroll
    for (int j = 0; j < Q8_TG; ++j) {
      const size_t gb = (size_t)groups[j] * n_blocks + b;
      xg[j] = xq + gb * GROUP_BYTES;
      dx[j] = vload8(0, xd + gb * 2 * TOKS);
      dx2[j] = vload8(0, xd + (gb * 2 + 1) * TOKS);
      sx[j] = vload8(0, xs + gb * TOKS);
    }
#pragma unroll
    for (int i = 0; i < Q8_VR; ++i) {
      const size_t blk = (size_t)rows[i] * n_blocks + b;
      // the block's two halves (values 0..15: words 0..3 of xq; 16..31: 4..7)
      float8 dot[Q8_TG][2];
#if WTYPE == 8
      const uint8 wv = vload8(0, wq + blk * 8);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        int8 sum[Q8_TG];
#pragma unroll
        for (int j = 0; j < Q8_TG; ++j) sum[j] = (int8)(0);
#pragma unroll
        for (int w = 4 * hf; w < 4 * hf + 4; ++w) {
          const char32_ wb = splat4(wv[w]);
          const char32_ wabs = sign_bytes(wb, wb);
#pragma unroll
          for (int j = 0; j < Q8_TG; ++j) {
            sum[j] += widen_pairs(maddubs(wabs, sign_bytes(load32(xg[j] + 32 * w), wb)));
          }
        }
#pragma unroll
        for (int j = 0; j < Q8_TG; ++j) dot[j][hf] = convert_float8(sum[j]);
      }
#else
      const uint4 wv = vload4(0, wq + blk * 4);
      short16_ s_lo[Q8_TG], s_hi[Q8_TG];
#pragma unroll
      for (int j = 0; j < Q8_TG; ++j) s_lo[j] = s_hi[j] = (short16_)(0);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const char32_ lo = splat4(wv[u] & 0x0f0f0f0fu);
        const char32_ hi = splat4((wv[u] >> 4) & 0x0f0f0f0fu);
#pragma unroll
        for (int j = 0; j < Q8_TG; ++j) {
          s_lo[j] += maddubs(lo, load32(xg[j] + 32 * u));
          s_hi[j] += maddubs(hi, load32(xg[j] + 32 * (4 + u)));
        }
      }
#pragma unroll
      for (int j = 0; j < Q8_TG; ++j) {
        dot[j][0] = convert_float8(widen_pairs(s_lo[j]));
        dot[j][1] = convert_float8(widen_pairs(s_hi[j]));
      }
#endif
#pragma unroll
      for (int j = 0; j < Q8_TG; ++j) {
        const float8 xw = fma(dot[j][0], dx[j], dot[j][1] * dx2[j]);  // sum of codes x values
#if WTYPE == 8
        acc[i][j] = fma(xw, (float8)(vload_half(blk, (const __global half*)ws)), acc[i][j]);
#elif WTYPE == 2
        acc[i][j] = fma(fma(sx[j], -8.0f, xw), (float8)(vload_half(blk, (const __global half*)ws)),
                        acc[i][j]);
#else
        const float2 dm = vload_half2(blk, (const __global half*)ws);
        acc[i][j] = fma(xw, (float8)(dm.x), fma(sx[j], (float8)(dm.y), acc[i][j]));
#endif
      }
    }
  }

#pragma unroll
  for (int j = 0; j < Q8_TG; ++j) {
#pragma unroll
    for (int l = 0; l < TOKS; ++l) {
      const int t = (g0 + j) * TOKS + l;
      if (t >= n_tok) break;
      __global float* o = out + (size_t)t * ld_out + out_off;
#pragma unroll
      for (int i = 0; i < Q8_VR; ++i) {
        if (r0 + i >= n_rows) break;
        const float v = ((const float*)&acc[i][j])[l];
        o[r0 + i] = accumulate ? o[r0 + i] + v : v;
      }
    }
  }
}
