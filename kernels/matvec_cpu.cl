// Matrix-vector kernels for CPU devices (PoCL), one weight type per build
// (-DWTYPE=<GGML type id>: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0). Same kernel
// names, arguments and launch geometry as kernels/matvec.cl (work-groups of
// ROWS work-items for ROWS output rows), same device weight layout
// (engine/cl_weights.h): per block of 32 values 16 nibble bytes (byte j holds
// value j in its low half, value j + 16 in its high half) or 32 int8, and the
// fp16 scales in a separate array.
//
// Algorithm: a work-item computes whole rows with explicit 8-wide float
// vectors (one AVX2 register) and no local memory, barriers or
// cross-work-item reductions. Bytes 0..7 of a Q4 block hold values 0..7 (low
// nibbles) and 16..23 (high), bytes 8..15 values 8..15 and 24..31: widening 8
// bytes to int32 lanes (one vpmovzxbd from memory) and taking `& 15` and
// `>> 4` gives two float8 of codes that line up with contiguous float8 loads
// of x. Q4_0's offset 8 and Q4_1's minimum use the block sum of x, computed
// once per block for all rows; Q8_0 widens 8 int8 at a time. The fp16 scale
// is broadcast and converted with F16C. fma(), not mad(): PoCL did not
// contract mad() into vfmadd. Per block the products go into a
// float8 accumulator per row, summed horizontally once per row. PoCL runs
// the ROWS work-items of a group as a plain loop and spreads the groups over
// the cores. NR (even, dividing ROWS) rows per work-item share each load of
// x: work-item lid computes rows lid .. lid+NR-1 of its group when
// lid % NR == 0; the others return at once. qkv_rope needs the rotated pair
// (2i, 2i + 1) in one work-item, hence NR even. All arithmetic is float32
// multiply-add, like matvec.cl (an int16-quantized x with vpmaddwd was 1.3x
// faster but moved SmolLM2's logits by 1.8e-3 against the reference).
//
// Fused RMSNorm (norm weight given): each active work-item computes
// 1/sqrt(mean(x^2) + eps) itself (n_in values, cheap beside NR rows of
// weights) and multiplies x by the norm weight as it loads it.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef ROWS
#define ROWS 16
#endif
#ifndef NR
#define NR 2
#endif
#ifndef CPU_PORTABLE
#define CPU_PORTABLE 0
#endif
#if NR % 2 != 0 || ROWS % NR != 0
#error "NR must be even and divide ROWS"
#endif

#if WTYPE == 0
typedef float wq_t;
#elif WTYPE == 1
typedef half wq_t;
#elif WTYPE == 2 || WTYPE == 3 || WTYPE == 8
typedef uchar16 wq_t;
#else
#error "unsupported WTYPE"
#endif
typedef ushort ws_t;  // fp16 bits, converted by half_to_float8

// Loops over a work-item's NR rows, unrolled so the accumulators stay in
// registers (PoCL's pipeline left a 2-trip loop rolled, accumulators on the stack).
#define FOR_ROWS(r) __attribute__((opencl_unroll_hint)) for (int r = 0; r < NR; ++r)

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

