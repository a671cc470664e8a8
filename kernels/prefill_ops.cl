// Row-wise operations of batched prefill that do not depend on the weight
// type; every kernel covers the n_tok tokens of a chunk at once (tokens on
// dimension 1), with activations stored token-major: x[t][0..n).
//
// rmsnorm_rows: out[t] (+)= x[row0 + t] / sqrt(mean(x^2) + eps) * g, one
// work-group of NORM_WG work-items per token: each sums every NORM_WG-th
// square, then a tree reduction in local memory (NORM_WG a power of two);
// accumulate != 0 adds to out (a post-norm into the residual stream).
// rope_kv_rows: the stacked q;k;v projection of each token -> RoPE on q and k
// (adjacent pairs, table rope_cs of (cos, sin) per position and pair, as in
// matvec.cl's qkv_rope), q to its own buffer, k and v appended to the KV cache
// at position pos0 + t. One work-item per pair of values.
// head_rows: the general form of rope_kv_rows (any architecture of
// engine/model/architecture.h): per head of a token, + bias, RMSNorm of q and
// k heads, RoPE of adjacent or NeoX pairs; one work-group per head.
// scale_rows: x *= s elementwise (Gemma's embedding scale).
// silu_mul: g = silu(g) * u elementwise (SwiGLU); gelu_mul: g = gelu(g) * u
// with GELU's tanh form (GeGLU).

#ifndef NORM_WG
#define NORM_WG 64
#endif

__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1))) void rmsnorm_rows(
    const __global float* x, int row0, int n, const __global float* g, float eps, int accumulate,
    __global float* out) {
  __local float red[NORM_WG];
  const int lid = get_local_id(0);
  const int t = get_group_id(1);
  const __global float* xr = x + (size_t)(row0 + t) * n;
  float ss = 0.0f;
  for (int i = lid; i < n; i += NORM_WG) ss += xr[i] * xr[i];
  red[lid] = ss;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = NORM_WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float scale = rsqrt(red[0] / n + eps);
  __global float* o = out + (size_t)t * n;
  for (int i = lid; i < n; i += NORM_WG) o[i] = (accumulate ? o[i] : 0.0f) + xr[i] * scale * g[i];
}

// qkv: [n_tok][n_embd + 2 * n_embd_kv]; q: [n_tok][n_embd]; the caches
// [n_ctx][n_embd_kv] from float offset layer_off. Launch: global
// ((n_embd + 2 * n_embd_kv) / 2, n_tok).
__kernel void rope_kv_rows(const __global float* qkv, int n_tok, int n_embd, int n_embd_kv,
                           int head_dim, int n_rot, const __global float2* rope_cs, int pos0,
                           __global float* q, __global float* k_cache, __global float* v_cache,
                           ulong layer_off) {
  const int p = get_global_id(0);
  const int t = get_global_id(1);
  const int n_qkv = n_embd + 2 * n_embd_kv;
  if (2 * p >= n_qkv || t >= n_tok) return;
  const int gr = 2 * p;  // even row of the pair in the stacked q;k;v space
  const int pos = pos0 + t;
  float a = qkv[(size_t)t * n_qkv + gr], b = qkv[(size_t)t * n_qkv + gr + 1];
  const int in_head = (gr < n_embd ? gr : gr - n_embd) % head_dim;
  if (gr < n_embd + n_embd_kv && in_head < n_rot) {
    const float2 cs = rope_cs[(size_t)pos * (n_rot / 2) + in_head / 2];
    const float ra = a * cs.x - b * cs.y;
    b = a * cs.y + b * cs.x;
    a = ra;
  }
  __global float* dst;
  if (gr < n_embd) {
    dst = q + (size_t)t * n_embd + gr;
  } else if (gr < n_embd + n_embd_kv) {
    dst = k_cache + layer_off + (size_t)pos * n_embd_kv + (gr - n_embd);
  } else {
    dst = v_cache + layer_off + (size_t)pos * n_embd_kv + (gr - n_embd - n_embd_kv);
  }
  dst[0] = a;
  dst[1] = b;
}

// The GLUs take GLU_VEC values a work-item: 8 on CPU devices, where PoCL
// then runs exp and tanh 8 wide (one value a work-item left them scalar:
// silu_mul took 4% of a SmolLM2 prefill on the 2-core EPYC), 1 elsewhere.
#ifndef GLU_VEC
#define GLU_VEC 1
#endif
#if GLU_VEC == 8
typedef float8 glu_t;
#define GLU_LOAD(i, p) vload8((i), (p))
#define GLU_STORE(v, i, p) vstore8((v), (i), (p))
#elif GLU_VEC == 1
typedef float glu_t;
#define GLU_LOAD(i, p) ((p)[i])
#define GLU_STORE(v, i, p) ((p)[i] = (v))
#else
#error "GLU_VEC must be 1 or 8"
#endif

