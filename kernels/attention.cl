// Decode attention: one query position against the KV cache, one work-group
// per query head. Grouped-query attention: query head h reads KV head
// h / (n_head / n_head_kv).
//
// Three phases per work-group, all over the positions 0..n_pos-1:
//   1. scores s_t = q . k_t / sqrt(head_dim) into a scratch row (global, so any
//      context length fits), tracking the maximum;
//   2. p_t = exp(s_t - max) and their sum;
//   3. out[i] = sum_t p_t v_t[i] / sum, work-items split over (i, t).
// Cache layout: rows of n_embd_kv floats per layer (kv_row below). head_dim
// is a multiple of 4 (checked by the host): rows are read as float4.

#ifndef ATT_WG
#define ATT_WG 128
#endif

// Key t of the window (t < n_pos) is cache row t from layer_off, or, once
// t reaches wrap_at (a sliding-window layer's ring of `ring` rows wrapping
// around, engine/cl/decode_state.h), row t - ring.
inline long kv_row(int t, int wrap_at, int ring) { return t < wrap_at ? t : (long)t - ring; }

inline float group_reduce(float v, __local float* red, int op_max) {
  const int lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ATT_WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = op_max ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void attention_decode(
    const __global float* q, const __global float* k_cache, const __global float* v_cache,
    ulong layer_off, int n_pos, int wrap_at, int ring, int n_head, int n_head_kv, int head_dim,
    __global float* scores, int scores_stride, __global float* out) {
  __local float red[ATT_WG];
  __local float4 red4[ATT_WG];
  const int h = get_group_id(0);
  const int lid = get_local_id(0);
  const int n_embd_kv = n_head_kv * head_dim;
  const int kvh = h / (n_head / n_head_kv);
  const int hd4 = head_dim / 4;
  const __global float4* qh = (const __global float4*)(q + h * head_dim);
  const __global float* kh = k_cache + layer_off + kvh * head_dim;
  const __global float* vh = v_cache + layer_off + kvh * head_dim;
  __global float* s = scores + (size_t)h * scores_stride;
  const float inv_sqrt = rsqrt((float)head_dim);

  float local_max = -INFINITY;
  for (int t = lid; t < n_pos; t += ATT_WG) {
    const __global float4* k = (const __global float4*)(kh + kv_row(t, wrap_at, ring) * n_embd_kv);
    float4 acc = 0.0f;
    for (int i = 0; i < hd4; ++i) acc += qh[i] * k[i];
    const float dot = (acc.x + acc.y + acc.z + acc.w) * inv_sqrt;
    s[t] = dot;
    local_max = fmax(local_max, dot);
  }
  const float max = group_reduce(local_max, red, 1);

  float local_sum = 0.0f;
  for (int t = lid; t < n_pos; t += ATT_WG) {  // same t as above: own writes
    const float p = exp(s[t] - max);
    s[t] = p;
    local_sum += p;
  }
  const float inv_sum = 1.0f / group_reduce(local_sum, red, 0);
  barrier(CLK_GLOBAL_MEM_FENCE);  // every p_t visible to the whole group

  // Work-item (d, part): dimensions 4d..4d+3 over positions part,
  // part + n_parts, ...; head_dim / 4 <= ATT_WG (checked by the host).
  const int n_parts = ATT_WG / hd4;
  const int d = lid % hd4;
  const int part = lid / hd4;
  float4 acc = 0.0f;
  if (part < n_parts) {
    for (int t = part; t < n_pos; t += n_parts) {
      acc += s[t] * vload4(d, vh + kv_row(t, wrap_at, ring) * n_embd_kv);
    }
  }
  red4[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < hd4) {
    float4 total = 0.0f;
    for (int p = 0; p < n_parts; ++p) total += red4[p * hd4 + lid];
    vstore4(total * inv_sum, lid, out + h * head_dim);
  }
}