// sum_r dots[r] for rows row0 .. row0 + NR - 1 (rows past n_rows read row
// row0 instead, so every load stays inside the matrix), x' = x or x * g.
// use_g is a literal at every call: the compiler drops the unused path.
inline void rows_dot(const __global wq_t* wq, const __global ws_t* ws, int n_in, int row0,
                     int n_rows, const __global float* x, const __global float* g, const int use_g,
                     float* dots) {
  size_t base[NR];
  FOR_ROWS(r) {
    const int row = row0 + r < n_rows ? row0 + r : row0;
#if WTYPE == 0 || WTYPE == 1
    base[r] = (size_t)row * n_in;
#elif WTYPE == 8
    base[r] = (size_t)row * (n_in / 16);  // uchar16 units, 2 per block
#else
    base[r] = (size_t)row * (n_in / 32);
#endif
  }
  float8 acc[NR];
  FOR_ROWS(r) acc[r] = 0.0f;

#if WTYPE == 0 || WTYPE == 1
  float tail[NR];
  FOR_ROWS(r) tail[r] = 0.0f;
  int i = 0;
  for (; i + 8 <= n_in; i += 8) {
    float8 xv = vload8(0, x + i);
    if (use_g) xv *= vload8(0, g + i);
    FOR_ROWS(r) {
#if WTYPE == 0
      const float8 wv = vload8(0, wq + base[r] + i);
#else
      const float8 wv = vload_half8(0, wq + base[r] + i);  // F16: not tuned
#endif
      acc[r] = fma(wv, xv, acc[r]);
    }
  }
  for (; i < n_in; ++i) {
    const float xv = use_g ? x[i] * g[i] : x[i];
    FOR_ROWS(r) {
#if WTYPE == 0
      tail[r] += wq[base[r] + i] * xv;
#else
      tail[r] += vload_half(base[r] + i, wq) * xv;
#endif
    }
  }
  FOR_ROWS(r) dots[r] = hsum8(acc[r]) + tail[r];
#else
  // Blocks of x are 128-byte aligned (buffers are, and a block is 32
  // floats): plain float8 loads. vload16 became 8-byte pieces on PoCL.
  const __global float8* x8 = (const __global float8*)x;
  const __global float8* g8 = (const __global float8*)g;
  const int nb = n_in / 32;
  for (int b = 0; b < nb; ++b) {
    float8 x0 = x8[4 * b], x1 = x8[4 * b + 1], x2 = x8[4 * b + 2], x3 = x8[4 * b + 3];
    if (use_g) {
      x0 *= g8[4 * b];
      x1 *= g8[4 * b + 1];
      x2 *= g8[4 * b + 2];
      x3 *= g8[4 * b + 3];
    }
#if WTYPE != 8
    const float8 xs = (x0 + x1) + (x2 + x3);  // Q4_0: the codes' offset 8; Q4_1: the min
#endif
    FOR_ROWS(r) {
#if WTYPE == 8
      // Eight int8 at a time: one vpmovsxbd from memory each.
      const __global char8* c = (const __global char8*)(wq + base[r] + 2 * b);
      float8 t = convert_float8(convert_int8(c[0])) * x0;
      t = fma(convert_float8(convert_int8(c[1])), x1, t);
      t = fma(convert_float8(convert_int8(c[2])), x2, t);
      t = fma(convert_float8(convert_int8(c[3])), x3, t);
      acc[r] = fma(half_to_float8(ws[base[r] / 2 + b]), t, acc[r]);
#else
      // Bytes 0..7 hold values 0..7 (low nibbles) and 16..23 (high), bytes
      // 8..15 values 8..15 and 24..31: each group of 8 bytes widened to
      // int32 lanes (one vpmovzxbd from memory) gives two float8 of codes.
      const __global uchar8* qb = (const __global uchar8*)(wq + base[r] + b);
      const int8 v0 = convert_int8(qb[0]), v1 = convert_int8(qb[1]);
      float8 t = convert_float8(v0 & 15) * x0;
      t = fma(convert_float8(v1 & 15), x1, t);
      t = fma(convert_float8(v0 >> 4), x2, t);
      t = fma(convert_float8(v1 >> 4), x3, t);
#if WTYPE == 2
      acc[r] = fma(half_to_float8(ws[base[r] + b]), fma((float8)-8.0f, xs, t), acc[r]);
#else
      const ushort2 dm = ((const __global ushort2*)ws)[base[r] + b];
      acc[r] = fma(half_to_float8(dm.x), t, acc[r]);
      acc[r] = fma(half_to_float8(dm.y), xs, acc[r]);
#endif
#endif
    }
  }
  FOR_ROWS(r) dots[r] = hsum8(acc[r]);
#endif
}

// The first of this work-item's NR rows in row block `block` (ROWS rows),
// or -1 when it computes none.
inline int block_row0(int block, int n_rows) {
  const int lid = get_local_id(0);
  const int row0 = block * ROWS + lid;
  return lid % NR == 0 && row0 < n_rows ? row0 : -1;
}

// The same in the work-group's own block.
inline int item_row0(int n_rows) { return block_row0(get_group_id(0), n_rows); }

// NR row dot products from row0, with x * g * scale when norm_w is given.
inline void norm_rows_dot(const __global wq_t* wq, const __global ws_t* ws, int n_in, int row0,
                          int n_rows, const __global float* x, const __global float* norm_w,
                          float scale, float* dots) {
  if (norm_w) {
    rows_dot(wq, ws, n_in, row0, n_rows, x, norm_w, 1, dots);
    FOR_ROWS(r) dots[r] *= scale;
  } else {
    rows_dot(wq, ws, n_in, row0, n_rows, x, 0, 0, dots);
  }
}

