// Matrix-vector kernels for one weight type, chosen at build time with
// -DWTYPE=<GGML type id> (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16, and
// the types kernels/quant_blocks.cl reads, which is built before this file).
//
// Weight layout on the device (repacked at upload for aligned 16-byte loads):
//   F32, F16: row-major values, as in GGUF.
//   Q4_0: wq = uint4 nibbles [rows][nb]  (16 bytes per block of 32)
//         ws = half scales    [rows][nb]
//   Q4_1: wq as Q4_0, ws = half2 (scale, min) [rows][nb]
//   Q8_0: wq = uint4 pairs [rows][nb][2] (32 int8 per block), ws = half scales.
//   BF16: row-major values; the other types: engine/cl/block_layout.h.
// Nibble byte j of a block holds value j (low half) and value j + 16 (high).
//
// Work split: a work-group of ROWS * TPR work-items computes ROWS output rows;
// the TPR work-items of a row each take every TPR-th block (or element, for
// F32/F16) and their partial sums are added by a tree reduction in local
// memory. With TPR = 1 (CPU devices) each work-item computes a whole row.
//
// Fused prologue: with a norm weight, the work-group first computes
// 1/sqrt(mean(x^2) + eps) itself (every work-group does, once, over n_in
// values: cheap beside the weights it reads) and the dot products use x * g;
// the scalar is applied to the row sums. This saves a separate RMSNorm launch.
// Only core OpenCL 1.2: vload_half reads fp16 without cl_khr_fp16.
//
// NVIDIA fast path (-DUSE_NV_SHFL=1, set by the host only on NVIDIA's
// platform after a self-test): reductions use the PTX warp shuffle
// shfl.sync.bfly instead of local memory and barriers; each warp computes the
// RMS scale by itself. Requires TPR <= 32, so a row's lanes share one warp.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef TPR
#define TPR 16
#endif
#ifndef ROWS
#define ROWS 8
#endif
#define WG (ROWS * TPR)
#ifndef USE_NV_SHFL
#define USE_NV_SHFL 0
#endif

#if WTYPE == 0
typedef float wq_t;
typedef float ws_t;
#elif WTYPE == 1
typedef half wq_t;
typedef float ws_t;
#elif WTYPE == 2
typedef uint4 wq_t;
typedef half ws_t;
#elif WTYPE == 3
typedef uint4 wq_t;
typedef half ws_t;  // pairs: scale, min
#elif WTYPE == 8
typedef uint4 wq_t;
typedef half ws_t;
#elif WTYPE == 30
typedef ushort wq_t;
typedef float ws_t;
#elif QT_GENERIC(WTYPE)
typedef uchar wq_t;
typedef uchar ws_t;
#else
#error "unsupported WTYPE"
#endif
#define WT_PLAIN (WTYPE == 0 || WTYPE == 1 || WTYPE == 30)

// Sum over one block of 32: sum_j q_j * x_j (q the raw 4-bit codes) and
// sum_j x_j, from 16 nibble bytes in `q` and x (with norm weight g when given).
inline float2 nibble_dot(uint4 q, const __global float* x, const __global float* g) {
  float8 xl0 = vload8(0, x), xl1 = vload8(1, x);  // values 0..15
  float8 xh0 = vload8(2, x), xh1 = vload8(3, x);  // values 16..31
  if (g) {
    xl0 *= vload8(0, g);
    xl1 *= vload8(1, g);
    xh0 *= vload8(2, g);
    xh1 *= vload8(3, g);
  }
  // byte k of word w is value 4w + k (low nibble) and 4w + k + 16 (high).
  float8 ql0 = (float8)((float)(q.x & 15), (float)((q.x >> 8) & 15), (float)((q.x >> 16) & 15),
                        (float)((q.x >> 24) & 15), (float)(q.y & 15), (float)((q.y >> 8) & 15),
                        (float)((q.y >> 16) & 15), (float)((q.y >> 24) & 15));
  float8 ql1 = (float8)((float)(q.z & 15), (float)((q.z >> 8) & 15), (float)((q.z >> 16) & 15),
                        (float)((q.z >> 24) & 15), (float)(q.w & 15), (float)((q.w >> 8) & 15),
                        (float)((q.w >> 16) & 15), (float)((q.w >> 24) & 15));
  float8 qh0 = (float8)((float)((q.x >> 4) & 15), (float)((q.x >> 12) & 15),
                        (float)((q.x >> 20) & 15), (float)((q.x >> 28) & 15),
                        (float)((q.y >> 4) & 15), (float)((q.y >> 12) & 15),
                        (float)((q.y >> 20) & 15), (float)((q.y >> 28) & 15));
  float8 qh1 = (float8)((float)((q.z >> 4) & 15), (float)((q.z >> 12) & 15),
                        (float)((q.z >> 20) & 15), (float)((q.z >> 28) & 15),
                        (float)((q.w >> 4) & 15), (float)((q.w >> 12) & 15),
                        (float)((q.w >> 20) & 15), (float)((q.w >> 28) & 15));
  float8 acc = ql0 * xl0 + ql1 * xl1 + qh0 * xh0 + qh1 * xh1;
  float8 xs = xl0 + xl1 + xh0 + xh1;
  float4 a4 = acc.lo + acc.hi, s4 = xs.lo + xs.hi;
  float2 a2 = a4.lo + a4.hi, s2 = s4.lo + s4.hi;
  return (float2)(a2.x + a2.y, s2.x + s2.y);
}

