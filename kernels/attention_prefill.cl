// Causal attention of a prefill chunk against the KV cache. Query t of the
// chunk sits at position pos0 + t and attends to cache positions
// 0..pos0 + t (the chunk's own keys were appended by rope_kv_rows before).
// Grouped-query attention: query head h reads KV head h / (n_head / n_head_kv).
//
// A work-group takes ATT_TQ consecutive queries of one head (one work-item
// per query, holding q and its output accumulator in registers) and walks the
// keys in tiles of ATT_TK positions, up to the last key its last query needs:
//   1. the tile's K and V rows are copied into local memory (shared by all
//      ATT_TQ queries: each key is read from global memory once per
//      work-group, not once per query);
//   2. each work-item scores its query against the tile's keys (masked past
//      its own position), then updates a running maximum m, softmax
//      denominator l and output o the streaming ("online softmax") way:
//      o = o * exp(m_old - m) + sum_j exp(s_j - m) v_j, rescaling once per
//      tile, never storing the scores to global memory.
// out[t][h * HEAD_DIM ..] = o / l. HEAD_DIM (a multiple of 4) is a build
// option so q and o are register arrays of float4. Masked entries use a large
// finite negative instead of -inf: the programs build with
// -cl-fast-relaxed-math, which assumes finite values.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef ATT_TQ
#define ATT_TQ 32
#endif
#ifndef ATT_TK
#define ATT_TK 32
#endif
#define HD4 (HEAD_DIM / 4)
#define NEG_BIG (-1.0e30f)

// q, out: [n_tok][n_head * HEAD_DIM]; caches [n_ctx][n_head_kv * HEAD_DIM]
// from float offset layer_off. Launch: global (n_head, ceil(n_tok / ATT_TQ) *
// ATT_TQ), local (1, ATT_TQ).
__kernel __attribute__((reqd_work_group_size(1, ATT_TQ, 1))) void attention_prefill(
    const __global float* q, const __global float* k_cache, const __global float* v_cache,
    ulong layer_off, int pos0, int n_tok, int n_head, int n_head_kv, __global float* out) {
  __local float4 kl[ATT_TK * HD4];
  __local float4 vl[ATT_TK * HD4];
  const int h = get_group_id(0);
  const int lid = get_local_id(1);
  const int t0 = get_group_id(1) * ATT_TQ;
  const int t = t0 + lid;
  const int n_embd = n_head * HEAD_DIM;
  const int n_embd_kv = n_head_kv * HEAD_DIM;
  const int kvh = h / (n_head / n_head_kv);
  const __global float* kh = k_cache + layer_off + kvh * HEAD_DIM;
  const __global float* vh = v_cache + layer_off + kvh * HEAD_DIM;
  const float scale = rsqrt((float)HEAD_DIM);

  const bool active = t < n_tok;
  float4 qr[HD4], o[HD4];
  for (int d = 0; d < HD4; ++d) {
    qr[d] = active ? vload4(d, q + (size_t)t * n_embd + h * HEAD_DIM) * scale : (float4)(0.0f);
    o[d] = (float4)(0.0f);
  }
  float m = NEG_BIG, l = 0.0f;
  const int n_keys_me = pos0 + t + 1;  // keys this query sees
  const int n_keys = pos0 + min(t0 + ATT_TQ, n_tok);  // keys the work-group needs

  for (int kt = 0; kt < n_keys; kt += ATT_TK) {
    // 1. K and V rows kt..kt + ATT_TK into local memory.
    for (int e = lid; e < ATT_TK * HD4; e += ATT_TQ) {
      const int j = e / HD4, d = e % HD4;
      const bool in = kt + j < n_keys;
      const size_t row = (size_t)(kt + j) * n_embd_kv;
      kl[e] = in ? vload4(d, kh + row) : (float4)(0.0f);
      vl[e] = in ? vload4(d, vh + row) : (float4)(0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // 2. scores and the streaming softmax update.
    if (active && kt < n_keys_me) {
      float s[ATT_TK];
      float tile_max = NEG_BIG;
      for (int j = 0; j < ATT_TK; ++j) {
        float4 acc = (float4)(0.0f);
        for (int d = 0; d < HD4; ++d) acc = mad(qr[d], kl[j * HD4 + d], acc);
        const float sj = kt + j < n_keys_me ? acc.x + acc.y + acc.z + acc.w : NEG_BIG;
        s[j] = sj;
        tile_max = fmax(tile_max, sj);
      }
      const float m_new = fmax(m, tile_max);
      const float corr = exp(m - m_new);
      l *= corr;
      for (int d = 0; d < HD4; ++d) o[d] *= corr;
      for (int j = 0; j < ATT_TK; ++j) {
        const float p = kt + j < n_keys_me ? exp(s[j] - m_new) : 0.0f;
        l += p;
        for (int d = 0; d < HD4; ++d) o[d] = mad((float4)(p), vl[j * HD4 + d], o[d]);
      }
      m = m_new;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (active) {
    const float inv_l = 1.0f / l;
    for (int d = 0; d < HD4; ++d) vstore4(o[d] * inv_l, d, out + (size_t)t * n_embd + h * HEAD_DIM);
  }
}