// This work-item's rows of matvec (nothing when it has none).
inline void matvec_item(const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows,
                        const __global float* x, const __global float* norm_w, float eps,
                        int accumulate, __global float* out) {
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  float dots[NR];
  norm_rows_dot(wq, ws, n_in, row0, n_rows, x, norm_w, norm_w ? rms_scale(x, n_in, eps) : 1.0f,
                dots);
  for (int r = 0; r < NR && row0 + r < n_rows; ++r) {
    out[row0 + r] = accumulate ? out[row0 + r] + dots[r] : dots[r];
  }
}

// out[r] = dot(W[r], x') for r < n_rows, where x' = x, or x * g * rms_scale
// when norm_w is given; with accumulate != 0, out[r] += ... (residual add).
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void matvec(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, int accumulate, __global float* out) {
  matvec_item(wq, ws, n_in, n_rows, x, norm_w, eps, accumulate, out);
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
  matvec_item(wq, ws, n_in, n_rows, x, norm_w, eps, 0, out);
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

// h[r] = silu(dot(Wg[r], x')) * dot(Wu[r], x'), x' = x * g * rms_scale.
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void ffn_gate_up(
    const __global wq_t* wq_gate, const __global ws_t* ws_gate, const __global wq_t* wq_up,
    const __global ws_t* ws_up, int n_in, int n_rows, const __global float* x,
    const __global float* norm_w, float eps, __global float* h) {
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  const float scale = rms_scale(x, n_in, eps);
  float gate[NR], up[NR];
  norm_rows_dot(wq_gate, ws_gate, n_in, row0, n_rows, x, norm_w, scale, gate);
  norm_rows_dot(wq_up, ws_up, n_in, row0, n_rows, x, norm_w, scale, up);
  for (int r = 0; r < NR && row0 + r < n_rows; ++r) {
    h[row0 + r] = gate[r] / (1.0f + exp(-gate[r])) * up[r];
  }
}

// The rows of qkv_rope from row0 (see below): NR dot products, RoPE, stores.
inline void qkv_rope_rows(const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows,
                          int row_base, int row0, const __global float* x,
                          const __global float* norm_w, float eps, int n_embd, int n_embd_kv,
                          int head_dim, int n_rot, const __global float2* rope_cs, int pos,
                          __global float* q, __global float* k_cache, __global float* v_cache,
                          ulong cache_off) {
  float dots[NR];
  norm_rows_dot(wq, ws, n_in, row0, n_rows, x, norm_w, rms_scale(x, n_in, eps), dots);
  for (int r = 0; r < NR && row0 + r < n_rows; r += 2) {
    const int gr = row_base + row0 + r;  // even row of the pair, in q;k;v space
    float a = dots[r], b = dots[r + 1];
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

// RMSNorm + rows [row_base, row_base + n_rows) of the stacked [Wq; Wk; Wv]
// projection, RoPE on q and k, k and v written into the KV cache at
// cache_off (see kernels/matvec.cl). row_base and row0 are even, so each
// rotated pair lies in one work-item.
__kernel __attribute__((reqd_work_group_size(ROWS, 1, 1))) void qkv_rope(
    const __global wq_t* wq, const __global ws_t* ws, int n_in, int n_rows, int row_base,
    const __global float* x, const __global float* norm_w, float eps, int n_embd, int n_embd_kv,
    int head_dim, int n_rot, const __global float2* rope_cs, int pos, __global float* q,
    __global float* k_cache, __global float* v_cache, ulong cache_off) {
  const int row0 = item_row0(n_rows);
  if (row0 < 0) return;
  qkv_rope_rows(wq, ws, n_in, n_rows, row_base, row0, x, norm_w, eps, n_embd, n_embd_kv, head_dim,
                n_rot, rope_cs, pos, q, k_cache, v_cache, cache_off);
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
  const int n_groups = get_num_groups(0);
  const int block = n_groups - 1 - get_group_id(0);
  const int row0 = block_row0(block, n_rows);
  if (row0 >= 0) {
    qkv_rope_rows(wq, ws, n_in, n_rows, row_base, row0, x, norm_w, eps, n_embd, n_embd_kv, head_dim,
                  n_rot, rope_cs, pos, q, k_cache, v_cache, cache_off);
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
    attend_head(h, q, k_cache, v_cache, layer_off, pos + 1, n_head, n_head_kv, head_dim, scores,
                scores_stride, att_out);
  }
}
#endif
