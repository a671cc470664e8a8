// Matrix-vector kernels for CPU devices (PoCL), one weight type per build
// (-DWTYPE=<GGML type id>: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16 and
// those of kernels/quant_blocks.cl), built after kernels/quant_blocks.cl and
// kernels/cpu_dot.cl (the row dot products and their algorithm). Same
// kernel names, arguments and launch geometry as kernels/matvec.cl
// (work-groups of ROWS work-items for ROWS output rows), same device weight
// layout (engine/cl/weights.h).
//
// PoCL runs the ROWS work-items of a group as a plain loop and spreads the
// groups over the cores. NR (even, dividing ROWS) rows per work-item share
// each load of x: work-item lid computes rows lid .. lid+NR-1 of its group
// when lid % NR == 0; the others return at once.
//
// Fused RMSNorm (norm weight given): each active work-item computes
// 1/sqrt(mean(x^2) + eps) itself (n_in values, cheap beside NR rows of
// weights) and multiplies x by the norm weight as it loads it; for the
// block types with integer codes the group's first work-item does both once
// while making x's 16-bit form in local memory (group_x16 below, the only
// barrier before the rows).

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef ROWS
#define ROWS 16
#endif
#if ROWS % NR != 0
#error "NR must divide ROWS"
#endif

#if WTYPE == 0
typedef float wq_t;
#elif WTYPE == 1
typedef half wq_t;
#elif WTYPE == 30
typedef ushort wq_t;
#elif WTYPE == 2 || WTYPE == 3 || WTYPE == 8 || QT_GENERIC(WTYPE)
typedef uchar wq_t;
#else
#error "unsupported WTYPE"
#endif
typedef ushort ws_t;  // fp16 bits, converted by half_to_float8

// The first of this work-item's NR rows in row block `block` (ROWS rows),
// or -1 when it computes none.
inline int block_row0(int block, int n_rows) {
  const int lid = get_local_id(0);
  const int row0 = block * ROWS + lid;
  return lid % NR == 0 && row0 < n_rows ? row0 : -1;
}

// The same in the work-group's own block.
inline int item_row0(int n_rows) { return block_row0(get_group_id(0), n_rows); }

// The block types with integer codes (cpu_dot.cl's X16_TYPE) take x' as
// 16-bit integers, made once per work-group in local memory (built with
// -DX16_AS=__local) for rows of up to X16_LOCAL_MAX values; longer rows and
// the other types take the float loop. The persistent decode kernel
// quantizes the same way, so the two paths give the same dot products.
#define X16_LOCAL_MAX 16384
#define WT_X16 X16_TYPE(WTYPE)
#if WT_X16
#define X16_LOCAL __local uchar x16_local[X16_BYTES(X16_LOCAL_MAX)];
#define X16_LOCAL_ARG x16_local
#else
#define X16_LOCAL
#define X16_LOCAL_ARG 0
#endif