// Launch: global (n / GLU_VEC, n_tok); g and u are [n_tok][n], n a multiple of GLU_VEC.
__kernel void silu_mul(__global float* g, const __global float* u, int n, int n_tok) {
  const int i = get_global_id(0);
  const int t = get_global_id(1);
  if (i * GLU_VEC >= n || t >= n_tok) return;
  __global float* gt = g + (size_t)t * n;
  const glu_t v = GLU_LOAD(i, gt);
  GLU_STORE(v / (1.0f + exp(-v)) * GLU_LOAD(i, u + (size_t)t * n), i, gt);
}

#ifndef HEAD_MAX
#define HEAD_MAX 512
#endif

// qkv: n_tok rows of ld floats, q at column 0, k at k_at, v at v_at (n_q =
// n_head * head_dim, n_embd_kv = n_head_kv * head_dim values each); bias
// (null: none) is [bq; bk; bv] end to end; q_norm / k_norm (head_dim, null: none)
// RMSNorm each q / k head; rope_cs as in rope_kv_rows, pair i of a head is
// (2i, 2i + 1), or (i, i + n_rot / 2) when neox != 0; q is then multiplied
// by q_scale (a model's attention scale over the kernels' 1/sqrt(head_dim)).
// k and v go to the caches' row (pos0 + t) % ring from float offset
// layer_off (ring: the layer's rows, engine/cl/decode_state.h).
// head_dim <= HEAD_MAX.
// Launch: global ((n_head + 2 * n_head_kv) * NORM_WG, n_tok), local (NORM_WG, 1).
__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1))) void head_rows(
    const __global float* qkv, int ld, int k_at, int v_at, const __global float* bias, int n_tok,
    int n_head, int n_head_kv, int head_dim, const __global float* q_norm,
    const __global float* k_norm, float eps, int n_rot, int neox, const __global float2* rope_cs,
    int pos0, float q_scale, __global float* q, __global float* k_cache, __global float* v_cache,
    ulong layer_off, int ring) {
  __local float hv[HEAD_MAX];
  __local float red[NORM_WG];
  const int lid = get_local_id(0);
  const int slot = get_group_id(0);  // q heads, then k heads, then v heads
  const int t = get_group_id(1);
  if (t >= n_tok) return;
  const int n_q = n_head * head_dim, n_embd_kv = n_head_kv * head_dim;
  const int kind = slot < n_head ? 0 : slot < n_head + n_head_kv ? 1 : 2;  // q, k, v
  const int col = slot * head_dim;  // this head's first value in [q; k; v] (and the bias)
  const int at = kind == 0 ? col : kind == 1 ? k_at + col - n_q : v_at + col - n_q - n_embd_kv;
  for (int i = lid; i < head_dim; i += NORM_WG) {
    hv[i] = qkv[(size_t)t * ld + at + i] + (bias ? bias[col + i] : 0.0f);
  }
  const __global float* norm = kind == 0 ? q_norm : kind == 1 ? k_norm : 0;
  if (norm) {  // uniform over the work-group
    float ss = 0.0f;
    for (int i = lid; i < head_dim; i += NORM_WG) ss += hv[i] * hv[i];
    red[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
      if (lid < s) red[lid] += red[lid + s];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float scale = rsqrt(red[0] / head_dim + eps);
    for (int i = lid; i < head_dim; i += NORM_WG) hv[i] = hv[i] * scale * norm[i];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int pos = pos0 + t;
  if (kind < 2) {
    const int n_pairs = n_rot / 2;
    for (int i = lid; i < n_pairs; i += NORM_WG) {
      const int ia = neox ? i : 2 * i, ib = neox ? i + n_pairs : 2 * i + 1;
      const float2 cs = rope_cs[(size_t)pos * n_pairs + i];
      const float a = hv[ia], b = hv[ib];
      hv[ia] = a * cs.x - b * cs.y;
      hv[ib] = a * cs.y + b * cs.x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  __global float* dst = kind == 0 ? q + (size_t)t * n_q + col
                                  : (kind == 1 ? k_cache : v_cache) + layer_off +
                                        (size_t)(pos % ring) * n_embd_kv +
                                        (slot - n_head - (kind == 2 ? n_head_kv : 0)) * head_dim;
  const float scale = kind == 0 ? q_scale : 1.0f;
  for (int i = lid; i < head_dim; i += NORM_WG) dst[i] = hv[i] * scale;
}

// Launch: global (n, n_tok); x is [n_tok][n].
__kernel void scale_rows(__global float* x, float s, int n, int n_tok) {
  const int i = get_global_id(0);
  const int t = get_global_id(1);
  if (i >= n || t >= n_tok) return;
  x[(size_t)t * n + i] *= s;
}

// Launch: as silu_mul.
__kernel void gelu_mul(__global float* g, const __global float* u, int n, int n_tok) {
  const int i = get_global_id(0);
  const int t = get_global_id(1);
  if (i * GLU_VEC >= n || t >= n_tok) return;
  __global float* gt = g + (size_t)t * n;
  const glu_t v = GLU_LOAD(i, gt);
  GLU_STORE(0.5f * v * (1.0f + tanh(0.7978845608f * (v + 0.044715f * v * v * v))) *
                GLU_LOAD(i, u + (size_t)t * n),
            i, gt);
}