inline float int8_dot16(uint4 q, const __global float* x, const __global float* g) {
  float16 xv = vload16(0, x);
  if (g) xv *= vload16(0, g);
  char16 c = as_char16(q);
  float16 qv = convert_float16(c);
  float16 p = qv * xv;
  float8 p8 = p.lo + p.hi;
  float4 p4 = p8.lo + p8.hi;
  float2 p2 = p4.lo + p4.hi;
  return p2.x + p2.y;
}

// This work-item's share of dot(W[row], x * g) for a row of n_in values.
inline float row_partial(const __global wq_t* wq, const __global ws_t* ws, int n_in, int row,
                         const __global float* x, const __global float* g, int lane) {
  float sum = 0.0f;
#if WT_PLAIN
  const __global wq_t* w = wq + (size_t)row * n_in;
  for (int i = lane; i < n_in; i += TPR) {
    const float wv = plain_value(WTYPE, (const __global uchar*)w, i);
    sum += wv * (g ? x[i] * g[i] : x[i]);
  }
#elif QT_GENERIC(WTYPE)
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  for (int b = lane; b < nb; b += TPR) {
    float8 acc = (float8)(0.0f);
    for (int p = 0; p < 4; ++p) {
      float8 xv = vload8(p, x + b * 32);
      if (g) xv *= vload8(p, g + b * 32);
      acc += block_values8(WTYPE, wq, ws, base + b, p) * xv;
    }
    const float4 a4 = acc.lo + acc.hi;
    const float2 a2 = a4.lo + a4.hi;
    sum += a2.x + a2.y;
  }
#else
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  for (int b = lane; b < nb; b += TPR) {
    const __global float* xb = x + b * 32;
    const __global float* gb = g ? g + b * 32 : 0;
#if WTYPE == 2
    const float2 r = nibble_dot(wq[base + b], xb, gb);
    sum += vload_half(base + b, ws) * (r.x - 8.0f * r.y);
#elif WTYPE == 3
    const float2 r = nibble_dot(wq[base + b], xb, gb);
    const float2 dm = vload_half2(base + b, ws);
    sum += dm.x * r.x + dm.y * r.y;
#else
    const float d = vload_half(base + b, ws);
    sum += d * (int8_dot16(wq[2 * (base + b)], xb, gb) +
                int8_dot16(wq[2 * (base + b) + 1], xb + 16, gb ? gb + 16 : 0));
#endif
  }
#endif
  return sum;
}