// x' = x, or x * norm_w / rms(x) when norm_w is given, in 16-bit form when
// WT_X16 and n_in <= X16_LOCAL_MAX (*use16; else the rows take the float x):
// the group's first work-item quantizes it into `local_x` (and alone
// computes rms(x): every work-item doing so cost as much as the rows), then
// all wait. Every work-item of the group calls this.
inline X16 group_x16(const __global float* x, const __global float* norm_w, float eps, int n_in,
                     __local uchar* local_x, bool* use16) {
  X16 r = {0, 0, 0};
  *use16 = WT_X16 && n_in <= X16_LOCAL_MAX;
#if WT_X16
  if (*use16) {
    if (get_local_id(0) == 0) {
      x16_quantize(x, norm_w, norm_w ? rms_scale(x, n_in, eps) : 1.0f, n_in, local_x);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    r = x16_view(local_x, n_in);
  }
#endif
  return r;
}

// norm_rows_dot (cpu_dot.cl) for this build's weight type, or rows_dot_x16
// with x16 where use16.
inline void wt_rows_dot(const __global wq_t* wq, const __global ws_t* ws, int n_in, int row0,
                        int n_rows, const __global float* x, const __global float* norm_w,
                        float scale, X16 x16, bool use16, float* dots) {
#if WT_X16
  if (use16) {
    rows_dot_x16(WTYPE, (const __global uchar*)wq, ws, n_in, row0, n_rows, x16, dots);
    return;
  }
#endif
  norm_rows_dot(WTYPE, (const __global uchar*)wq, ws, n_in, row0, n_rows, x, norm_w, scale, dots);
}

// This work-item's rows of matvec (nothing when it has none).
inline void matvec_item(const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows,
                        const __global float* x, const __global float* norm_w, float eps,
                        int accumulate, __global float* out, __local uchar* local_x) {
  bool use16;
  const X16 x16 = group_x16(x, norm_w, eps, n_in, local_x, &use16);
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  const float scale = norm_w && !use16 ? rms_scale(x, n_in, eps) : 1.0f;
  float dots[NR];
  wt_rows_dot(wq, ws, n_in, row0, n_rows, x, norm_w, scale, x16, use16, dots);
  for (int r = 0; r < NR && row0 + r < n_rows; ++r) {
    out[row0 + r] = accumulate ? out[row0 + r] + dots[r] : dots[r];
  }
}

// out[r] = dot(W[r], x') for r < n_rows, where x' = x, or x * g * rms_scale
// when norm_w is given; with accumulate != 0, out[r] += ... (residual add).
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void matvec(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, int accumulate, __global float* out) {
  X16_LOCAL
  matvec_item(wq, ws, n_in, n_rows, x, norm_w, eps, accumulate, out, X16_LOCAL_ARG);
}

#ifdef WITH_ARGMAX
// lm_head and the greedy argmax in one launch (built after argmax_cpu.cl):
// out = W x' as in matvec
// (accumulate 0), then *token = argmax(out) with argmax_cpu.cl's rules. Each
// group scans its own ROWS outputs into part_val/part_idx[group] and counts
// itself done with an atomic increment; the group that finishes last (it
// reads n_groups - 1) scans the partial results in group order, writes the
// token and resets *n_done to 0 for the next launch. No group waits for
// another, so any number of PoCL threads (one included) runs it; the atomic
// orders each group's partial result before the last group's reads.
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void matvec_argmax(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, __global float* out, __global float* part_val,
    __global int* part_idx, volatile __global uint* n_done, __global int* token) {
  X16_LOCAL
  matvec_item(wq, ws, n_in, n_rows, x, norm_w, eps, 0, out, X16_LOCAL_ARG);
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (get_local_id(0) != 0) return;
  const int g = get_group_id(0);
  const int n_groups = get_num_groups(0);
  float bv = 0.0f;
  int bi = -1;
  for (int i = g * ROWS; i < min(n_rows, (g + 1) * ROWS); ++i) argmax_merge(out[i], i, &bv, &bi);
  part_val[g] = bv;
  part_idx[g] = bi;
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  if (atomic_inc(n_done) != (uint)(n_groups - 1)) return;
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  bv = 0.0f;
  bi = -1;
  for (int p = 0; p < n_groups; ++p) argmax_merge(part_val[p], part_idx[p], &bv, &bi);
  *token = bi < 0 ? 0 : bi;
  *n_done = 0;
}
#endif

// The FFN's gate activation: SiLU (act 0) or GELU, tanh form (act 1).
inline float ffn_act(float g, int act) {
  return act ? 0.5f * g * (1.0f + tanh(0.7978845608f * (g + 0.044715f * g * g * g)))
             : g / (1.0f + exp(-g));
}

// h[r] = act(dot(Wg[r], x')) * dot(Wu[r], x'), x' = x * g * rms_scale, act
// SiLU (act 0) or GELU's tanh form (act 1).
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void ffn_gate_up(
    const __global wq_t* wq_gate, const __global ws_t* ws_gate, const __global wq_t* wq_up,
    const __global ws_t* ws_up, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, int act, __global float* h) {
  X16_LOCAL
  bool use16;
  const X16 x16 = group_x16(x, norm_w, eps, n_in, X16_LOCAL_ARG, &use16);
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  const float scale = use16 ? 1.0f : rms_scale(x, n_in, eps);
  float gate[NR], up[NR];
  wt_rows_dot(wq_gate, ws_gate, n_in, row0, n_rows, x, norm_w, scale, x16, use16, gate);
  wt_rows_dot(wq_up, ws_up, n_in, row0, n_rows, x, norm_w, scale, x16, use16, up);
  for (int r = 0; r < NR && row0 + r < n_rows; ++r) {
    h[row0 + r] = ffn_act(gate[r], act) * up[r];
  }
}

// The rows of qkv_rope from row0 (see below): NR dot products, RoPE, stores.
inline void qkv_rope_rows(const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows,
                          int row_base, int row0, const __global float* x,
                          const __global float* norm_w, int n_embd, int n_embd_kv,
                          int head_dim, int n_rot, const __global float2* rope_cs, int pos,
                          __global float* q, __global float* k_cache, __global float* v_cache,
                          ulong cache_off, float scale, X16 x16, bool use16) {
  float dots[NR];
  wt_rows_dot(wq, ws, n_in, row0, n_rows, x, norm_w, scale, x16, use16, dots);
  for (int r = 0; r < NR && row0 + r < n_rows; r += 2) {
    const int gr = row_base + row0 + r;  // even row of the pair, in q;k;v space
    rope_store_pair(gr, dots[r], dots[r + 1], n_embd, n_embd_kv, head_dim, n_rot, rope_cs, pos, q,
                    k_cache, v_cache, cache_off);
  }
}

// RMSNorm + rows [row_base, row_base + n_rows) of the stacked [Wq; Wk; Wv]
// projection, RoPE on q and k, k and v written into the KV cache at
// cache_off (see kernels/matvec.cl). row_base and row0 are even, so each
// rotated pair lies in one work-item.
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void qkv_rope(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, int row_base,
    const __global float* x, const __global float* norm_w, float eps, int n_embd, int n_embd_kv,
    int head_dim, int n_rot, const __global float2* rope_cs, int pos, __global float* q,
    __global float* k_cache, __global float* v_cache, ulong cache_off) {
  X16_LOCAL
  bool use16;
  const X16 x16 = group_x16(x, norm_w, eps, n_in, X16_LOCAL_ARG, &use16);
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  const float scale = use16 ? 1.0f : rms_scale(x, n_in, eps);
  qkv_rope_rows(wq, ws, n_in, n_rows, row_base, row0, x, norm_w, n_embd, n_embd_kv, head_dim,
                n_rot, rope_cs, pos, q, k_cache, v_cache, cache_off, scale, x16, use16);
}

#ifdef WITH_ATTENTION
// The row blocks that query head h reads: those of its q rows and of its
// KV head's k and v rows (three sorted, disjoint ranges of head_dim rows).
// feeds: whether `block` is one of them; returns how many there are (a
// block shared by two consecutive ranges counted once; O(1): this runs for
// every head in every group).
inline uint head_blocks(int block, int h, int n_embd, int n_embd_kv, int head_dim, int n_head,
                        int n_head_kv, bool* feeds) {
  const int kvh = h / (n_head / n_head_kv);
  const int starts[3] = {h * head_dim, n_embd + kvh * head_dim,
                         n_embd + n_embd_kv + kvh * head_dim};
  uint n = 0;
  int prev_last = -1;
  *feeds = false;
  for (int i = 0; i < 3; ++i) {
    const int first = starts[i] / ROWS, last = (starts[i] + head_dim - 1) / ROWS;
    n += last - first + 1 - (first == prev_last);
    *feeds |= first <= block && block <= last;
    prev_last = last;
  }
  return n;
}

// qkv_rope over the whole stacked matrix (same arguments; row_base must be
// 0) and the decode attention (attention_cpu.cl, built before this file) over positions
// 0 .. pos in one launch. Work-group g computes row block n_groups - 1 - g
// (k and v first, so heads become ready one by one as the q blocks finish),
// then counts itself into head_done[h] of every head it feeds; the group
// whose increment completes a head (the count of blocks feeding it) runs
// that head's attention and resets its counter for the next layer. No
// group waits for another, so any number of PoCL threads (one included)
// runs it; the atomic orders the q, k and v stores of every feeding group
// before the reads of the group that runs the head.
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void qkv_rope_attention(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, int row_base,
    const __global float* x, const __global float* norm_w, float eps, int n_embd, int n_embd_kv,
    int head_dim, int n_rot, const __global float2* rope_cs, int pos, __global float* q,
    __global float* k_cache, __global float* v_cache, ulong cache_off, int n_head, int n_head_kv,
    __global float* scores, int scores_stride, __global float* att_out,
    volatile __global uint* head_done) {
  X16_LOCAL
  bool use16;
  const X16 x16 = group_x16(x, norm_w, eps, n_in, X16_LOCAL_ARG, &use16);
  const int n_groups = get_num_groups(0);
  const int block = n_groups - 1 - get_group_id(0);
  const int row0 = block_row0(block, n_rows);
  if (row0 >= 0) {
    const float scale = use16 ? 1.0f : rms_scale(x, n_in, eps);
    qkv_rope_rows(wq, ws, n_in, n_rows, row_base, row0, x, norm_w, n_embd, n_embd_kv, head_dim,
                  n_rot, rope_cs, pos, q, k_cache, v_cache, cache_off, scale, x16, use16);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (get_local_id(0) != 0) return;
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  const ulong layer_off = cache_off - (ulong)pos * (ulong)n_embd_kv;
  for (int h = 0; h < n_head; ++h) {
    bool feeds;
    const uint n_feeding =
        head_blocks(block, h, n_embd, n_embd_kv, head_dim, n_head, n_head_kv, &feeds);
    if (!feeds) continue;
    if (atomic_inc(head_done + h) != n_feeding - 1) continue;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    head_done[h] = 0;
    attend_head(h, q, k_cache, v_cache, layer_off, pos + 1, pos + 1, 0, n_head, n_head_kv, head_dim,
                scores, scores_stride, att_out);
  }
}
#endif
