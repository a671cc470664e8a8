// Decode attention for CPU devices (PoCL): same kernel name, arguments and
// launch geometry as kernels/attention.cl (one work-group of ATT_WG items per
// query head; head h reads KV head h / (n_head / n_head_kv); cache layout
// rows of n_embd_kv floats per layer, kv_row below; head_dim a multiple of 4).
//
// Algorithm: PoCL runs a work-group's items one after another on one core,
// so splitting a head over them buys no parallelism, only the cost of the
// barriers and local-memory reductions between the phases. Here work-item 0
// of each group does the whole head in three serial passes with float4
// vectors (k and v rows are 16-byte aligned):
//   1. s_t = q . k_t / sqrt(head_dim) into the scores scratch, and the max;
//   2. p_t = exp(s_t - max) in place, and their sum;
//   3. out = sum_t p_t v_t / sum, 16 dimensions at a time (four float4
//      accumulators in registers), then the remaining float4s.
// The other work-items return at once. Heads spread over the cores as
// work-groups. attend_head is also called by matvec_cpu.cl's
// qkv_rope_attention (built after this file), which runs a head as soon as
// its q, k and v rows are written.

#ifndef ATT_WG
#define ATT_WG 64
#endif

// Key t of the window (t < n_pos) is cache row t from layer_off, or, once
// t reaches wrap_at (a sliding-window layer's ring of `ring` rows wrapping
// around, engine/cl/decode_state.h), row t - ring.
inline long kv_row(int t, int wrap_at, int ring) { return t < wrap_at ? t : (long)t - ring; }

// Attention of query head h over the window's n_pos keys, by one work-item.
inline void attend_head(int h, const __global float* q, const __global float* k_cache,
                        const __global float* v_cache, ulong layer_off, int n_pos, int wrap_at,
                        int ring, int n_head, int n_head_kv, int head_dim, __global float* scores,
                        int scores_stride, __global float* out) {
  const int n_kv4 = n_head_kv * head_dim / 4;  // cache row, in float4
  const int hd4 = head_dim / 4;
  const int kvh = h / (n_head / n_head_kv);
  const __global float4* qh = (const __global float4*)(q + h * head_dim);
  const __global float4* kh = (const __global float4*)(k_cache + layer_off) + kvh * hd4;
  const __global float4* vh = (const __global float4*)(v_cache + layer_off) + kvh * hd4;
  __global float* s = scores + (size_t)h * scores_stride;
  const float inv_sqrt = rsqrt((float)head_dim);

  float max = -INFINITY;
  for (int t = 0; t < n_pos; ++t) {
    const __global float4* k = kh + kv_row(t, wrap_at, ring) * n_kv4;
    float4 a0 = 0.0f, a1 = 0.0f;
    int i = 0;
    for (; i + 2 <= hd4; i += 2) {
      a0 = mad(qh[i], k[i], a0);
      a1 = mad(qh[i + 1], k[i + 1], a1);
    }
    if (i < hd4) a0 = mad(qh[i], k[i], a0);
    const float4 a = a0 + a1;
    const float dot = (a.x + a.y + a.z + a.w) * inv_sqrt;
    s[t] = dot;
    max = fmax(max, dot);
  }

  float sum = 0.0f;
  for (int t = 0; t < n_pos; ++t) {
    const float p = exp(s[t] - max);
    s[t] = p;
    sum += p;
  }
  const float inv_sum = 1.0f / sum;

  __global float4* o = (__global float4*)(out + h * head_dim);
  int d = 0;
  for (; d + 4 <= hd4; d += 4) {
    float4 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (int t = 0; t < n_pos; ++t) {
      const __global float4* v = vh + kv_row(t, wrap_at, ring) * n_kv4 + d;
      const float p = s[t];
      a0 = mad(p, v[0], a0);
      a1 = mad(p, v[1], a1);
      a2 = mad(p, v[2], a2);
      a3 = mad(p, v[3], a3);
    }
    o[d] = a0 * inv_sum;
    o[d + 1] = a1 * inv_sum;
    o[d + 2] = a2 * inv_sum;
    o[d + 3] = a3 * inv_sum;
  }
  for (; d < hd4; ++d) {
    float4 a = 0.0f;
    for (int t = 0; t < n_pos; ++t) a = mad(s[t], vh[kv_row(t, wrap_at, ring) * n_kv4 + d], a);
    o[d] = a * inv_sum;
  }
}

__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void attention_decode(
    const __global float* q, const __global float* k_cache, const __global float* v_cache,
    ulong layer_off, int n_pos, int wrap_at, int ring, int n_head, int n_head_kv, int head_dim,
    __global float* scores, int scores_stride, __global float* out) {
  if (get_local_id(0) != 0) return;
  attend_head(get_group_id(0), q, k_cache, v_cache, layer_off, n_pos, wrap_at, ring, n_head,
              n_head_kv, head_dim, scores, scores_stride, out);
}