#if USE_NV_SHFL
inline float shfl_xor(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}
// Sum over the `width` lanes (a power of two <= 32) of an aligned lane group.
inline float lanes_sum(float v, int width) {
  for (int m = width / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}
#endif

// 1/sqrt(mean(x^2) + eps) over n values, computed by the whole work-group
// (by each warp on the NVIDIA path).
inline float group_rms_scale(const __global float* x, int n, float eps, __local float* red) {
  const int lid = get_local_id(0);
#if USE_NV_SHFL
  const int wl = lid % 32;
  float4 ss4 = 0.0f;
  for (int i = wl; i < n / 4; i += 32) {  // n % 4 == 0 on this path (host-checked)
    const float4 v = vload4(i, x);
    ss4 += v * v;
  }
  return rsqrt(lanes_sum(ss4.x + ss4.y + ss4.z + ss4.w, 32) / n + eps);
#endif
  float ss = 0.0f;
  for (int i = lid; i < n; i += WG) ss += x[i] * x[i];
  red[lid] = ss;
  barrier(CLK_LOCAL_MEM_FENCE);
  // WG = ROWS * TPR need not be a power of two (ROWS is only even): fold the
  // upper part onto the lower one, the lower part rounded up.
  for (int n_left = WG; n_left > 1;) {
    const int n_low = (n_left + 1) / 2;
    if (lid + n_low < n_left) red[lid] += red[lid + n_low];
    barrier(CLK_LOCAL_MEM_FENCE);
    n_left = n_low;
  }
  const float scale = rsqrt(red[0] / n + eps);
  barrier(CLK_LOCAL_MEM_FENCE);
  return scale;
}

// Adds the TPR partial sums of each row; afterwards red[r * TPR] holds row r.
inline void reduce_rows(__local float* red) {
#if USE_NV_SHFL
  const int lid0 = get_local_id(0);
  red[lid0] = lanes_sum(red[lid0], TPR);  // every lane of the row gets the sum
  return;
#endif
#if TPR > 1
  const int lid = get_local_id(0);
  const int lane = lid % TPR;
  for (int s = TPR / 2; s > 0; s >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane < s) red[lid] += red[lid + s];
  }
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
}

// out[r] = dot(W[r], x') for r < n_rows, where x' = x, or x * g * rms_scale
// when norm_w is given; with accumulate != 0, out[r] += ... (residual add).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void matvec(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows,
    const __global float* x, const __global float* norm_w, float eps, int accumulate,
    __global float* out) {
  __local float red[WG];
  const int lid = get_local_id(0);
  const int lane = lid % TPR;
  const int row = get_group_id(0) * ROWS + lid / TPR;
  const float scale = norm_w ? group_rms_scale(x, n_in, eps, red) : 1.0f;
  red[lid] = row < n_rows ? row_partial(wq, ws, n_in, row, x, norm_w, lane) : 0.0f;
  reduce_rows(red);
  if (lane == 0 && row < n_rows) {
    const float v = red[lid] * scale;
    out[row] = accumulate ? out[row] + v : v;
  }
}

// The FFN's gate activation: SiLU (act 0) or GELU, tanh form (act 1).
inline float ffn_act(float g, int act) {
  return act ? 0.5f * g * (1.0f + tanh(0.7978845608f * (g + 0.044715f * g * g * g)))
             : g / (1.0f + exp(-g));
}

// h[r] = act(dot(Wg[r], x')) * dot(Wu[r], x'), x' = x * g * rms_scale, act
// SiLU (act 0) or GELU's tanh form (act 1): RMSNorm, gate and up projections
// and SwiGLU / GeGLU in one launch.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void ffn_gate_up(
    const __global wq_t* wq_gate, const __global ws_t* ws_gate, const __global wq_t* wq_up,
    const __global ws_t* ws_up, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, int act, __global float* h) {
  __local float red[WG];
  __local float red_up[WG];
  const int lid = get_local_id(0);
  const int lane = lid % TPR;
  const int row = get_group_id(0) * ROWS + lid / TPR;
  const float scale = group_rms_scale(x, n_in, eps, red);
  red[lid] = row < n_rows ? row_partial(wq_gate, ws_gate, n_in, row, x, norm_w, lane) : 0.0f;
  red_up[lid] = row < n_rows ? row_partial(wq_up, ws_up, n_in, row, x, norm_w, lane) : 0.0f;
  reduce_rows(red);
  reduce_rows(red_up);
  if (lane == 0 && row < n_rows) {
    const float gate = red[lid] * scale;
    const float up = red_up[lid] * scale;
    h[row] = ffn_act(gate, act) * up;
  }
}

// RMSNorm + the rows [row_base, row_base + n_rows) of the stacked [Wq; Wk; Wv]
// projection, RoPE on q and k, and k, v written straight into the KV cache at
// this position: q (n_embd); k and v go to k_cache/v_cache + cache_off
// (n_embd_kv values). rope_cs[pos * n_rot / 2 + i] holds (cos, sin) of
// rotated pair i at position pos. ROWS is even and row_base even, so each rotated pair (2i, 2i + 1) lies
// in one work-group.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void qkv_rope(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, int row_base,
    const __global float* x, const __global float* norm_w, float eps, int n_embd, int n_embd_kv,
    int head_dim, int n_rot, const __global float2* rope_cs, int pos, __global float* q,
    __global float* k_cache, __global float* v_cache, ulong cache_off) {
  __local float red[WG];
  __local float rows_out[ROWS];
  const int lid = get_local_id(0);
  const int lane = lid % TPR;
  const int local_row = lid / TPR;
  const int row = get_group_id(0) * ROWS + local_row;
  const float scale = group_rms_scale(x, n_in, eps, red);
  red[lid] = row < n_rows ? row_partial(wq, ws, n_in, row, x, norm_w, lane) : 0.0f;
  reduce_rows(red);
  if (lane == 0) rows_out[local_row] = red[lid] * scale;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < ROWS / 2) {
    const int r0 = get_group_id(0) * ROWS + 2 * lid;  // even row of the pair
    if (r0 < n_rows) {
      const int gr = row_base + r0;  // row in the stacked q;k;v space
      float a = rows_out[2 * lid], b = rows_out[2 * lid + 1];
      const int in_head = (gr < n_embd ? gr : gr - n_embd) % head_dim;
      if (gr < n_embd + n_embd_kv && in_head < n_rot) {
        const float2 cs = rope_cs[pos * (n_rot / 2) + in_head / 2];
        const float ra = a * cs.x - b * cs.y;
        b = a * cs.y + b * cs.x;
        a = ra;
      }
      __global float* dst;
      int off;
      if (gr < n_embd) {
        dst = q;
        off = gr;
      } else if (gr < n_embd + n_embd_kv) {
        dst = k_cache + cache_off;
        off = gr - n_embd;
      } else {
        dst = v_cache + cache_off;
        off = gr - n_embd - n_embd_kv;
      }
      dst[off] = a;
      dst[off + 1] = b;
    }
  }
}

// x[i] = dequantized row `token` of the embedding matrix; the token id is
// read from the device (the previous step's argmax), never from the host.
__kernel void get_row(const __global wq_t* wq, const __global ws_t* ws, int n_in,
                      const __global int* ids, int token_index, __global float* x) {
  const int i = get_global_id(0);
  if (i >= n_in) return;
  const int row = ids[token_index];
#if WT_PLAIN
  x[i] = plain_value(WTYPE, (const __global uchar*)wq, (size_t)row * n_in + i);
#elif QT_GENERIC(WTYPE)
  float v[8];
  vstore8(block_values8(WTYPE, wq, ws, (size_t)row * (n_in / 32) + i / 32, i % 32 / 8), 0, v);
  x[i] = v[i % 8];
#else
  const int nb = n_in / 32;
  const size_t blk = (size_t)row * nb + i / 32;
  const int j = i % 32;
#if WTYPE == 8
  const char c = as_char16(wq[2 * blk + j / 16])[j % 16];
  x[i] = vload_half(blk, ws) * (float)c;
#else
  const uchar byte = as_uchar16(wq[blk])[j % 16];
  const float code = (float)(j < 16 ? (byte & 15) : (byte >> 4));
#if WTYPE == 2
  x[i] = vload_half(blk, ws) * (code - 8.0f);
#else
  const float2 dm = vload_half2(blk, ws);
  x[i] = dm.x * code + dm.y;
#endif
#endif
#endif
}

#if USE_NV_SHFL
// Start-up self-test of the warp-shuffle path: out[i] = sum of the lane ids
// of i's aligned group of `width` lanes.
__kernel void shfl_selftest(int width, __global float* out) {
  const int lid = get_local_id(0);
  out[get_global_id(0)] = lanes_sum((float)lid, width);
}
#endif
