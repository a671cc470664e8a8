// One decode token in ONE launch: a persistent kernel whose work-groups stay
// resident for the whole token and meet at grid-wide barriers between the
// stages that depend on each other's results. On NVIDIA's OpenCL each launch
// costs ~3 us of host time and the GPU runs dependent tiny kernels at about
// that pace, so replacing ~150 launches by one is the point; a grid barrier
// costs ~1.5 us.
//
// decode_token (at the end of this file) is the whole step, like llama2.c's
// forward(); per layer il, each stage followed by a grid barrier:
//   P1 qkv_rope_append  x' = rmsnorm(x) * attn_norm; [q; k; v] = Wqkv x';
//                       RoPE; k, v -> cache at pos
//   P2 attention        att = softmax(q K^T / sqrt(HEAD_DIM)) V per head over
//                       positions 0..pos (long contexts: a head's positions
//                       split over work-groups, the last of them to finish
//                       merges the partials)
//   P3 matvec_residual  x += Wo att
//   P4 ffn_gate_up      x' = rmsnorm(x) * ffn_norm; h = silu(Wg x') * (Wu x')
//   P5 matvec_residual  x += Wd h
// then head_logits: x' = rmsnorm(x) * output_norm; logits = Whead x' with
// each work-group's argmax candidate; the last work-group to arrive picks the
// token (pick_token: NaN never wins, ties go to the lowest id) and writes
// ids[0], and a copy at ids[N_CTX + pos % ID_RING] that the host reads on a
// queue of its own. The embedding row is dequantized by every work-group
// straight into local memory at the start (work-group 0 also stores it as x).
//
// The order of memory operations is the point of the stage boundaries: a grid
// barrier is two calls, grid_arrive and grid_wait, and between them each
// work-group issues the next stage's loads that need nothing from the other
// work-groups (the *_early_loads and *_first_row calls: its warps' first
// weight rows into registers, the norm weights) and, at P1's barrier, the L2
// prefetch of the coming layers' weights (L2_PREFETCH: layers of at most 16
// MiB). After the wait only the
// activations are waited for. (Issued before the arrival, those loads would
// hold up the arrival's release, which waits for outstanding loads.)
//
// Work split: a warp (32 work-items, PTX shuffles) computes one matrix row at
// a time, its lanes taking every 32nd block; rows are spread over all warps of
// the grid. Activations that a stage reads whole (x, att, h) are first staged
// into local memory with volatile loads, which bypass the non-coherent L1
// (other work-groups wrote them during this launch): as 16-bit integers with
// a scale per 32 values where the stage's weight types have codes of at most
// 8 bits, whose dot products are then integer instructions (XI, below),
// else as floats.
//
// Weights live in one arena buffer; `layer_off` holds byte offsets per layer
// (LO_* in kernels/persistent_layout.cl, built before this file). Types are
// compile-time: WT_Q, WT_K, WT_V, WT_WO, WT_FFN (gate and up), WT_DOWN, each
// with a second type WT_<role>_ALT for the layers whose LO_ALT word says so
// (persistent_layout.cl), WT_HEAD, WT_EMBD (GGML type ids 0 F32, 1 F16, 2
// Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16 and the others of kernels/quant_blocks.cl,
// built before this file); layouts are those of engine/cl/block_layout.h.
// Q4_0, Q4_1, Q8_0 and the ext types (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) have
// loops of their own (and rows held in registers across barriers); the other
// types are read 8 values at a time by block_values8. Where a role has one type (ALT = its type),
// its ALT branches fold away; Q, K and V of one type (QKV_STACKED) are one stacked matrix.
//
// The barrier counts arrivals on a counter that only the host resets: barrier
// k of this launch waits until counter - (bar_base + k * n_groups) >= 0 in
// wrapping 32-bit arithmetic. A work-group that waits too long (work-groups
// not all resident) sets *abort_flag and stops waiting; the host then falls
// back to the multi-kernel path. Requires NVIDIA (inline PTX); the host enables this
// path only after the kernel's own self-test (token_index < 0) passes.
//
// Other architectures' graphs (engine/model/architecture.h) are compile-time
// options, all 0 for llama's (whose code they leave as it was):
//   NEOX        RoPE turns dimensions j and j + N_ROT / 2 of a head, not
//               2j and 2j + 1 (P1 computes those two rows as its pair)
//   QKV_BIAS    q, k, v += [bq; bk; bv] (LO_QKV_BIAS)
//   QK_NORM     q and k RMS-normed per head (LO_Q_NORM, LO_K_NORM) before
//               RoPE: P1 stores q and k raw (k in h, free until P4), and
//               each attention unit norms and turns its q head itself; the
//               units whose span ends at pos also k's head at pos, writing
//               it to the cache (the same bits from each), so no grid
//               barrier is added (H100, Gemma 3 270M shape: a stage of its
//               own cost 43 us of 508 per token)
//   POST_NORMS  x += rmsnorm(Wo att) * post_attn_norm, and the same with
//               the FFN's output and post_ffn_norm: P3 and P5 write to o,
//               and every work-group keeps its own copy of x in local
//               memory (xr), adding the normed o where the next stage
//               stages its input (the same arithmetic in every work-group,
//               so the copies agree bit for bit)
//   FFN_GELU    GELU (tanh form) in place of SiLU
//   WINDOW      > 0: layers whose LO_ALT word has LAYER_SWA attend over the
//               last WINDOW positions, with the RoPE table rope_cs_swa; their
//               K / V rows are a ring of KV_RING (position p at row
//               p % KV_RING, engine/cl/decode_state.h), the others' N_CTX
//   EMBED_SCALE the embedding row's factor; Q_MUL q's on top of
//               1/sqrt(HEAD_DIM); N_EMBD_Q (persistent_layout.cl) q's width
//
// tests/nvptx_check.sh compiles every configuration the host can build
// without a GPU; tests/device_ab.sh times two versions on one.

// ---- tunables and shapes ------------------------------------------------------

// Every function here is inlined into decode_token, by force: the stage
// functions are long and two have two call sites, where a compiler's own
// heuristic may keep a call (with C99 `inline`, a call to a function that
// has no out-of-line definition: clang then fails to link).
#define INLINE inline __attribute__((always_inline))

// Work-items per work-group: the host passes 512 or 256 (both built by
// test_cl_persistent on NVIDIA).
#ifndef PWG
#error "PWG (work-items per work-group) must be defined"
#endif
#define WARPS (PWG / 32)
// A barrier wait gives up after this long (GPU clock, ns).
#define SPIN_NS 100000000ul

// Layer offsets (LO_*), N_EMBD_KV, N_QKV, MAX2 and the graph options'
// defaults: kernels/persistent_layout.cl.
#define LOCAL_X MAX2(N_FF, MAX2(N_EMBD, N_EMBD_Q))
// Matrix inputs sit in local memory with each block of 32 values padded to 36
// floats: a lane per block then reads at a stride of 36 floats, so the eight
// lanes of a 16-byte access phase hit distinct banks (at a stride of 32 they
// all hit the same ones: an 18-way conflict in the first version, which cost
// more than the weight loads).
#define XS 36
#define XP(i) (((i) >> 5) * XS + ((i)&31))
#define LOCAL_XP (LOCAL_X / 32 * XS)

// Attention splits: past ATT_SPLIT_POS positions, a head's positions go to up
// to ATT_SPLIT_MAX work-groups, at least ATT_SPLIT_SPAN each; a split's
// partial (m, l, unnormalised sum of V) goes to att_part (ATT_PART and
// ATT_SPLIT_MAX: kernels/persistent_layout.cl), and the head's last split to
// finish (att_count) merges them into att.
#ifndef ATT_SPLIT_POS
#define ATT_SPLIT_POS 128
#endif
// (64: d512 +3-5% against 128 on the H200; splitting 128 positions or fewer
// cost more in merging than it saved.)
#define ATT_SPLIT_SPAN (ATT_SPLIT_POS < 64 ? ATT_SPLIT_POS : 64)
// Attention (P2): a warp per position at a time, lane l holding the AW_D
// dimensions l, l + 32, ... (HEAD_DIM a power of two, 32 to 256), so each
// load instruction of a warp reads 128 contiguous bytes (H200, against lanes
// on AW_D adjacent dimensions: tg128 2,434-2,445 vs 2,425-2,429, @d2048
// 1,798 vs 1,754). The warps' partials meet in att_acc, a row of AW_STRIDE
// floats per warp, where work-item (d, p) of ATT_PARTS per dimension adds
// every ATT_PARTS-th warp (the stride's padding puts those loads in distinct
// banks).
#define AW_D (HEAD_DIM / 32)
// Positions per warp in a long round: K and V of 8 positions are 16 * AW_D
// floats per work-item; 4 for heads of 256 keep that at 64.
#define ATT_LONG_ROUND (AW_D <= 4 ? 8 : 4)
#define ATT_PARTS (PWG / HEAD_DIM)
#define AW_STRIDE (HEAD_DIM + (ATT_PARTS > 1 ? 32 / ATT_PARTS : 0))
// att_acc also serves the split merge as PWG floats: WARPS * AW_STRIDE is at
// least PWG for every HEAD_DIM from 32 on.
#if WARPS * AW_STRIDE < PWG
#error "att_acc: fewer than PWG floats"
#endif

// The layers' L2 prefetch (L2_PREFETCH) is done by the work-groups that have
// no attention unit, at the start of P2, when at least 1 / PF_IDLE_DIV of
// the grid is idle there; else by every warp at P1's barrier (decode_token).
#define PF_IDLE_DIV 4

// ---- warp primitives (PTX) --------------------------------------------------

// The cache row of position p in a layer of `ring` rows (N_CTX: every
// position its own row; a sliding-window layer's ring of KV_RING: p %
// KV_RING, a constant modulus: no division routine in the kernel).
INLINE int kv_slot(int p, int ring) { return ring < N_CTX ? p % KV_RING : p; }

INLINE float shfl_bfly(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}
INLINE float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += shfl_bfly(v, m);
  return v;
}
// The warp's lanes meet (and see each other's local-memory writes).
INLINE void warp_sync(void) { asm volatile("bar.warp.sync 0xffffffff;" ::: "memory"); }
INLINE ulong global_timer_ns(void) {
  ulong t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Non-blocking: asks for the 128-byte line at p to be brought into L2.
INLINE void prefetch_l2(const __global void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// ---- where a work-item works --------------------------------------------------

// A work-item's lane and warp, its work-group, and its warp's index in the
// grid (gwarp of n_gwarps), by which every stage deals out its rows.
typedef struct {
  int lid, lane, warp, group, n_groups;
  int slot;  // the warp's place in its work-group's share of rows
  int gwarp, n_gwarps;
} Place;

// Warps are interleaved over the grid: consecutive rows go to different
// work-groups, so a stage with fewer rows than warps busies every SM a
// little instead of some SMs fully (H200: +5% against group-major). Warp 0,
// whose work-item 0 polls the barriers, takes the last slot: rows only where
// a stage has more than (WARPS - 1) * n_groups of them (here only the
// lm_head), so it loads no next-stage rows before its polls, and the fewest
// prefetches (H200 against warp 0 first: tg128 2,458-2,459 vs 2,385-2,390,
// @d512 2,088-2,095 vs 2,046-2,049, @d2048 1,795-1,806 vs 1,723-1,754).
INLINE Place place_of_work_item(void) {
  Place at;
  at.lid = get_local_id(0);
  at.lane = at.lid % 32;
  at.warp = at.lid / 32;
  at.group = get_group_id(0);
  at.n_groups = get_num_groups(0);
  at.slot = (at.warp + WARPS - 1) % WARPS;
  at.gwarp = at.slot * at.n_groups + at.group;
  at.n_gwarps = at.n_groups * WARPS;
  return at;
}

// ---- grid barrier -------------------------------------------------------------

// The barrier's counter and where this launch stands on it.
typedef struct {
  volatile __global uint* count;
  uint base;  // the count at this launch's start (bar_base)
  uint n;     // barriers passed in this launch
  volatile __global uint* abort_flag;
  // Non-null when the host traces the token (a profile; the tuning key
  // `trace`): work-group 0 records the GPU clock after each barrier.
  __global ulong* trace;
} GridBarrier;

// The arrival, the first half: a work-group barrier (ordering only local
// memory: the release below covers the work-group's global writes that
// precede it) and one `red.release.gpu` add by work-item 0: no fence of its
// own and no returned value to wait for (H200 against a fence and
// atomic_inc: 2,096-2,106 tok/s vs 1,948-1,954 with the acquire poll below).
INLINE void grid_arrive(GridBarrier* b) {
  barrier(CLK_LOCAL_MEM_FENCE);
  if (get_local_id(0) == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(b->count) : "memory");
  }
}
// The poll: an acquire load, so the wait needs no fence after it.
INLINE uint grid_poll(volatile __global uint* counter) {
  uint v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
}
// Work-item 0 polls until `target`. It reads the abort flag and the clock
// every 256 spins only: a read of the flag in every spin doubled the spin's
// time, and with it the delay between the last arrival and its detection.
INLINE void grid_spin(volatile __global uint* counter, uint target,
                      volatile __global uint* abort_flag) {
  if (get_local_id(0) == 0) {
    uint spins = 0;
    ulong start = 0;
    while ((int)(grid_poll(counter) - target) < 0) {
      if ((++spins & 255) == 0) {  // the abort flag and the clock now and then
        if (*abort_flag) break;
        const ulong now = global_timer_ns();
        if (start == 0) {
          start = now;
        } else if (now - start > SPIN_NS) {
          *abort_flag = 1;
          break;
        }
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
// The wait, the second half: every work-group has arrived (or one gave up).
INLINE void grid_wait(GridBarrier* b, const Place* at) {
  grid_spin(b->count, b->base + (++b->n) * (uint)at->n_groups, b->abort_flag);
  if (b->trace && at->group == 0 && at->lid == 0) b->trace[b->n] = global_timer_ns();
}
INLINE void grid_sync(GridBarrier* b, const Place* at) {
  grid_arrive(b);
  grid_wait(b, at);
}

// "The last to arrive": a work-group's global writes so far are released
// (work-group barrier, then one atom.acq_rel.gpu add by work-item 0) and the
// work-group that finds the count at `last` acquires everyone's: returns
// true in all of its work-items. Used where a count, not a grid barrier,
// decides who goes on (the attention splits' merge, the final argmax). (H200
// tg128 @d512, where heads split, against fence, atomic_inc, fence:
// 1,843-1,850 tok/s vs 1,815-1,828.) `flag`: local scratch.
INLINE bool arrive_last(volatile __global uint* count, uint last, __local int* flag) {
  barrier(CLK_LOCAL_MEM_FENCE);
  if (get_local_id(0) == 0) {
    uint old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(old)
                 : "l"(count)
                 : "memory");
    *flag = old == last;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return *flag;
}

// ---- weights: one row's dot product -------------------------------------------

// sum_j code_j * x_j and sum_j x_j over one block of 32 (x in local memory);
// byte k of the 16 holds value k (low nibble) and value k + 16 (high nibble).
INLINE float2 nibble_dot_local(uint4 q, const __local float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.0f, xs = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 xl = vload4(i, x);
    const float4 xh = vload4(i + 4, x);
    const uint v = w[i];
    acc += (float)(v & 15) * xl.x + (float)((v >> 8) & 15) * xl.y + (float)((v >> 16) & 15) * xl.z +
           (float)((v >> 24) & 15) * xl.w;
    acc += (float)((v >> 4) & 15) * xh.x + (float)((v >> 12) & 15) * xh.y +
           (float)((v >> 20) & 15) * xh.z + (float)(v >> 28) * xh.w;
    xs += xl.x + xl.y + xl.z + xl.w + xh.x + xh.y + xh.z + xh.w;
  }
  return (float2)(acc, xs);
}

// A code c < 2^23 as a float without a conversion instruction (I2F runs at
// 1/8 of the FMA rate): c under the exponent of 2^23, minus 2^23 (exact).
#define CODE_F(c) (as_float(0x4b000000u | (c)) - 8388608.0f)
// Q5_*: (sum c x, sum x) over one block of 32, c = nibble | (bit j of qh) << 4.
INLINE float2 nibble5_dot(uint4 q, uint qh, const __local float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.0f, xs = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 xl = vload4(i, x);
    const float4 xh = vload4(i + 4, x);
    const uint v = w[i], lb = qh >> (4 * i), hb = qh >> (16 + 4 * i);
    acc += CODE_F((v & 15) | ((lb & 1) << 4)) * xl.x +
           CODE_F(((v >> 8) & 15) | ((lb & 2) << 3)) * xl.y +
           CODE_F(((v >> 16) & 15) | ((lb & 4) << 2)) * xl.z +
           CODE_F(((v >> 24) & 15) | ((lb & 8) << 1)) * xl.w;
    acc += CODE_F(((v >> 4) & 15) | ((hb & 1) << 4)) * xh.x +
           CODE_F(((v >> 12) & 15) | ((hb & 2) << 3)) * xh.y +
           CODE_F(((v >> 20) & 15) | ((hb & 4) << 2)) * xh.z +
           CODE_F((v >> 28) | ((hb & 8) << 1)) * xh.w;
    xs += xl.x + xl.y + xl.z + xl.w + xh.x + xh.y + xh.z + xh.w;
  }
  return (float2)(acc, xs);
}
// Q6_K: (sum c x over values 0-15, over 16-31, sum x over 0-15, over 16-31),
// c = nibble | (bits 2j, 2j + 1 of the half's word) << 4; the halves have
// scales of their own.
INLINE float4 nibble6_dot(uint4 q, uint2 h, const __local float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float4 r = (float4)(0.0f);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 xl = vload4(i, x);
    const float4 xh = vload4(i + 4, x);
    const uint v = w[i], lb = h.x >> (8 * i), hb = h.y >> (8 * i);
    r.x += CODE_F((v & 15) | ((lb & 3) << 4)) * xl.x +
           CODE_F(((v >> 8) & 15) | ((lb & 0xc) << 2)) * xl.y +
           CODE_F(((v >> 16) & 15) | (lb & 0x30)) * xl.z +
           CODE_F(((v >> 24) & 15) | ((lb & 0xc0) >> 2)) * xl.w;
    r.y += CODE_F(((v >> 4) & 15) | ((hb & 3) << 4)) * xh.x +
           CODE_F(((v >> 12) & 15) | ((hb & 0xc) << 2)) * xh.y +
           CODE_F(((v >> 20) & 15) | (hb & 0x30)) * xh.z +
           CODE_F((v >> 28) | ((hb & 0xc0) >> 2)) * xh.w;
    r.z += xl.x + xl.y + xl.z + xl.w;
    r.w += xh.x + xh.y + xh.z + xh.w;
  }
  return r;
}

// Q5_0 (6), Q5_1 (7), Q4_K (12), Q5_K (13), Q6_K (14): block `blk`'s record
// (block_layout.h) as a scale pair s and high-bit words h, and one block's
// dot with x from its nibbles q:
//   Q4_K        s.x sum c x + s.y sum x          s = (d sc, -dmin m)
//   Q5_*        s.x sum c x + s.y sum x (5-bit c)  s = (d, -16 d) / (d, m) / (d sc, -dmin m)
//   Q6_K        per half h: s_h sum (c - 32) x     s = (s0, s1), h = (h0, h1)
INLINE bool ext_type(int type) {
  return type == 6 || type == 7 || type == 12 || type == 13 || type == 14;
}
INLINE void ext_record(int type, const __global uchar* ws, size_t blk, float2* s, uint2* h) {
  const __global uint* u = (const __global uint*)ws;
  const __global float* f = (const __global float*)ws;
  switch (type) {
    case 6: {
      const float d = vload_half(4 * blk, (const __global half*)ws);
      *s = (float2)(d, -16.0f * d);
      *h = (uint2)(u[2 * blk + 1], 0u);
      break;
    }
    case 7:
      *s = vload_half2(2 * blk, (const __global half*)ws);
      *h = (uint2)(u[2 * blk + 1], 0u);
      break;
    case 12:
      *s = vload2(blk, f) * (float2)(1.0f, -1.0f);
      *h = (uint2)(0u);
      break;
    case 13: {
      const float4 r = vload4(blk, f);
      *s = (float2)(r.x, -r.y);
      *h = (uint2)(as_uint(r.z), 0u);
      break;
    }
    default: {  // 14
      const float4 r = vload4(blk, f);
      *s = r.xy;
      *h = as_uint2(r.zw);
      break;
    }
  }
}
// Block blk's record for the types whose rows RowRegs holds: its (scale,
// min) in s (Q4_0's min -8 d; Q8_0's unused) and the ext types' high-bit
// words in h (0 for the others).
INLINE void block_record(int type, const __global uchar* ws, size_t blk, float2* s, uint2* h) {
  if (ext_type(type)) {
    ext_record(type, ws, blk, s, h);
    return;
  }
  *h = (uint2)(0u);
  if (type == 3) {
    *s = vload_half2(blk, (const __global half*)ws);
  } else {
    const float d = vload_half(blk, (const __global half*)ws);
    *s = (float2)(d, -8.0f * d);
  }
}
INLINE float ext_block_dot(int type, uint4 q, float2 s, uint2 h, const __local float* x) {
  if (type == 14) {
    const float4 r = nibble6_dot(q, h, x);
    return s.x * (r.x - 32.0f * r.z) + s.y * (r.y - 32.0f * r.w);
  }
  const float2 r = type == 12 ? nibble_dot_local(q, x) : nibble5_dot(q, h.x, x);
  return s.x * r.x + s.y * r.y;
}

// Q8_0 (the lm_head here): each signed byte s becomes a float without a
// conversion instruction (I2F runs at 1/8 of the FMA rate, and the lm_head's
// 49152 x 576 bytes made it the bound): the byte, offset to s + 128 by
// flipping its top bit, is placed under the exponent of 2^23 by one PRMT,
// and 2^23 + 128 is subtracted (exact). H200 against I2F: lm_head 33.9 ->
// 27.5 us, tg128 1,885 vs 1,855 (Q4_0), 1,883 vs 1,857 (Q4_1).
INLINE float int8_word_dot(uint w, float4 x) {
  w ^= 0x80808080u;
  uint t0, t1, t2, t3;
  const uint hi = 0x4b000000u;
  asm("prmt.b32 %0, %1, %2, 0x7440;" : "=r"(t0) : "r"(w), "r"(hi));
  asm("prmt.b32 %0, %1, %2, 0x7441;" : "=r"(t1) : "r"(w), "r"(hi));
  asm("prmt.b32 %0, %1, %2, 0x7442;" : "=r"(t2) : "r"(w), "r"(hi));
  asm("prmt.b32 %0, %1, %2, 0x7443;" : "=r"(t3) : "r"(w), "r"(hi));
  const float c = 8388736.0f;  // 2^23 + 128
  return (as_float(t0) - c) * x.x + (as_float(t1) - c) * x.y + (as_float(t2) - c) * x.z +
         (as_float(t3) - c) * x.w;
}
INLINE float int8_dot_local(uint4 q, const __local float* x) {
  return int8_word_dot(q.x, vload4(0, x)) + int8_word_dot(q.y, vload4(1, x)) +
         int8_word_dot(q.z, vload4(2, x)) + int8_word_dot(q.w, vload4(3, x));
}
// A Q8_0 block's 32 bytes (lo: values 0-15, hi: 16-31) dotted with x.
INLINE float q8_block_dot(uint4 lo, uint4 hi, const __local float* x) {
  return int8_dot_local(lo, x) + int8_dot_local(hi, x + 16);
}

// ---- 16-bit activations and integer dot products -------------------------------

// A stage whose matrices are all of these types (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K: codes of at most 8 bits) takes its input as 16-bit
// integers (XI): each block of 32 values as q = round(x * 32767 / max|x|),
// its scale d = max|x| / 32767 and s = d * sum(q) (the rule of cpu_dot.cl's
// x16_quantize), XI_W words a block in local memory: 16 of q pairs, d, s,
// d * sum(q) over the first 16 values (Q6_K's halves), and a word of padding
// (the eight lanes of a 16-byte access phase then hit distinct banks). The
// codes' dot products are dp2a instructions (two 16-bit x against two
// bytes, accumulated in 32 bits) instead of a conversion and an FMA a value:
// at the Llama 3.2 1B shape the conversions (16 a clock per SM) were the
// bound, not the weights' bytes (H100, tg128 1,581-1,605 against
// 1,016-1,021 with float x; SmolLM2-360M 2,008-2,010 against 1,631-1,632,
// SmolLM2-135M 2,602-2,603 against 2,341-2,344).
#define XI_TYPE(t) \
  ((t) == 2 || (t) == 3 || (t) == 6 || (t) == 7 || (t) == 8 || ((t) >= 12 && (t) <= 14))
#define XI_W 20
#define XI_ROLE(role) (XI_TYPE(WT_##role) && XI_TYPE(WT_##role##_ALT))
#define XI_QKV (XI_ROLE(Q) && XI_ROLE(K) && XI_ROLE(V))
#define XI_WO XI_ROLE(WO)
#define XI_FFN XI_ROLE(FFN)
#define XI_DOWN XI_ROLE(DOWN)
#define XI_HEAD XI_TYPE(WT_HEAD)

// c + x.lo16 * b.byte0 + x.hi16 * b.byte1 (lo) or bytes 2, 3 (hi); bytes
// unsigned (u) or signed (s).
#define DP2A(name, mode, btype)                                                            \
  INLINE int name(uint x, uint b, int c) {                                                 \
    int d;                                                                                 \
    asm("dp2a." mode ".s32." btype " %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(b), "r"(c)); \
    return d;                                                                              \
  }
DP2A(dp2a_lo_u, "lo", "u32")
DP2A(dp2a_hi_u, "hi", "u32")
DP2A(dp2a_lo_s, "lo", "s32")
DP2A(dp2a_hi_s, "hi", "s32")
// sum_j c_j * q_j over a Q8_0 block's signed bytes (lo: values 0-15, hi:
// 16-31).
INLINE int int8_dot_xi(uint4 lo, uint4 hi, const __local uint* xw) {
  const uint4 x0 = vload4(0, xw), x1 = vload4(1, xw), x2 = vload4(2, xw), x3 = vload4(3, xw);
  int acc = 0;
  acc = dp2a_hi_s(x0.y, lo.x, dp2a_lo_s(x0.x, lo.x, acc));
  acc = dp2a_hi_s(x0.w, lo.y, dp2a_lo_s(x0.z, lo.y, acc));
  acc = dp2a_hi_s(x1.y, lo.z, dp2a_lo_s(x1.x, lo.z, acc));
  acc = dp2a_hi_s(x1.w, lo.w, dp2a_lo_s(x1.z, lo.w, acc));
  acc = dp2a_hi_s(x2.y, hi.x, dp2a_lo_s(x2.x, hi.x, acc));
  acc = dp2a_hi_s(x2.w, hi.y, dp2a_lo_s(x2.z, hi.y, acc));
  acc = dp2a_hi_s(x3.y, hi.z, dp2a_lo_s(x3.x, hi.z, acc));
  acc = dp2a_hi_s(x3.w, hi.w, dp2a_lo_s(x3.z, hi.w, acc));
  return acc;
}
// Bits 0-3 of b to bit 0 of bytes 0-3 (the shifted copies do not overlap).
INLINE uint spread_bits4(uint b) { return (b * 0x00204081u) & 0x01010101u; }
// Bytes of a and b picked by a PRMT selector.
#define PRMT(name, sel)                                                         \
  INLINE uint name(uint a, uint b) {                                            \
    uint d;                                                                     \
    asm("prmt.b32 %0, %1, %2, " #sel ";" : "=r"(d) : "r"(a), "r"(b));            \
    return d;                                                                   \
  }
PRMT(prmt_lo_pairs, 0x5140)  // a.b0, b.b0, a.b1, b.b1
PRMT(prmt_hi_pairs, 0x7362)  // a.b2, b.b2, a.b3, b.b3
PRMT(prmt_lo_halves, 0x5410)  // a.b0, a.b1, b.b0, b.b1
PRMT(prmt_hi_halves, 0x7632)  // a.b2, a.b3, b.b2, b.b3
// Q6_K's top two bits of 16 values (value j at bits 2j, 2j + 1 of h) at
// bits 4-5 of byte m of t[i] for value 4i + m: u[m] holds value 4k + m in
// byte k (a shift and a mask each), and the 4 x 4 byte transpose of the u[m]
// is 8 PRMTs. (Was: each byte of h spread by shifts and masks, ~11
// instructions per word of 4 values against ~5 now.)
INLINE void q6_top_bytes(uint h, uint t[4]) {
  const uint u0 = (h << 4) & 0x30303030u, u1 = (h << 2) & 0x30303030u;
  const uint u2 = h & 0x30303030u, u3 = (h >> 2) & 0x30303030u;
  const uint l01 = prmt_lo_pairs(u0, u1), l23 = prmt_lo_pairs(u2, u3);
  const uint h01 = prmt_hi_pairs(u0, u1), h23 = prmt_hi_pairs(u2, u3);
  t[0] = prmt_lo_halves(l01, l23);
  t[1] = prmt_hi_halves(l01, l23);
  t[2] = prmt_lo_halves(h01, h23);
  t[3] = prmt_hi_halves(h01, h23);
}
// sum_j c_j * q_j over a block of nibbles (byte k: value k low, k + 16 high)
// against its 16-bit x (xw: the block's XI_W words), c = nibble | (bit j of
// qh) << 4 (Q5_*; qh 0: the nibbles alone).
INLINE int nibble5_dot_xi(uint4 q, uint qh, const __local uint* xw) {
  const uint4 x0 = vload4(0, xw), x1 = vload4(1, xw), x2 = vload4(2, xw), x3 = vload4(3, xw);
  const uint w[4] = {q.x, q.y, q.z, q.w};
  const uint xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const uint xb[8] = {x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
  int acc = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint lo = (w[i] & 0x0f0f0f0fu) | spread_bits4((qh >> (4 * i)) & 15u) << 4;
    const uint hi = ((w[i] >> 4) & 0x0f0f0f0fu) | spread_bits4((qh >> (16 + 4 * i)) & 15u) << 4;
    acc = dp2a_lo_u(xa[2 * i], lo, acc);
    acc = dp2a_hi_u(xa[2 * i + 1], lo, acc);
    acc = dp2a_lo_u(xb[2 * i], hi, acc);
    acc = dp2a_hi_u(xb[2 * i + 1], hi, acc);
  }
  return acc;
}
// Q6_K: (sum c q over values 0-15, over 16-31), c = nibble | (bits 2j, 2j + 1
// of the half's word) << 4 (the codes before the offset 32).
INLINE int2 nibble6_dot_xi(uint4 q, uint2 h, const __local uint* xw) {
  const uint4 x0 = vload4(0, xw), x1 = vload4(1, xw), x2 = vload4(2, xw), x3 = vload4(3, xw);
  const uint w[4] = {q.x, q.y, q.z, q.w};
  const uint xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const uint xb[8] = {x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
  uint tl[4], th[4];
  q6_top_bytes(h.x, tl);
  q6_top_bytes(h.y, th);
  int2 acc = (int2)(0);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint lo = (w[i] & 0x0f0f0f0fu) | tl[i];
    const uint hi = ((w[i] >> 4) & 0x0f0f0f0fu) | th[i];
    acc.x = dp2a_lo_u(xa[2 * i], lo, acc.x);
    acc.x = dp2a_hi_u(xa[2 * i + 1], lo, acc.x);
    acc.y = dp2a_lo_u(xb[2 * i], hi, acc.y);
    acc.y = dp2a_hi_u(xb[2 * i + 1], hi, acc.y);
  }
  return acc;
}
// A block's d, s and s over its first 16 values (Q6_K's halves).
INLINE float4 xi_scales(const __local uint* xw) {
  return vload4(0, (const __local float*)(xw + 16));
}
// One block of a type with a record (ext_record: s, h) or Q4_0 / Q4_1 (s =
// (d, m)) against its 16-bit x at xw: s.x d sum(c q) + s.y s for all but
// Q6_K, whose halves have scales of their own and codes offset by 32.
INLINE float xi_block_dot(int type, uint4 q, float2 s, uint2 h, const __local uint* xw) {
  const float4 xs = xi_scales(xw);
  if (type == 14) {
    const int2 c = nibble6_dot_xi(q, h, xw);
    return xs.x * (s.x * (float)c.x + s.y * (float)c.y) -
           32.0f * (s.x * xs.z + s.y * (xs.y - xs.z));
  }
  const uint qh = type == 6 || type == 7 || type == 13 ? h.x : 0u;  // the Q5 types' fifth bits
  return s.x * xs.x * (float)nibble5_dot_xi(q, qh, xw) + s.y * xs.y;
}

// This lane's share of dot(W[row], x) for a row of n_in values; `wq`/`ws`
// point at the matrix's payloads and scales in the arena.
INLINE float row_dot_f32(const __global uchar* wq, int n_in, int row, const __local float* x,
                         int lane) {
  const __global float* w = (const __global float*)wq + (size_t)row * n_in;
  float s = 0.0f;
  for (int i = lane; i < n_in / 4; i += 32) s += dot(vload4(i, w), vload4(0, x + XP(4 * i)));
  return s;
}
INLINE float row_dot_f16(const __global uchar* wq, int n_in, int row, const __local float* x,
                         int lane) {
  const __global half* w = (const __global half*)wq + (size_t)row * n_in;
  float s = 0.0f;
  for (int i = lane; i < n_in / 4; i += 32) s += dot(vload_half4(i, w), vload4(0, x + XP(4 * i)));
  return s;
}
INLINE float row_dot_q4_0(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                          const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    const float2 r = nibble_dot_local(((const __global uint4*)wq)[base + b], x + b * XS);
    s += vload_half(base + b, (const __global half*)ws) * (r.x - 8.0f * r.y);
  }
  return s;
}
INLINE float row_dot_q4_1(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                          const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    const float2 r = nibble_dot_local(((const __global uint4*)wq)[base + b], x + b * XS);
    const float2 dm = vload_half2(base + b, (const __global half*)ws);
    s += dm.x * r.x + dm.y * r.y;
  }
  return s;
}
INLINE float row_dot_q8_0(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                          const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  const __global uint4* q = (const __global uint4*)wq;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    const float d = vload_half(base + b, (const __global half*)ws);
    s += d * q8_block_dot(q[2 * (base + b)], q[2 * (base + b) + 1], x + b * XS);
  }
  return s;
}
INLINE float row_dot_bf16(const __global uchar* wq, int n_in, int row, const __local float* x,
                          int lane) {
  const __global ushort* w = (const __global ushort*)wq + (size_t)row * n_in;
  float s = 0.0f;
  for (int i = lane; i < n_in / 4; i += 32) {
    const float4 v = as_float4(convert_uint4(vload4(i, w)) << 16);
    s += dot(v, vload4(0, x + XP(4 * i)));
  }
  return s;
}
INLINE float row_dot_ext(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                         int row, const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    float2 sc;
    uint2 h;
    ext_record(type, ws, base + b, &sc, &h);
    s += ext_block_dot(type, ((const __global uint4*)wq)[base + b], sc, h, x + b * XS);
  }
  return s;
}
// A row of an XI_TYPE against 16-bit x (XI).
INLINE float row_dot_xi(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                        int row, const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  const __global uint4* q = (const __global uint4*)wq;
  const __local uint* xw = (const __local uint*)x;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    float2 sc;
    uint2 h;
    block_record(type, ws, base + b, &sc, &h);
    if (type == 8) {
      s += sc.x * xi_scales(xw + b * XI_W).x *
           (float)int8_dot_xi(q[2 * (base + b)], q[2 * (base + b) + 1], xw + b * XI_W);
    } else {
      s += xi_block_dot(type, q[base + b], sc, h, xw + b * XI_W);
    }
  }
  return s;
}
// The types of kernels/quant_blocks.cl without a loop of their own here.
INLINE float row_dot_blocks(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                            int row, const __local float* x, int lane) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
  float s = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    float4 acc = (float4)(0.0f);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const float8 w = block_values8(type, wq, ws, base + b, p);
      acc += w.lo * vload4(2 * p, x + b * XS) + w.hi * vload4(2 * p + 1, x + b * XS);
    }
    s += acc.x + acc.y + acc.z + acc.w;
  }
  return s;
}
// The same for a matrix of GGML type `type`: always a WT_* constant, so once
// inlined only one case is left.
INLINE float row_dot(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                     int row, const __local float* x, int lane, bool xi) {
  if (xi) return row_dot_xi(type, wq, ws, n_in, row, x, lane);
  switch (type) {
    case 0:
      return row_dot_f32(wq, n_in, row, x, lane);
    case 1:
      return row_dot_f16(wq, n_in, row, x, lane);
    case 2:
      return row_dot_q4_0(wq, ws, n_in, row, x, lane);
    case 3:
      return row_dot_q4_1(wq, ws, n_in, row, x, lane);
    case 8:
      return row_dot_q8_0(wq, ws, n_in, row, x, lane);
    case 30:
      return row_dot_bf16(wq, n_in, row, x, lane);
    case 6:
    case 7:
    case 12:
    case 13:
    case 14:
      return row_dot_ext(type, wq, ws, n_in, row, x, lane);
    default:
      return row_dot_blocks(type, wq, ws, n_in, row, x, lane);
  }
}

// ---- a row's weights in registers -----------------------------------------------

// Every stage gives a warp at most a row or two of each matrix, so the warp's
// first row(s) of the next stage are loaded into registers between its
// work-group's arrival at the barrier and its wait there; after the barrier
// only the activations are waited for. Lane `lane` holds blocks lane,
// lane + 32, ... of the row: at most RB blocks (Q8_0 blocks take two uint4)
// and each block's scale record. Where the longest row (RB) has more than
// two blocks a lane (WORD_SCALES), Q4_0, Q4_1 and Q8_0 keep their scale
// bits as loaded, one word a block (sw: Q4_1's half2 (scale, min), the
// others' half), turned into floats by the dot; else, and for the types of
// ext_record, float scales (s) and the ext types' high-bit words (h). Types
// read by block_values8 and F32 / F16 / BF16 rows are not held (their dot
// reads the row). Where RB > 2 (Q6_LATE_H), a Q6_K row holds only its codes:
// its dot reads each block's record, scales and top-bit words, after the
// wait (held_record).
//
// Registers held across a barrier are what NVIDIA's compiler spills when the
// kernel's 128 a work-item run out, and a value converted when its load
// returns stalls the warp there. H200, Llama-3.2-1B shape, `clchat bench -m
// FILE -p 0 -n 128 -r 3 --device gpu`, two rounds alternating with the
// version that held two floats a block and Q6_K's scales (2026-11-30):
// Q4_0 2,108 / 2,110 against 2,005 / 2,010 (spills 0 against 108 / 132
// bytes), Q4_K (held as Q4_1) 2,087 / 2,088 against 1,970 / 1,970, Q4_K_M
// mix 1,841 / 1,838 against 1,730 / 1,724 (spills 68 / 140 against 240 /
// 236); SmolLM2-1.7B shape Q4_K_M 1,287 / 1,284 against 1,181 / 1,177;
// SmolLM2-360M Q4_0 2,131 / 2,125 against 2,090 / 2,091. Per token in
// the 1B mix's trace, each part alone: words 538 us, whole Q6_K records
// late 551, both 519, neither 554. Where rows have two blocks a lane or
// fewer, words against floats: Gemma 3 270M Q4_K_M 2,390 / 2,397 / 2,387
// against 2,417 / 2,415 / 2,415, SmolLM2-135M Q4_K_M 2,543 / 2,538 / 2,533
// against 2,543 / 2,538 / 2,529 (so floats there).
//
// Before that, where Q6_LATE_H was chosen: held, Q6_K's top-bit words cost
// 16 registers a down row at 1B and NVIDIA's compiler spilled in every stage
// (H200, 1B Q4_K_M mix: spills 484 / 384 bytes against 292 / 272, gate/up
// 165 against 153 us a token, tg128 1,620 / 1,622 against 1,669 / 1,668).
// Short rows spill nothing either way, and the later read only adds its
// latency. tg128 of the Q4_K_M mixes, held against read late: SmolLM2-135M
// (RB 2) 2,537 / 2,534 against 2,511 / 2,505, Gemma 3 270M (2) 2,412 /
// 2,413 against 2,386 / 2,390, SmolLM2-360M (3) 1,897 / 1,879 against 1,881
// / 1,897, Qwen2.5-0.5B (5) 1,780 / 1,780 against 1,861 / 1,869.
#define RB ((LOCAL_X / 32 + 31) / 32)
#ifndef Q6_LATE_H
#define Q6_LATE_H (RB > 2)
#endif
#ifndef WORD_SCALES
#define WORD_SCALES (RB > 2)
#endif
typedef struct {
  uint4 q[2 * RB];
  uint sw[RB];
  float2 s[RB];
  uint2 h[RB];
} RowRegs;

// The types whose held scales are one word a block (sw), where rows have
// more than two blocks a lane (WORD_SCALES).
INLINE bool word_scaled(int type) { return WORD_SCALES && (type == 2 || type == 3 || type == 8); }
// Block blk's scale bits as loaded: Q4_1 (scale, min) as half2, Q4_0 and
// Q8_0 the scale's half in the low 16 bits.
INLINE uint scale_word(int type, const __global uchar* ws, size_t blk) {
  return type == 3 ? ((const __global uint*)ws)[blk] : (uint)((const __global ushort*)ws)[blk];
}
// (scale, min) from scale_word's bits (Q4_0's min -8 scale, Q8_0's 0).
INLINE float2 word_scales(int type, uint w) {
  float2 f;
  asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
      : "=f"(f.x), "=f"(f.y)
      : "r"(w));
  return type == 3 ? f : (float2)(f.x, type == 2 ? -8.0f * f.x : 0.0f);
}

// The (scale, min) of a block held in r at index k (not a Q6_K one where
// Q6_LATE_H).
INLINE float2 held_scales(int type, int k, const RowRegs* r) {
  return word_scaled(type) ? word_scales(type, r->sw[k]) : r->s[k];
}
// Block b of a row held in r (k: its index there): its (scale, min) and
// high-bit words, from r or (Q6_K where Q6_LATE_H) from the record, read
// now; `base`: the row's first block (used only by that read).
INLINE void held_record(int type, const __global uchar* ws, size_t base, int k, int b,
                        const RowRegs* r, float2* s, uint2* h) {
  if (type == 14 && Q6_LATE_H) {
    ext_record(14, ws, base + b, s, h);
  } else {
    *s = held_scales(type, k, r);
    *h = word_scaled(type) ? (uint2)(0u) : r->h[k];
  }
}
// Blocks of 16 * `chunks` bytes (Q4_0 2, Q4_1 3 and the ext types: 1; Q8_0 8: 2).
INLINE void row_load_blocks(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                            int lane, RowRegs* r, int chunks, int type) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < nb) {
#pragma unroll
      for (int c = 0; c < chunks; ++c) {
        r->q[chunks * k + c] = ((const __global uint4*)wq)[chunks * (base + b) + c];
      }
      if (type == 14 && Q6_LATE_H) {
        // held_record reads the record
      } else if (word_scaled(type)) {
        r->sw[k] = scale_word(type, ws, base + b);
      } else {
        block_record(type, ws, base + b, &r->s[k], &r->h[k]);
      }
    }
  }
}
// Row `row` of a matrix of type `type` into r (F32, F16: nothing).
INLINE void row_load(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                     int row, int lane, RowRegs* r) {
  if (type == 2 || type == 3 || ext_type(type))
    row_load_blocks(wq, ws, n_in, row, lane, r, 1, type);
  if (type == 8) row_load_blocks(wq, ws, n_in, row, lane, r, 2, type);
}
// Q4_0 (2), Q4_1 (3): d * sum(code * x) + m * sum(x) (Q4_0's m is -8 d).
INLINE float row_dot_regs_nibbles(int type, int n_in, const __local float* x, int lane,
                                   const RowRegs* r) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      const float2 d = nibble_dot_local(r->q[k], x + b * XS);
      const float2 sc = held_scales(type, k, r);
      acc += sc.x * d.x + sc.y * d.y;
    }
  }
  return acc;
}
// Q8_0 (8): int8.
INLINE float row_dot_regs_q8_0(int n_in, const __local float* x, int lane, const RowRegs* r) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      acc += held_scales(8, k, r).x * q8_block_dot(r->q[2 * k], r->q[2 * k + 1], x + b * XS);
    }
  }
  return acc;
}
// A row of an XI_TYPE in registers against 16-bit x (XI).
INLINE float row_dot_regs_xi(int type, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const RowRegs* r) {
  const __local uint* xw = (const __local uint*)x;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      if (type == 8) {
        acc += held_scales(8, k, r).x * xi_scales(xw + b * XI_W).x *
               (float)int8_dot_xi(r->q[2 * k], r->q[2 * k + 1], xw + b * XI_W);
      } else {
        float2 sc;
        uint2 h;
        held_record(type, ws, (size_t)row * (n_in / 32), k, b, r, &sc, &h);
        acc += xi_block_dot(type, r->q[k], sc, h, xw + b * XI_W);
      }
    }
  }
  return acc;
}
INLINE float row_dot_regs_ext(int type, const __global uchar* ws, int n_in, int row,
                              const __local float* x, int lane, const RowRegs* r) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      float2 sc;
      uint2 h;
      held_record(type, ws, (size_t)row * (n_in / 32), k, b, r, &sc, &h);
      acc += ext_block_dot(type, r->q[k], sc, h, x + b * XS);
    }
  }
  return acc;
}
// This lane's share of dot(W[row], x) with the row in r (row_load).
INLINE float row_dot_regs(int type, const __global uchar* wq, const __global uchar* ws, int n_in,
                          int row, const __local float* x, int lane, const RowRegs* r, bool xi) {
  if (xi) return row_dot_regs_xi(type, ws, n_in, row, x, lane, r);
  switch (type) {
    case 2:
    case 3:
      return row_dot_regs_nibbles(type, n_in, x, lane, r);
    case 8:
      return row_dot_regs_q8_0(n_in, x, lane, r);
    case 6:
    case 7:
    case 12:
    case 13:
    case 14:
      return row_dot_regs_ext(type, ws, n_in, row, x, lane, r);
    default:  // F32, F16, BF16 and block_values8's types: read from the arena
      return row_dot(type, wq, ws, n_in, row, x, lane, false);
  }
}

// row_load and row_dot_regs for a role's matrix in a layer that uses the
// role's ALT type (type_alt) where `alt`; type == type_alt makes `alt` a
// constant false at every call (USES_ALT), and only `type`'s code is left.
INLINE void row_load_alt(int type, int type_alt, bool alt, const __global uchar* wq,
                         const __global uchar* ws, int n_in, int row, int lane, RowRegs* r) {
  if (alt) {
    row_load(type_alt, wq, ws, n_in, row, lane, r);
  } else {
    row_load(type, wq, ws, n_in, row, lane, r);
  }
}
INLINE float row_dot_regs_alt(int type, int type_alt, bool alt, const __global uchar* wq,
                              const __global uchar* ws, int n_in, int row, const __local float* x,
                              int lane, const RowRegs* r, bool xi) {
  return alt ? row_dot_regs(type_alt, wq, ws, n_in, row, x, lane, r, xi)
             : row_dot_regs(type, wq, ws, n_in, row, x, lane, r, xi);
}

// ---- weights into L2 ----------------------------------------------------------

// Bytes of one row's payloads and scales in the repacked layout.
INLINE size_t row_q_bytes(int type, int n) {
  return type == 0 ? n * 4 : type == 1 || type == 30 ? n * 2 : n / 32 * QT_QB(type);
}
INLINE size_t row_s_bytes(int type, int n) {
  return type == 0 || type == 1 || type == 30 ? 0 : n / 32 * QT_SB(type);
}

// The lanes of a warp prefetch row `row` of a matrix into L2.
INLINE void prefetch_row(const __global uchar* wq, const __global uchar* ws, size_t q_bytes,
                         size_t s_bytes, int row, int lane) {
  for (size_t o = (size_t)lane * 128; o < q_bytes; o += 32 * 128) {
    prefetch_l2(wq + (size_t)row * q_bytes + o);
  }
  if (s_bytes && lane == 31) prefetch_l2(ws + (size_t)row * s_bytes);
}
// Rows first, first + stride, ... of a matrix (n_rows x n_in, type `type`)
// whose payloads and scales are at arena + *q_off, arena + *s_off (read in
// the loop: a warp without rows here reads nothing).
INLINE void prefetch_rows(int type, const __global uchar* arena, const __global ulong* q_off,
                          const __global ulong* s_off, int n_in, int n_rows, int first, int stride,
                          int lane) {
  for (int r = first; r < n_rows; r += stride) {
    prefetch_row(arena + *q_off, arena + *s_off, row_q_bytes(type, n_in), row_s_bytes(type, n_in),
                 r, lane);
  }
}

// ---- the token's buffers --------------------------------------------------------

// What the token reads and never writes (llama2.c's TransformerWeights).
typedef struct {
  const __global uchar* arena;         // every weight, at the byte offsets below
  const __global ulong* layer_off;     // (N_LAYER, LO_N) offsets of each layer's weights
  ulong embd_q, embd_s;                // token_embd (N_VOCAB, N_EMBD), type WT_EMBD
  ulong head_q, head_s;                // lm_head (N_VOCAB, N_EMBD), type WT_HEAD
  ulong out_norm;                      // (N_EMBD) float
  const __global float2* rope_cs;      // (n_ctx, N_ROT / 2) cos, sin
  const __global float2* rope_cs_swa;  // the same for LAYER_SWA layers (WINDOW)
} Weights;

// What the token writes (llama2.c's RunState): every work-group reads what
// the others wrote before the last grid barrier.
typedef struct {
  __global float* x;                  // (N_EMBD) the residual stream
  __global float* q;                  // (N_EMBD_Q) this position's queries
  __global float* k_cache;            // rows of N_EMBD_KV, layer by layer (KV_RING)
  __global float* v_cache;            // the same for V
  __global float* att;                // (N_EMBD_Q) attention output, heads side by side
  __global float* h;                  // (N_FF) silu(gate) * up
  __global float* logits;             // (N_VOCAB)
  __global float* part_val;           // (n_groups) each work-group's best logit
  __global int* part_idx;             // (n_groups) and its id
  __global float* att_part;           // (N_HEAD, ATT_SPLIT_MAX, ATT_PART) split partials
  volatile __global uint* att_count;  // (N_HEAD) splits done per head
  __global float* o;                  // (N_EMBD) POST_NORMS: Wo att, then Wd h
} State;

// The work-group's local memory (declared in decode_token: OpenCL C allows
// __local variables only at kernel scope).
typedef struct {
  __local float* xl;       // (LOCAL_XP) a stage's input, padded (XP) or 16-bit (XI)
  __local float* red;      // (WARPS) stage_norm's partial sums
  __local float* att_acc;  // (WARPS, AW_STRIDE) the attention warps' sums of V
  __local float* aw_m;     // (WARPS) their max
  __local float* aw_l;     // (WARPS) and sum
  __local float* red_v;    // (WARPS) workgroup_argmax's values
  __local int* red_i;      // (WARPS) and ids
  __local float* sp_m;     // (ATT_SPLIT_MAX) the split merge's max
  __local float* sp_l;     // (ATT_SPLIT_MAX) and sum
  __local int* flag;       // arrive_last's answer
  __local float* xr;       // (N_EMBD) POST_NORMS: this work-group's copy of x
  __local float* qn;       // (HEAD_DIM) QK_NORM: the attention unit's q head, normed
} Local;

// ---- work-group helpers -------------------------------------------------------

// Values 4i .. 4i + 3 (v; act: i is in the vector) into the 16-bit layout
// (XI) at xl. The block's 8 work-items (consecutive lanes) find its scale
// by shuffles, so every lane of the warp calls this.
INLINE void xi_store4(__local float* xl, int i, float4 v, bool act) {
  if (!act) v = (float4)(0.0f);
  const uint4 a = as_uint4(fabs(v));
  uint m = max(max(a.x, a.y), max(a.z, a.w));  // |values| compare as their bits
  m = max(m, as_uint(shfl_bfly(as_float(m), 1)));
  m = max(m, as_uint(shfl_bfly(as_float(m), 2)));
  m = max(m, as_uint(shfl_bfly(as_float(m), 4)));
  // An inf or NaN in the block (bits >= 0x7f800000) makes d and s NaN, as the
  // float loop would spread it; blocks below 2^-110 become zeros.
  const bool finite = m < 0x7f800000u;
  const float amax = as_float(m);
  const float id = finite && amax >= 0x1p-110f ? 32767.0f / amax : 0.0f;
  const int4 c = convert_int4_rte(v * id);
  int sum = (c.x + c.y) + (c.z + c.w);
  sum += as_int(shfl_bfly(as_float(sum), 1));
  sum += as_int(shfl_bfly(as_float(sum), 2));
  const int half_sum = sum;  // values 0-15 in the block's first four work-items
  sum += as_int(shfl_bfly(as_float(sum), 4));
  if (act) {
    __local uint* w = (__local uint*)xl + (i / 8) * XI_W;
    vstore2((uint2)(((uint)c.x & 0xffffu) | ((uint)c.y << 16),
                    ((uint)c.z & 0xffffu) | ((uint)c.w << 16)),
            i % 8, w);
    if (i % 8 == 0) {
      const float d = finite ? amax / 32767.0f : as_float(0x7fc00000u);
      vstore4((float4)(d, d * (float)sum, d * (float)half_sum, 0.0f), 0, (__local float*)(w + 16));
    }
  }
}

// xl[i] = src[i] for i < n into the padded layout (XP), or (xi) the 16-bit
// layout (XI); volatile: written by other work-groups. 16-byte loads: one or
// two per work-item instead of 3-6 scalar ones in a row (n % 4 == 0; groups
// of 4 never straddle a padded block).
INLINE void stage_padded(__local float* xl, volatile const __global float* src, int n, bool xi) {
  if (xi) {
    for (int base = 0; base < n / 4; base += PWG) {
      const int i = base + get_local_id(0);
      const bool act = i < n / 4;
      xi_store4(xl, i, act ? ((volatile const __global float4*)src)[i] : (float4)(0.0f), act);
    }
  } else {
    for (int i = get_local_id(0); i < n / 4; i += PWG) {
      vstore4(((volatile const __global float4*)src)[i], 0, xl + XP(4 * i));
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// The norm weights a work-item applies in stage_norm: float4 number
// lid + k * PWG of g for k < NORM_MAX. Loaded before the barrier wait that
// precedes the norm, they are off its critical path (H200, Q4_0 tg128
// against loading them after the wait: 1,964-1,970 tok/s vs 1,881-1,887; P1
// 121 -> 107 us and P4 112 -> 100 us per token).
#define NORM_MAX ((N_EMBD / 4 + PWG - 1) / PWG)
INLINE void load_norm(float4* gw, const __global float* g) {
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = get_local_id(0) + k * PWG;
    if (i < N_EMBD / 4) gw[k] = vload4(i, g);
  }
}

// 1 / rms over N_EMBD values from each work-item's sum of squares ss (red:
// WARPS floats; every work-item gets the result).
INLINE float group_rms_scale(float ss, __local float* red) {
  ss = warp_sum(ss);
  if (get_local_id(0) % 32 == 0) red[get_local_id(0) / 32] = ss;
  barrier(CLK_LOCAL_MEM_FENCE);
  float total = 0.0f;
  for (int w = 0; w < WARPS; ++w) total += red[w];
  return rsqrt(total / N_EMBD + RMS_EPS);
}

// RMSNorm folded into the staging: xl = src * g over N_EMBD values (padded
// layout; src null: xl in place; g from load_norm) and the return value is
// 1 / rms(src), which the caller applies to each row's dot product
// (dot(W, x * g) * scale), so one local barrier suffices.
// xi: the 16-bit layout (XI) instead, from registers (with src null, after
// the whole work-group has read xl).
INLINE float stage_norm(__local float* xl, volatile const __global float* src, const float4* gw,
                        __local float* red, bool xi) {
  const int lid = get_local_id(0);
  float ss = 0.0f;
  float4 v[NORM_MAX];
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = lid + k * PWG;
    v[k] = (float4)(0.0f);
    if (i < N_EMBD / 4) {
      v[k] = src ? ((volatile const __global float4*)src)[i] : vload4(0, xl + XP(4 * i));
      ss += dot(v[k], v[k]);
      if (!xi) vstore4(v[k] * gw[k], 0, xl + XP(4 * i));
    }
  }
  if (xi) {
    if (!src) barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int k = 0; k < NORM_MAX; ++k) {
      const int i = lid + k * PWG;
      const bool act = i < N_EMBD / 4;  // gw[k] is set for these only
      xi_store4(xl, i, act ? v[k] * gw[k] : (float4)(0.0f), act);
    }
  }
  return group_rms_scale(ss, red);
}

#if POST_NORMS
// xr += o * post / rms(o) over N_EMBD values (o written by the other
// work-groups; post: a post-norm's weights).
INLINE void add_post_norm(__local float* xr, volatile const __global float* o,
                          const __global float* post, __local float* red) {
  const int lid = get_local_id(0);
  float4 ov[NORM_MAX];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = lid + k * PWG;
    if (i < N_EMBD / 4) {
      ov[k] = ((volatile const __global float4*)o)[i];
      ss += dot(ov[k], ov[k]);
    }
  }
  const float rs = group_rms_scale(ss, red);
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = lid + k * PWG;
    if (i < N_EMBD / 4) vstore4(vload4(i, xr) + ov[k] * rs * vload4(i, post), i, xr);
  }
  barrier(CLK_LOCAL_MEM_FENCE);  // red is reused, xr read whole
}
// stage_norm from the work-group's x (xr, unpadded).
INLINE float stage_norm_xr(__local float* xl, const __local float* xr, const float4* gw,
                           __local float* red, bool xi) {
  const int lid = get_local_id(0);
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = lid + k * PWG;
    const bool act = i < N_EMBD / 4;
    const float4 v = act ? vload4(i, xr) : (float4)(0.0f);
    ss += dot(v, v);
    if (xi) {
      xi_store4(xl, i, act ? v * gw[k] : (float4)(0.0f), act);  // gw[k]: set where act
    } else if (act) {
      vstore4(v * gw[k], 0, xl + XP(4 * i));
    }
  }
  return group_rms_scale(ss, red);
}
// The input of a normed stage: x plus the post-normed output of the stage
// before (post: its weights; null at the first layer, where xr is the
// embedding), normed with gw.
INLINE float stage_post_norm(const Local* lm, volatile const __global float* o,
                             const __global float* post, const float4* gw, bool xi) {
  if (post) add_post_norm(lm->xr, o, post, lm->red);
  return stage_norm_xr(lm->xl, lm->xr, gw, lm->red, xi);
}
#endif

// The work-group's best (value, id) from each work-item's candidate: by
// shuffles within each warp, then over the warps; returned to work-item 0
// (its value in red_v[0]). Order-free: beats() breaks ties by the lower id.
INLINE int workgroup_argmax(float best, int best_i, __local float* red_v, __local int* red_i) {
  const int lid = get_local_id(0);
  for (int m = 16; m > 0; m >>= 1) {
    const float v = shfl_bfly(best, m);
    const int i = as_int(shfl_bfly(as_float(best_i), m));
    if (beats(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  if (lid % 32 == 0) {
    red_v[lid / 32] = best;
    red_i[lid / 32] = best_i;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    for (int w = 1; w < WARPS; ++w) {
      if (beats(red_v[w], red_i[w], best, best_i)) {
        best = red_v[w];
        best_i = red_i[w];
      }
    }
    red_v[0] = best;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return best_i;
}

// ---- start-up self-test ---------------------------------------------------------

// token_index < 0: the barrier alone, `rounds` times, run by this kernel
// itself so that residency is judged with its own registers and local
// memory. Before each barrier work-group g writes a word of part_idx (2 x
// n_groups of them), after it checks a neighbour's; mismatches are counted
// in ids[0].
INLINE void grid_self_test(int rounds, __global int* part_idx, __global int* ids, GridBarrier* bar,
                           const Place* at) {
  for (int r = 0; r < rounds; ++r) {
    volatile __global int* data = (volatile __global int*)part_idx + (r & 1) * at->n_groups;
    if (at->lid == 0) data[at->group] = r * at->n_groups + at->group;
    grid_sync(bar, at);
    const int other = (at->group + 1 + r) % at->n_groups;
    if (at->lid == 0 && data[other] != r * at->n_groups + other) atomic_inc(ids);
  }
}

// ---- embedding and P1: norm, Q/K/V, RoPE, KV append -----------------------------

// x = row `token` of the embedding: into local memory (padded) by every
// work-group, and into x by work-group 0.
INLINE void embed(const Weights* w, __global float* x, const Local* lm, int token,
                  const Place* at) {
  for (int i = at->lid; i < N_EMBD; i += PWG) {
    float v = embd_value(w->arena + w->embd_q, w->arena + w->embd_s, token, i);
#ifdef EMBED_SCALE
    v *= EMBED_SCALE;
#endif
    lm->xl[XP(i)] = v;
#if POST_NORMS
    lm->xr[i] = v;
#endif
    if (at->group == 0) x[i] = v;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// P1's pairs of [Q; K; V] rows: pair p is rows 2p and 2p + 1, except with
// NEOX in a q or k head, where pair j < N_ROT / 2 of the head is its rows j
// and j + N_ROT / 2 (the rest stay adjacent). Either way the pair is turned
// when 2p % HEAD_DIM < N_ROT (q and k heads start at multiples of HEAD_DIM),
// by the angle of frequency 2p % HEAD_DIM / 2.
INLINE int2 pair_rows(int pair) {
  const int r = 2 * pair;
#if NEOX
  const int hr = r % HEAD_DIM;
  if (r < N_EMBD_Q + N_EMBD_KV && hr < N_ROT) return (int2)(r - hr / 2, r - hr / 2 + N_ROT / 2);
#endif
  return (int2)(r, r + 1);
}
// Pair (r0 = 2p) is a q or k pair that RoPE turns (P1 turns it unless
// QK_NORM, whose attention units do).
INLINE bool pair_rotates(int r0) { return r0 < N_EMBD_Q + N_EMBD_KV && r0 % HEAD_DIM < N_ROT; }
// The pair's (cos, sin) at pos, in lane 0 (the lane that rotates).
INLINE float2 pair_cs(const __global float2* rope_cs, int pos, int r0, int lane) {
#if QK_NORM
  return (float2)(0.0f);  // the attention units turn q and k
#else
  return lane == 0 && pair_rotates(r0) ? rope_cs[pos * (N_ROT / 2) + r0 % HEAD_DIM / 2]
                                       : (float2)(0.0f);
#endif
}

// A P1 row pair: rows pair_rows(pair) of [Q; K; V] (a pair never straddles
// two matrices: N_EMBD_Q and N_EMBD_KV are even), where they are in layer
// lo: the matrix (payloads, scales), the pair's rows there (`rows`: in
// [Q; K; V]), and the matrix's type in this layer. `alt`: the layer's
// LO_ALT word.
// V_SINGLE (separate Q, K and V only): V's rows, which RoPE does not pair,
// go one to a warp (units QK_PAIRS.. of P1, after the Q/K pairs), so the
// slowest warps of a layer whose V is Q6_K (the K-quant mixes) dot one row
// instead of two; the 1B shape's 2,112 warps have 1,792 units instead of
// 1,536 pairs. H200 tg128, three rounds against pairs for V: Llama-3.2-1B
// Q4_K_M 1,862 / 1,859 / 1,855 tok/s against 1,851 / 1,851 / 1,848,
// SmolLM2-1.7B Q4_K_M 1,298 / 1,295 / 1,299 against 1,287 / 1,289 / 1,286.
#define V_SINGLE (!QKV_STACKED)
#define QK_PAIRS ((N_EMBD_Q + N_EMBD_KV) / 2)
#define N_QKV_UNITS (V_SINGLE ? QK_PAIRS + N_EMBD_KV : N_QKV / 2)
typedef struct {
  const __global uchar* wq;
  const __global uchar* ws;
  int row, row_b;
  int2 rows;
  int type;
  bool single;  // a V row alone (V_SINGLE): rows.x == rows.y, row == row_b
} QkvPair;
INLINE QkvPair qkv_pair(const __global uchar* arena, const __global ulong* lo, int pair, uint alt) {
  QkvPair p;
  p.single = V_SINGLE && pair >= QK_PAIRS;
  p.rows = p.single ? (int2)(N_EMBD_Q + N_EMBD_KV + pair - QK_PAIRS) : pair_rows(pair);
#if QKV_STACKED
  p.wq = arena + lo[LO_Q_Q];
  p.ws = arena + lo[LO_Q_S];
  p.row = p.rows.x;
  p.row_b = p.rows.y;
  p.type = WT_Q;
#else
  const int r0 = p.single ? p.rows.x : 2 * pair;
  const int m = r0 < N_EMBD_Q ? 0 : r0 < N_EMBD_Q + N_EMBD_KV ? 1 : 2;  // Q, K, V
  const int slot = m == 0 ? LO_Q_Q : m == 1 ? LO_K_Q : LO_V_Q;          // its _S follows
  p.wq = arena + lo[slot];
  p.ws = arena + lo[slot + 1];
  const int first = m == 0 ? 0 : m == 1 ? N_EMBD_Q : N_EMBD_Q + N_EMBD_KV;
  p.row = p.rows.x - first;
  p.row_b = p.rows.y - first;
  p.type = m == 0   ? (WT_Q_ALT != WT_Q && (alt & ALT_Q) ? WT_Q_ALT : WT_Q)
           : m == 1 ? (WT_K_ALT != WT_K && (alt & ALT_K) ? WT_K_ALT : WT_K)
                    : (WT_V_ALT != WT_V && (alt & ALT_V) ? WT_V_ALT : WT_V);
#endif
  return p;
}

// row_load and row_dot_regs for a P1 matrix of type `type`, one of WT_Q,
// WT_K, WT_V and their ALT: each distinct type's code once (QKV_STACKED: the
// first case alone).
INLINE void qkv_row_load(int type, const __global uchar* wq, const __global uchar* ws, int row,
                         int lane, RowRegs* r) {
  if (type == WT_Q) {
    row_load(WT_Q, wq, ws, N_EMBD, row, lane, r);
  } else if (type == WT_K) {
    row_load(WT_K, wq, ws, N_EMBD, row, lane, r);
  } else if (type == WT_V) {
    row_load(WT_V, wq, ws, N_EMBD, row, lane, r);
  } else if (type == WT_Q_ALT) {
    row_load(WT_Q_ALT, wq, ws, N_EMBD, row, lane, r);
  } else if (type == WT_K_ALT) {
    row_load(WT_K_ALT, wq, ws, N_EMBD, row, lane, r);
  } else {
    row_load(WT_V_ALT, wq, ws, N_EMBD, row, lane, r);
  }
}
INLINE float qkv_row_dot(int type, const __global uchar* wq, const __global uchar* ws, int row,
                         const __local float* x, int lane, const RowRegs* r) {
  if (type == WT_Q) return row_dot_regs(WT_Q, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
  if (type == WT_K) return row_dot_regs(WT_K, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
  if (type == WT_V) return row_dot_regs(WT_V, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
  if (type == WT_Q_ALT) return row_dot_regs(WT_Q_ALT, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
  if (type == WT_K_ALT) return row_dot_regs(WT_K_ALT, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
  return row_dot_regs(WT_V_ALT, wq, ws, N_EMBD, row, x, lane, r, XI_QKV);
}

// The pair's two rows into ra, rb.
INLINE void qkv_load_pair(const QkvPair* p, int lane, RowRegs* ra, RowRegs* rb) {
  qkv_row_load(p->type, p->wq, p->ws, p->row, lane, ra);
  if (!p->single) qkv_row_load(p->type, p->wq, p->ws, p->row_b, lane, rb);
}

// P1's loads that need nothing from the other work-groups, issued before the
// barrier wait that precedes P1 of layer il: this warp's first Q/K/V unit
// (a pair of rows, or one V row: V_SINGLE) and attn_norm; past the last
// layer (il == N_LAYER), output_norm.
INLINE void qkv_early_loads(const Weights* w, int il, const Place* at, RowRegs* ra, RowRegs* rb,
                            float4* gw) {
  const __global ulong* lo = w->layer_off + il * LO_N;
  if (il < N_LAYER && at->gwarp < N_QKV_UNITS) {
    const QkvPair p = qkv_pair(w->arena, lo, at->gwarp, (uint)lo[LO_ALT]);
    qkv_load_pair(&p, at->lane, ra, rb);
  }
  load_norm(gw,
            (const __global float*)(w->arena + (il < N_LAYER ? lo[LO_ATTN_NORM] : w->out_norm)));
}

// P1: x' = rmsnorm(x) * attn_norm (x_in null: x' is made from xl, the
// embedding; POST_NORMS: from xr, after adding the previous layer's normed
// FFN output, post_ffn its weights); the Q/K rows in pairs, so that a pair
// of q or k dimensions is turned by RoPE in one lane (QKV_BIAS: biases
// added first; QK_NORM: not turned here), V's in pairs too or one to a unit
// (V_SINGLE); q -> q, k and v -> the cache at pos (QK_NORM: k -> h). The
// warp's first unit is in ra (and rb) and its (cos, sin) in cs_first
// (qkv_early_loads).
INLINE void qkv_rope_append(const Weights* w, const State* s, const Local* lm, const Place* at,
                            const __global ulong* lo, size_t cache_base, int pos, int slot,
                            volatile const __global float* x_in, const __global float* post_ffn,
                            const __global float2* rope_cs, const float4* gw, float2 cs_first,
                            RowRegs* ra, RowRegs* rb) {
#if POST_NORMS
  const float scale = stage_post_norm(lm, s->o, post_ffn, gw, XI_QKV);
#else
  const float scale = stage_norm(lm->xl, x_in, gw, lm->red, XI_QKV);
#endif
  const uint alt = QKV_STACKED ? 0u : (uint)lo[LO_ALT];
  for (int pair = at->gwarp; pair < N_QKV_UNITS; pair += at->n_gwarps) {
    const QkvPair p = qkv_pair(w->arena, lo, pair, alt);
    const int r0 = p.single ? p.rows.x : 2 * pair;  // (NEOX: the pair's rows are not r0, r0 + 1)
#if QK_NORM
    const bool rotate = false;  // the attention units turn q and k
#else
    const bool rotate = pair_rotates(r0);
#endif
    // The rotation's cos/sin load goes out with the rows' loads.
    const float2 cs = pair == at->gwarp ? cs_first : pair_cs(rope_cs, pos, r0, at->lane);
    if (pair != at->gwarp) qkv_load_pair(&p, at->lane, ra, rb);
    // Both rows' loads are issued before the shuffles (asm) of either sum.
    float a = qkv_row_dot(p.type, p.wq, p.ws, p.row, lm->xl, at->lane, ra);
    float b = p.single ? 0.0f : qkv_row_dot(p.type, p.wq, p.ws, p.row_b, lm->xl, at->lane, rb);
    a = warp_sum(a) * scale;
    b = p.single ? 0.0f : warp_sum(b) * scale;
    if (at->lane == 0) {
#if QKV_BIAS
      const __global float* bias = (const __global float*)(w->arena + lo[LO_QKV_BIAS]);
      a += bias[p.rows.x];
      b += bias[p.rows.y];
#endif
      if (rotate) {
        const float rot_a = a * cs.x - b * cs.y;
        b = a * cs.y + b * cs.x;
        a = rot_a;
      }
      __global float* dst;
      int first;
      if (r0 < N_EMBD_Q) {
        dst = s->q;
        first = 0;
      } else if (r0 < N_EMBD_Q + N_EMBD_KV) {
        // QK_NORM: raw, in h (qk_prepare norms and turns it into the cache)
        dst = QK_NORM ? s->h : s->k_cache + cache_base + (size_t)slot * N_EMBD_KV;
        first = N_EMBD_Q;
      } else {
        dst = s->v_cache + cache_base + (size_t)slot * N_EMBD_KV;
        first = N_EMBD_Q + N_EMBD_KV;
      }
      dst[p.rows.x - first] = a;
      if (!p.single) dst[p.rows.y - first] = b;
    }
  }
}

#if QK_NORM
// A head of HEAD_DIM values read from v (lane l: dimensions l + 32 d, into
// val) RMS-normed with its weights g, then turned by RoPE at pos; t: the
// warp's own local row of HEAD_DIM floats, for the rotation's partners.
INLINE void head_norm_rope(float* val, volatile const __global float* v, const __global float* g,
                           __local float* t, const __global float2* rope_cs, int pos, int lane) {
  float ss = 0.0f;
#pragma unroll
  for (int d = 0; d < AW_D; ++d) {
    val[d] = v[lane + 32 * d];
    ss += val[d] * val[d];
  }
  const float rs = rsqrt(warp_sum(ss) / HEAD_DIM + RMS_EPS);
#pragma unroll
  for (int d = 0; d < AW_D; ++d) {
    const int i = lane + 32 * d;
    val[d] *= rs * g[i];
    t[i] = val[d];
  }
  warp_sync();
#pragma unroll
  for (int d = 0; d < AW_D; ++d) {
    const int i = lane + 32 * d;
    if (i < N_ROT) {
#if NEOX
      const bool lower = i < N_ROT / 2;
      const int j = lower ? i : i - N_ROT / 2;
      const float other = t[lower ? i + N_ROT / 2 : i - N_ROT / 2];
#else
      const bool lower = (i & 1) == 0;
      const int j = i / 2;
      const float other = t[i ^ 1];
#endif
      const float2 cs = rope_cs[pos * (N_ROT / 2) + j];
      val[d] = lower ? val[d] * cs.x - other * cs.y : other * cs.y + val[d] * cs.x;
    }
  }
  warp_sync();  // t is free again
}

// An attention unit's q head hd (raw in q) normed and turned into qn by warp
// 0, and with_k (the unit's span ends at pos) its K head (raw in h) into the
// cache at pos by warp 1. Every unit of the K head whose span ends at pos
// writes the same bits there, and only such units read position pos.
INLINE void qk_prepare(const Weights* w, const State* s, const Local* lm, const Place* at,
                       const __global ulong* lo, size_t cache_base, int pos, int slot,
                       const __global float2* rope_cs, int hd, bool with_k) {
  if (at->warp == 0 || (at->warp == 1 && with_k)) {
    const bool is_q = at->warp == 0;
    const int kvh = hd / (N_HEAD / N_HEAD_KV);
    volatile const __global float* v = is_q ? s->q + hd * HEAD_DIM : s->h + kvh * HEAD_DIM;
    const __global float* g = (const __global float*)(w->arena + lo[is_q ? LO_Q_NORM : LO_K_NORM]);
    float val[AW_D];
    head_norm_rope(val, v, g, lm->att_acc + at->warp * AW_STRIDE, rope_cs, pos, at->lane);
    __global float* k_pos = s->k_cache + cache_base + (size_t)slot * N_EMBD_KV + kvh * HEAD_DIM;
#pragma unroll
    for (int d = 0; d < AW_D; ++d) {
      const int i = at->lane + 32 * d;
      if (is_q) {
        lm->qn[i] = val[d];
      } else {
        k_pos[i] = val[d];
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
}
#endif

// Rows first, first + stride, ... of layer lo's [Q; K; V] into L2.
INLINE void prefetch_qkv(const __global uchar* arena, const __global ulong* lo, int first,
                         int stride, int lane) {
#if QKV_STACKED
  prefetch_rows(WT_Q, arena, lo + LO_Q_Q, lo + LO_Q_S, N_EMBD, N_QKV, first, stride, lane);
#else
  for (int r = first; r < N_QKV; r += stride) {
    const int unit = V_SINGLE && r >= 2 * QK_PAIRS ? QK_PAIRS + r - 2 * QK_PAIRS : r / 2;
    const QkvPair p = qkv_pair(arena, lo, unit, (uint)lo[LO_ALT]);
    prefetch_row(p.wq, p.ws, row_q_bytes(p.type, N_EMBD), row_s_bytes(p.type, N_EMBD),
                 r % 2 ? p.row_b : p.row, lane);
  }
#endif
}

// Part `part` of layer il's weights into L2 (nothing past the last layer),
// rows to warps first, first + stride, ...
#define PF_QKV 0
#define PF_WO 1
#define PF_GATE 2
#define PF_UP 3
#define PF_DOWN 4
INLINE void prefetch_part(const Weights* w, int il, int part, int first, int stride, int lane) {
  if (il >= N_LAYER) return;
  const __global ulong* lq = w->layer_off + il * LO_N;
  const __global uchar* a = w->arena;
  if (part == PF_QKV) {
    prefetch_qkv(a, lq, first, stride, lane);
  } else if (part == PF_WO) {
    const int wt_wo = USES_ALT(lq, WO) ? WT_WO_ALT : WT_WO;
    prefetch_rows(wt_wo, a, lq + LO_WO_Q, lq + LO_WO_S, N_EMBD_Q, N_EMBD, first, stride, lane);
  } else if (part == PF_DOWN) {
    const int wt_down = USES_ALT(lq, DOWN) ? WT_DOWN_ALT : WT_DOWN;
    prefetch_rows(wt_down, a, lq + LO_DOWN_Q, lq + LO_DOWN_S, N_FF, N_EMBD, first, stride, lane);
  } else {
    const int wt_ffn = USES_ALT(lq, FFN) ? WT_FFN_ALT : WT_FFN;
    prefetch_rows(wt_ffn, a, lq + (part == PF_GATE ? LO_GATE_Q : LO_UP_Q),
                  lq + (part == PF_GATE ? LO_GATE_S : LO_UP_S), N_EMBD, N_FF, first, stride, lane);
  }
}

// Layer il + 1's Wo, gate, up and down rows and layer il + 2's Q/K/V rows
// (layer 0 also its own and layer 1's) into L2 (H200, against the same
// layer's rows: tg128 2,453-2,459 vs 2,433-2,437, @d512 2,100-2,115 vs
// 2,077-2,079, @d2048 1,820 vs 1,784). The lm_head is not prefetched: its
// share over the last layers (+0.5% on the H200 at SmolLM2-135M, 2026-11-22)
// was turned off by a rule that read NVIDIA's CL_DEVICE_GLOBAL_MEM_CACHE_SIZE
// (4.125 MiB on the H100: the L1s, not the 50 MB L2) as L2 from 2026-11-27
// on, and removed.
INLINE void prefetch_weights(const Weights* w, int il, int first, int stride, int lane) {
  for (int lp = il + (il == 0 ? 0 : 1); lp <= il + 1 && lp < N_LAYER; ++lp) {
#pragma unroll
    for (int part = PF_WO; part <= PF_DOWN; ++part) prefetch_part(w, lp, part, first, stride, lane);
    prefetch_part(w, lp + 1, PF_QKV, first, stride, lane);
  }
}

// L2_PREFETCH 0 (the host's choice where a layer's weights exceed 16 MiB):
// no L2 prefetch at all. At those sizes every scheme measured lost to none:
// a layer ahead, a 1B layer's 34 MB (Q4_0) evicted the one being read; a
// stage or two ahead (each stage prefetching the part it could hide: P1 the
// layer's gate, P2 its up, P3 its down, P5 the next layer's Q/K/V and Wo)
// beat that on the H100 (tg128 1,769 against 1,586), but its prefetches
// queue ahead of the short stages' loads: H200, tg128 (2026-11-30), 1B Q4_0
// 2,281 / 2,275 with none against 2,114 / 2,115 (trace, us a token: Q/K/V
// 44 against 60, attention 51 against 65, Wo 48 against 58, down 71 against
// 81, gate/up 134 against 117), 1B Q4_K_M 2,049 / 2,047 against 1,856 /
// 1,861, SmolLM2-1.7B Q4_0 1,615 / 1,610 against 1,482 / 1,481 and Q4_K_M
// 1,460 / 1,463 against 1,296 / 1,298; any one part alone also lost to none
// (1B: gate 2,250, up 2,227, down 2,242, Q/K/V 2,257, Wo 2,267). Smaller
// layers keep the layer-ahead prefetch: without it SmolLM2-360M 2,097 /
// 2,093 against 2,137 / 2,121, Gemma 3 270M Q4_K_M 2,324 / 2,320 against
// 2,392 / 2,389, SmolLM2-135M and Qwen2.5-0.5B even.
#ifndef L2_PREFETCH
#define L2_PREFETCH 1
#endif

// ---- P2: attention --------------------------------------------------------------

// Splits per head: one up to ATT_SPLIT_POS positions, then one per
// ATT_SPLIT_SPAN, at most ATT_SPLIT_MAX and no more than the work-groups
// give each head.
INLINE int att_n_split(int n_pos, int n_groups) {
  const int split_cap = clamp(n_groups / N_HEAD, 1, ATT_SPLIT_MAX);
  return n_pos <= ATT_SPLIT_POS
             ? 1
             : clamp((n_pos + ATT_SPLIT_SPAN - 1) / ATT_SPLIT_SPAN, 1, split_cap);
}

// One round of the warp-per-position attention: this warp's positions p0,
// p0 + WARPS, ... (nb of them, those before s_end), their K and V rows loaded
// at once, folded into the warp's online softmax (*m, *l, acc). Lane l holds
// dimensions l + 32 * d, d < AW_D, of q, K, V and acc; row0 includes l.
INLINE void att_warp_round(const __global float* k_cache, const __global float* v_cache,
                           size_t row0, int shift, int p_wrap, int p0, int s_end, const int nb,
                           const float* qv, float* acc, float* m, float* l) {
  float kr[ATT_LONG_ROUND][AW_D], vr[ATT_LONG_ROUND][AW_D], sc[ATT_LONG_ROUND];
#pragma unroll
  for (int i = 0; i < nb; ++i) {
    const int p = p0 + WARPS * i;
#pragma unroll
    for (int d = 0; d < AW_D; ++d) {
      kr[i][d] = vr[i][d] = 0.0f;
      if (p < s_end) {
#if WINDOW > 0
        const int row = p < p_wrap ? p - shift : p - p_wrap;  // att_warps
#else
        const int row = p;
#endif
        kr[i][d] = k_cache[row0 + (size_t)row * N_EMBD_KV + 32 * d];
        vr[i][d] = v_cache[row0 + (size_t)row * N_EMBD_KV + 32 * d];
      }
    }
  }
  float bm = *m;
#pragma unroll
  for (int i = 0; i < nb; ++i) {
    float sd = 0.0f;
#pragma unroll
    for (int d = 0; d < AW_D; ++d) sd += kr[i][d] * qv[d];
    sc[i] = warp_sum(sd);
    if (p0 + WARPS * i < s_end) bm = fmax(bm, sc[i]);
  }
  const float corr = exp(*m - bm);
  float ls = *l * corr;
#pragma unroll
  for (int d = 0; d < AW_D; ++d) acc[d] *= corr;
#pragma unroll
  for (int i = 0; i < nb; ++i) {
    const float e = p0 + WARPS * i < s_end ? exp(sc[i] - bm) : 0.0f;
    ls += e;
#pragma unroll
    for (int d = 0; d < AW_D; ++d) acc[d] += e * vr[i][d];
  }
  *m = bm;
  *l = ls;
}

// Head hd over positions s_begin..s_end - 1: warp w takes positions
// s_begin + w, + WARPS, ... in rounds of 4 or 8 (att_warp_round), keeping its
// own online softmax in registers; its (m, l, sum of V) go to aw_m, aw_l,
// att_acc. Rounds of 8 (ATT_LONG_ROUND) where the unit gives a warp more
// than 4 positions, else of 4 (H200, against 4 always: tg128 2,316-2,320 vs
// 2,289-2,301 tok/s; at d512, where a split is 64 positions, 8 always lost:
// 1,937-1,953 vs 1,966-1,975).
INLINE void att_warps(const State* s, const Local* lm, const Place* at, size_t cache_base, int ring,
                      int hd, int s_begin, int s_end) {
  const int kvh = hd / (N_HEAD / N_HEAD_KV);
  const size_t row0 = cache_base + kvh * HEAD_DIM + at->lane;
#if QK_NORM
  const __local float* qh = lm->qn + at->lane;
#else
  volatile const __global float* qh = s->q + hd * HEAD_DIM + at->lane;
#endif
  float qv[AW_D], acc[AW_D];
#pragma unroll
  for (int d = 0; d < AW_D; ++d) {
    qv[d] = qh[32 * d] * (rsqrt((float)HEAD_DIM) * Q_MUL);
    acc[d] = 0.0f;
  }
  float m = -1e30f, l = 0.0f;
  // The span's rows (at most a ring of them): from s_begin's on, wrapping to
  // row 0 at position p_wrap; no division per key.
  const int slot0 = kv_slot(s_begin, ring);
  const int shift = s_begin - slot0, p_wrap = s_begin + ring - slot0;
  if (s_end - s_begin > 4 * WARPS) {
    for (int p0 = s_begin + at->warp; p0 < s_end; p0 += ATT_LONG_ROUND * WARPS) {
      att_warp_round(s->k_cache, s->v_cache, row0, shift, p_wrap, p0, s_end, ATT_LONG_ROUND, qv,
                     acc, &m, &l);
    }
  } else {
    for (int p0 = s_begin + at->warp; p0 < s_end; p0 += 4 * WARPS) {
      att_warp_round(s->k_cache, s->v_cache, row0, shift, p_wrap, p0, s_end, 4, qv, acc, &m, &l);
    }
  }
#pragma unroll
  for (int d = 0; d < AW_D; ++d) lm->att_acc[at->warp * AW_STRIDE + at->lane + 32 * d] = acc[d];
  if (at->lane == 0) {
    lm->aw_m[at->warp] = m;
    lm->aw_l[at->warp] = l;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// The warps' partials of head hd, split sp, merged: work-item (d, p)
// rescales the AW_D warps p, p + ATT_PARTS, ... of dimension d to the
// work-group's max, and the ATT_PARTS adjacent lanes meet by shuffles. One
// split: the result goes straight to att; more: the partial to att_part.
INLINE void att_merge_warps(const State* s, const Local* lm, const Place* at, int hd, int sp,
                            int n_split) {
  float mm = -1e30f;
  for (int w = 0; w < WARPS; ++w) mm = fmax(mm, lm->aw_m[w]);
  const int d = at->lid / ATT_PARTS, pt = at->lid % ATT_PARTS;
  float num = 0.0f, den = 0.0f;
#pragma unroll
  for (int j = 0; j < AW_D; ++j) {
    const int w = pt + j * ATT_PARTS;
    const float f = exp(lm->aw_m[w] - mm);
    num += f * lm->att_acc[w * AW_STRIDE + d];
    den += f * lm->aw_l[w];
  }
  for (int mask = ATT_PARTS / 2; mask > 0; mask >>= 1) {
    num += shfl_bfly(num, mask);
    den += shfl_bfly(den, mask);
  }
  if (pt == 0) {
    if (n_split == 1) {
      s->att[hd * HEAD_DIM + d] = num / den;
    } else {
      __global float* pp = s->att_part + (hd * ATT_SPLIT_MAX + sp) * ATT_PART;
      pp[d] = num;
      if (d == 0) {
        pp[HEAD_DIM] = mm;
        pp[HEAD_DIM + 1] = den;
      }
    }
  }
}

// Publishes this split's partial of head hd; the head's last split to
// arrive merges all n_split into att (and resets the count for the next
// layer, which starts after a grid barrier).
INLINE void att_merge_splits(const State* s, const Local* lm, const Place* at, int hd,
                             int n_split) {
  if (!arrive_last(&s->att_count[hd], (uint)(n_split - 1), lm->flag)) return;
  const int lid = at->lid;
  if (lid == 0) atomic_xchg(&s->att_count[hd], 0u);
  volatile const __global float* ph = s->att_part + hd * ATT_SPLIT_MAX * ATT_PART;
  if (lid < n_split) {
    lm->sp_m[lid] = ph[lid * ATT_PART + HEAD_DIM];
    lm->sp_l[lid] = ph[lid * ATT_PART + HEAD_DIM + 1];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float mm = -1e30f;
  for (int i = 0; i < n_split; ++i) mm = fmax(mm, lm->sp_m[i]);
  // Work-item (d, g) sums splits g, g + G, ... of dimension d.
  const int d = lid % HEAD_DIM, g = lid / HEAD_DIM;
  if (g < PWG / HEAD_DIM) {
    float num = 0.0f;
    for (int i = g; i < n_split; i += PWG / HEAD_DIM) {
      const float f = lm->sp_l[i] > 0.0f ? exp(lm->sp_m[i] - mm) : 0.0f;
      num += f * ph[i * ATT_PART + d];
    }
    lm->att_acc[g * HEAD_DIM + d] = num;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < HEAD_DIM) {
    float den = 0.0f;
    for (int i = 0; i < n_split; ++i) {
      if (lm->sp_l[i] > 0.0f) den += exp(lm->sp_m[i] - mm) * lm->sp_l[i];
    }
    float total = 0.0f;
    for (int k = 0; k < PWG / HEAD_DIM; ++k) total += lm->att_acc[k * HEAD_DIM + lid];
    s->att[hd * HEAD_DIM + lid] = total / den;
  }
}

// P2: a unit is (head, split), a work-group per unit; K and V rows are read
// whole by a warp (coalesced) and a score is a warp sum. (H200 against groups
// of 16 work-items per position with chunk-wide softmax passes in local
// memory, three local barriers: tg128 2,289-2,301 vs 2,228-2,246 tok/s, d512
// 1,966-1,975 vs 1,915-1,930.) Positions first..n_pos - 1 (first > 0: a
// sliding-window layer). QK_NORM: each unit prepares its q head (and K at
// n_pos - 1) first, with layer lo's head norms and the RoPE table rope_cs.
INLINE void attention(const Weights* w, const State* s, const Local* lm, const Place* at,
                      const __global ulong* lo, const __global float2* rope_cs, size_t cache_base,
                      int ring, int first, int n_pos, int n_split) {
  for (int unit = at->group; unit < N_HEAD * n_split; unit += at->n_groups) {
    const int hd = unit / n_split, sp = unit % n_split;
    const int s_span = (n_pos - first + n_split - 1) / n_split;
    const int s_begin = first + sp * s_span, s_end = min(n_pos, s_begin + s_span);
#if QK_NORM
    qk_prepare(w, s, lm, at, lo, cache_base, n_pos - 1, kv_slot(n_pos - 1, ring), rope_cs, hd,
               s_end == n_pos);
#endif
    att_warps(s, lm, at, cache_base, ring, hd, s_begin, s_end);
    att_merge_warps(s, lm, at, hd, sp, n_split);
    if (n_split > 1) att_merge_splits(s, lm, at, hd, n_split);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

// ---- P3 and P5: x += W in -------------------------------------------------------

// Loaded before the wait that precedes matvec_residual: this warp's first
// row of W (N_EMBD x n_in, type `type`, or type_alt where `alt`), whose
// payloads and scales are at arena + *q_off, arena + *s_off.
INLINE void matvec_first_row(int type, int type_alt, bool alt, const __global uchar* arena,
                             const __global ulong* q_off, const __global ulong* s_off, int n_in,
                             const Place* at, RowRegs* r) {
  if (at->gwarp < N_EMBD) {
    row_load_alt(type, type_alt, alt, arena + *q_off, arena + *s_off, n_in, at->gwarp, at->lane, r);
  }
}

// x += W in, W (N_EMBD x n_in, type `type`, or type_alt where `alt`, at
// arena + *q_off, *s_off), in (n_in) written by the other work-groups: P3
// (Wo, att) and P5 (down, h). The warp's first row is in r. (The offsets
// are read where the row loads need them, after the staging's barrier, as
// the loads of a row are.)
// POST_NORMS: x is o, and W in replaces it (the next stage adds it, normed).
INLINE void matvec_residual(int type, int type_alt, bool alt, const __global uchar* arena,
                            const __global ulong* q_off, const __global ulong* s_off, int n_in,
                            volatile const __global float* in, __global float* x, __local float* xl,
                            const Place* at, RowRegs* r, bool xi) {
  stage_padded(xl, in, n_in, xi);
  for (int row = at->gwarp; row < N_EMBD; row += at->n_gwarps) {
#if POST_NORMS
    const float x_row = 0.0f;
#else
    const float x_row = at->lane == 0 ? ((volatile __global float*)x)[row] : 0.0f;  // early
#endif
    if (row != at->gwarp) {
      row_load_alt(type, type_alt, alt, arena + *q_off, arena + *s_off, n_in, row, at->lane, r);
    }
    const float v = warp_sum(row_dot_regs_alt(type, type_alt, alt, arena + *q_off, arena + *s_off,
                                              n_in, row, xl, at->lane, r, xi));
    if (at->lane == 0) x[row] = x_row + v;
  }
}

// ---- P4: norm, gate and up, SwiGLU ----------------------------------------------

// P4's loads that need nothing from the other work-groups: this warp's first
// gate and up rows and ffn_norm.
INLINE void ffn_early_loads(const Weights* w, const __global ulong* lo, const Place* at,
                            RowRegs* ra, RowRegs* rb, float4* gw) {
  if (at->gwarp < N_FF) {
    const bool alt = USES_ALT(lo, FFN);
    row_load_alt(WT_FFN, WT_FFN_ALT, alt, w->arena + lo[LO_GATE_Q], w->arena + lo[LO_GATE_S],
                 N_EMBD, at->gwarp, at->lane, ra);
    row_load_alt(WT_FFN, WT_FFN_ALT, alt, w->arena + lo[LO_UP_Q], w->arena + lo[LO_UP_S], N_EMBD,
                 at->gwarp, at->lane, rb);
  }
  load_norm(gw, (const __global float*)(w->arena + lo[LO_FFN_NORM]));
}

// P4: x' = rmsnorm(x) * ffn_norm (POST_NORMS: x += rmsnorm(o) *
// post_attn_norm first); h = silu(Wg x') * (Wu x') (FFN_GELU: gelu). The
// warp's first gate and up rows are in ra, rb.
INLINE void ffn_gate_up(const Weights* w, const State* s, const Local* lm, const Place* at,
                        const __global ulong* lo, const float4* gw, RowRegs* ra, RowRegs* rb) {
#if POST_NORMS
  const float scale =
      stage_post_norm(lm, s->o, (const __global float*)(w->arena + lo[LO_POST_ATTN]), gw, XI_FFN);
#else
  const float scale = stage_norm(lm->xl, s->x, gw, lm->red, XI_FFN);
#endif
  const __global uchar* a = w->arena;
  const bool alt = USES_ALT(lo, FFN);
  for (int row = at->gwarp; row < N_FF; row += at->n_gwarps) {
    if (row != at->gwarp) {
      row_load_alt(WT_FFN, WT_FFN_ALT, alt, a + lo[LO_GATE_Q], a + lo[LO_GATE_S], N_EMBD, row,
                   at->lane, ra);
      row_load_alt(WT_FFN, WT_FFN_ALT, alt, a + lo[LO_UP_Q], a + lo[LO_UP_S], N_EMBD, row, at->lane,
                   rb);
    }
    float g = row_dot_regs_alt(WT_FFN, WT_FFN_ALT, alt, a + lo[LO_GATE_Q], a + lo[LO_GATE_S],
                               N_EMBD, row, lm->xl, at->lane, ra, XI_FFN);
    float u = row_dot_regs_alt(WT_FFN, WT_FFN_ALT, alt, a + lo[LO_UP_Q], a + lo[LO_UP_S], N_EMBD,
                               row, lm->xl, at->lane, rb, XI_FFN);
    g = warp_sum(g) * scale;
    u = warp_sum(u) * scale;
#if FFN_GELU
    if (at->lane == 0) {
      s->h[row] = 0.5f * g * (1.0f + tanh(0.7978845608f * (g + 0.044715f * g * g * g))) * u;
    }
#else
    if (at->lane == 0) s->h[row] = g / (1.0f + exp(-g)) * u;
#endif
  }
}

// ---- the head: logits and the token ---------------------------------------------

// The lm_head's rows in registers a step ahead: HEAD_PIPE rows are dotted
// while the next HEAD_PIPE rows load (row_load), where the head is Q6_K,
// whose blocks cost more instructions than their bytes (an iteration that
// loaded four rows and then dotted them left the memory idle during the
// dots). H200, 1B-shaped Q4_K_M mix (Q6_K head, 2048 x 128,256): head 94 ->
// 74 us a token, tg128 1,673 / 1,686 -> 1,734 / 1,732. A Q8_0 head's
// two 16-byte chunks a block make the same scheme spill (Q4_0 file: head 74
// -> 112 us), so it keeps loading four rows and dotting them.
#ifndef HEAD_PIPE
#define HEAD_PIPE (WT_HEAD == 14 ? 2 : 0)
#endif

// Logit `row` (v: this lane's share of its dot; every lane calls this) into
// logits and, in lane 0, the warp's best so far.
INLINE void head_row_done(const State* s, const Place* at, int row, float v, float scale,
                          float* best, int* best_i) {
  const float sum = warp_sum(v) * scale;
  if (at->lane == 0 && row < N_VOCAB) {
    s->logits[row] = sum;
    if (beats(sum, row, *best, *best_i)) {
      *best = sum;
      *best_i = row;
    }
  }
}

// x' = rmsnorm(x) * output_norm (gw); logits = Whead x'; this work-group's
// argmax candidate -> part_val, part_idx. Four rows per iteration so their
// loads overlap (eight: slower), or HEAD_PIPE rows a step ahead; rows stay
// in increasing order per warp (ties keep the lower id).
INLINE void head_logits(const Weights* w, const State* s, const Local* lm, const Place* at,
                        const float4* gw) {
#if POST_NORMS
  const __global ulong* lo_last = w->layer_off + (N_LAYER - 1) * LO_N;
  const float scale = stage_post_norm(
      lm, s->o, (const __global float*)(w->arena + lo_last[LO_POST_FFN]), gw, XI_HEAD);
#else
  const float scale = stage_norm(lm->xl, s->x, gw, lm->red, XI_HEAD);
#endif
  float best = 0.0f;
  int best_i = -1;
#if HEAD_PIPE > 0
  const __global uchar* hq = w->arena + w->head_q;
  const __global uchar* hs = w->arena + w->head_s;
  const int step = HEAD_PIPE * at->n_gwarps;
  RowRegs cur[HEAD_PIPE];
#pragma unroll
  for (int k = 0; k < HEAD_PIPE; ++k) {
    const int row = at->gwarp + k * at->n_gwarps;
    if (row < N_VOCAB) row_load(WT_HEAD, hq, hs, N_EMBD, row, at->lane, &cur[k]);
  }
  for (int row0 = at->gwarp; row0 < N_VOCAB; row0 += step) {
    RowRegs nxt[HEAD_PIPE];
#pragma unroll
    for (int k = 0; k < HEAD_PIPE; ++k) {
      const int row = row0 + step + k * at->n_gwarps;
      if (row < N_VOCAB) row_load(WT_HEAD, hq, hs, N_EMBD, row, at->lane, &nxt[k]);
    }
    float v[HEAD_PIPE];
#pragma unroll
    for (int k = 0; k < HEAD_PIPE; ++k) {
      const int row = row0 + k * at->n_gwarps;
      v[k] = row < N_VOCAB ? row_dot_regs(WT_HEAD, hq, hs, N_EMBD, row, lm->xl, at->lane, &cur[k],
                                          XI_HEAD)
                           : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < HEAD_PIPE; ++k) {
      head_row_done(s, at, row0 + k * at->n_gwarps, v[k], scale, &best, &best_i);
      cur[k] = nxt[k];
    }
  }
#else
  for (int row0 = at->gwarp; row0 < N_VOCAB; row0 += 4 * at->n_gwarps) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = row0 + k * at->n_gwarps;
      v[k] = row < N_VOCAB ? row_dot(WT_HEAD, w->arena + w->head_q, w->arena + w->head_s, N_EMBD,
                                     row, lm->xl, at->lane, XI_HEAD)
                           : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      head_row_done(s, at, row0 + k * at->n_gwarps, v[k], scale, &best, &best_i);
    }
  }
#endif
  best_i = workgroup_argmax(best, best_i, lm->red_v, lm->red_i);
  if (at->lid == 0) {
    s->part_val[at->group] = lm->red_v[0];
    s->part_idx[at->group] = best_i;
  }
}

// The argmax over all work-groups' candidates, spread over the work-group
// (done by work-item 0 alone over 264 candidates it cost 3.5%), into ids[0]:
// -2 if a barrier gave up.
INLINE void pick_token(const State* s, const Local* lm, const Place* at, __global int* ids,
                       volatile __global uint* abort_flag) {
  float best = 0.0f;
  int best_i = -1;
  for (int g = at->lid; g < at->n_groups; g += PWG) {
    const float v = ((volatile __global float*)s->part_val)[g];
    const int i = ((volatile __global int*)s->part_idx)[g];
    if (beats(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  best_i = workgroup_argmax(best, best_i, lm->red_v, lm->red_i);
  if (at->lid == 0) ids[0] = *abort_flag ? -2 : (best_i < 0 ? 0 : best_i);
}

// ---- the sampled token: sample.cl's chain in this launch ------------------------

// With top_k > 0 the token is drawn by kernels/sample.cl's chain (penalties,
// top-k, temperature, top-p, min-p, the draw: the CPU sampler's ids for a
// seed) instead of taken by the argmax, without a launch of its own (that
// launch and the gap before it cost ~20 us a token on the H100):
//   1. each work-group penalises the recent ids among its own rows of the
//      logits (row % n_groups == group, as head_logits deals them) and
//      publishes its best composite (sample.cl's order: the logit, then the
//      lower id) in cand[group];
//   2. after a grid barrier each work-group finds T, the top_k-th best of
//      those maxima: the top_k best entries of the vocabulary are all >= T
//      (top_k work-groups hold one >= T each), and few others are (about
//      1.2 x top_k on random logits), so each work-group appends its entries
//      >= T to the list after the maxima (its length in cand_n);
//   3. the last work-group to arrive ranks the list and draws (draw_sorted).
//      A list longer than SAMPLE_CAP, which only contrived logits give,
//      takes sample.cl's radix select over all the logits instead.
// The host passes top_k 0 for the argmax, and uses this only where top_k <=
// n_groups and SAMPLE_A >= 2 K_MAX + 128 (PersistentDecode::samples).
#define SAMPLE_A (LOCAL_XP / 2)  // ulongs of xl the chain uses as scratch
#ifndef SAMPLE_CAP
#define SAMPLE_CAP (SAMPLE_A - K_MAX)  // (smaller: the tests' overflow)
#endif

typedef struct {
  __global int* history;           // (n_ctx + 1) the token at each position (device_sampler.h)
  __global ulong* cand;            // (n_groups) the maxima, then (SAMPLE_CAP) the list
  volatile __global uint* cand_n;  // (1) the list's length (0 between tokens)
  int n_recent, top_k;
  float repeat_penalty, frequency_penalty, presence_penalty, temperature, top_p, min_p;
  ulong seed, draw;
} SampleArgs;

// The work-group's largest of each work-item's v, in all work-items.
INLINE ulong workgroup_max_ulong(ulong v, __local ulong* red) {
  for (int m = 16; m > 0; m >>= 1) {
    const uint hi = as_uint(shfl_bfly(as_float((uint)(v >> 32)), m));
    const uint lo = as_uint(shfl_bfly(as_float((uint)v), m));
    v = max(v, upsample(hi, lo));
  }
  const int lid = get_local_id(0);
  if (lid % 32 == 0) red[lid / 32] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    for (int w = 1; w < WARPS; ++w) v = max(v, red[w]);
    red[0] = v;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  v = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // red is scratch again
  return v;
}

// Step 1 (every work-group, after head_logits).
INLINE void sample_maxima(const State* s, const SampleArgs* a, const Place* at, int pos,
                          __local ulong* red) {
  barrier(CLK_GLOBAL_MEM_FENCE);  // this work-group's rows of the logits are written
  penalize(s->logits, 0, N_VOCAB, at->n_groups, at->group, a->history, pos, a->n_recent,
           a->repeat_penalty, a->frequency_penalty, a->presence_penalty);
  barrier(CLK_GLOBAL_MEM_FENCE);
  ulong best = 0;  // none (a valid composite is above 2^32)
  for (int r = at->group + at->lid * at->n_groups; r < N_VOCAB; r += PWG * at->n_groups) {
    const float v = s->logits[r];
    if (!nan_bits(v)) best = max(best, composite(v, r));
  }
  best = workgroup_max_ulong(best, red);
  if (at->lid == 0) a->cand[at->group] = best;
}

// Step 2 (every work-group, after the grid barrier). a_loc: SAMPLE_A ulongs.
INLINE void sample_list(const State* s, const SampleArgs* a, const Place* at,
                        __local ulong* a_loc, __local ulong* s_t) {
  const int lid = at->lid;
  for (int g = lid; g < at->n_groups; g += PWG) a_loc[g] = ((volatile __global ulong*)a->cand)[g];
  if (lid == 0) *s_t = 1;  // fewer than top_k work-groups hold an entry: list them all
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int g = lid; g < at->n_groups; g += PWG) {
    const ulong c = a_loc[g];
    int rank = 0;
    for (int j = 0; j < at->n_groups; ++j) rank += a_loc[j] > c;
    if (c != 0 && rank == a->top_k - 1) *s_t = c;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const ulong t = *s_t;
  for (int r = at->group + lid * at->n_groups; r < N_VOCAB; r += PWG * at->n_groups) {
    const float v = s->logits[r];
    if (nan_bits(v)) continue;
    const ulong c = composite(v, r);
    if (c >= t) {
      const uint i = atomic_inc(a->cand_n);
      if (i < SAMPLE_CAP) a->cand[at->n_groups + i] = c;
    }
  }
}

// Step 3 (the last work-group): the id to ids[0] (-2 if a barrier gave up)
// and history[pos + 1].
INLINE void sample_pick(const State* s, const SampleArgs* a, const Place* at, int pos,
                        __global int* ids, volatile __global uint* abort_flag, __local ulong* a_loc,
                        __local double* s_sum, __local ulong* s_prefix, __local int* s_state) {
  const int lid = at->lid;
  const uint n_list = *a->cand_n;
  __local ulong* sorted = a_loc + (SAMPLE_A - K_MAX);
  int n;
  if (n_list <= SAMPLE_CAP) {
    for (uint i = lid; i < n_list; i += PWG) a_loc[i] = a->cand[at->n_groups + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    rank_sort(a_loc, (int)n_list, a->top_k, sorted);
    n = min((int)n_list, a->top_k);
  } else {
    __local ulong* out = a_loc + 128;  // after the 256 bins
    n = select_top(s->logits, 0, 0, 0, N_VOCAB, a->top_k, (__local uint*)a_loc, out, s_prefix,
                   s_state);
    rank_sort(out, n, n, sorted);
  }
  if (lid == 0) {
    *a->cand_n = 0;  // for the next token
    if (*abort_flag) ids[0] = -2;
  }
  draw_sorted(sorted, n, a->temperature, a->top_p, a->min_p, a->seed, a->draw, pos, ids,
              a->history, (__local float*)a_loc, s_sum);
}

// ---- the token ----------------------------------------------------------------

__kernel __attribute__((reqd_work_group_size(PWG, 1, 1))) void decode_token(
    const __global uchar* arena, const __global ulong* layer_off, ulong embd_q, ulong embd_s,
    ulong head_q, ulong head_s, ulong out_norm, const __global float2* rope_cs,
    const __global float2* rope_cs_swa, __global float* k_cache, __global float* v_cache,
    __global float* x, __global float* q, __global float* att, __global float* h,
    __global float* logits, __global float* part_val, __global int* part_idx, __global int* ids,
    int token_index, int pos, volatile __global uint* bar, uint bar_base,
    volatile __global uint* abort_flag, __global ulong* trace, __global float* att_part,
    volatile __global uint* att_count, __global float* o, __global int* history,
    __global ulong* cand, volatile __global uint* cand_n, int n_recent, float repeat_penalty,
    float frequency_penalty, float presence_penalty, int top_k, float temperature, float top_p,
    float min_p, ulong seed, ulong draw) {
  __local float xl[LOCAL_XP] __attribute__((aligned(16)));
#if POST_NORMS
  __local float xr[N_EMBD];
#else
  __local float* xr = 0;
#endif
#if QK_NORM
  __local float qn[HEAD_DIM];
#else
  __local float* qn = 0;
#endif
  __local float red[WARPS];
  __local float att_acc[WARPS * AW_STRIDE];
  __local float aw_m[WARPS], aw_l[WARPS];
  __local float red_v[WARPS];
  __local int red_i[WARPS];
  __local float sp_m[ATT_SPLIT_MAX], sp_l[ATT_SPLIT_MAX];
  __local int flag;
  __local double s_sum;
  __local ulong s_ul;
  __local int s_state[4];
  const Local lm = {xl, red, att_acc, aw_m, aw_l, red_v, red_i, sp_m, sp_l, &flag, xr, qn};
  const Weights w = {arena,  layer_off, embd_q,  embd_s,     head_q,
                     head_s, out_norm,  rope_cs, rope_cs_swa};
  const State s = {x,      q,        k_cache,  v_cache,  att,       h,
                   logits, part_val, part_idx, att_part, att_count, o};
  const Place at = place_of_work_item();
  GridBarrier gb = {bar, bar_base, 0, abort_flag, trace};
  if (trace && at.group == 0 && at.lid == 0) trace[0] = global_timer_ns();

  if (token_index < 0) {
    grid_self_test(-token_index, part_idx, ids, &gb, &at);
    return;
  }
  const SampleArgs sa = {history,           cand,          cand_n,      n_recent, top_k,
                         repeat_penalty,    frequency_penalty, presence_penalty, temperature,
                         top_p,             min_p,         seed,        draw};
  __local ulong* scratch = (__local ulong*)xl;
  if (pos < 0) {
    // The tests' entry (PersistentDecode::sample_logits): the chain alone,
    // on the logits as the host wrote them, at position -1 - pos.
    sample_maxima(&s, &sa, &at, -1 - pos, scratch);
    grid_sync(&gb, &at);
    sample_list(&s, &sa, &at, scratch, &s_ul);
    if (!arrive_last(bar, bar_base + (gb.n + 1) * (uint)at.n_groups - 1, &flag)) return;
    sample_pick(&s, &sa, &at, -1 - pos, ids, abort_flag, scratch, &s_sum, &s_ul, s_state);
    return;
  }

  // This warp's first row(s) of the next stage and the next norm's weights,
  // loaded while waiting at the barrier before it.
  RowRegs ra, rb;
  float4 gw[NORM_MAX];
  embed(&w, x, &lm, ids[token_index], &at);
  qkv_early_loads(&w, 0, &at, &ra, &rb, gw);
  // The first pair's RoPE (cos, sin), the same in every layer (of a kind).
  const float2 cs_first =
      at.gwarp < N_QKV / 2 ? pair_cs(rope_cs, pos, 2 * at.gwarp, at.lane) : (float2)(0.0f);
#if WINDOW > 0
  const float2 cs_first_swa =
      at.gwarp < N_QKV / 2 ? pair_cs(rope_cs_swa, pos, 2 * at.gwarp, at.lane) : (float2)(0.0f);
#endif
  const int n_pos = pos + 1;
  // Work-groups left without an attention unit prefetch the layers' weights
  // into L2 (where L2_PREFETCH) during P2, if they are at least 1 /
  // PF_IDLE_DIV of the grid; else every warp does between its work-group's
  // arrival at P1's barrier and its wait (which delays that barrier). (H200
  // against every warp at P1's barrier always: tg128 2,417-2,421 vs
  // 2,323-2,336, @d512 2,056-2,089 vs 1,959-1,980; with no prefetch
  // 2,302-2,320; with 1/32, d2048's 6 idle work-groups prefetching
  // everything: 1,381 vs 1,723-1,754.)

  // Each stage ends at a grid barrier: grid_arrive, then the next stage's
  // loads that need nothing from the other work-groups (or the L2 prefetch),
  // then grid_wait.
  size_t cache_base = 0;  // this layer's K / V rows (engine/cl/decode_state.h)
  for (int il = 0; il < N_LAYER; ++il) {
    const __global ulong* lo = layer_off + il * LO_N;
#if WINDOW > 0
    const bool swa = ((uint)lo[LO_ALT] & LAYER_SWA) != 0;
    const int ring = swa ? KV_RING : N_CTX;
    const int first = swa ? max(0, n_pos - WINDOW) : 0;
    const __global float2* rope = swa ? rope_cs_swa : rope_cs;
    const float2 cs_layer = swa ? cs_first_swa : cs_first;
#else
    const int ring = N_CTX;
    const int first = 0;
    const __global float2* rope = rope_cs;
    const float2 cs_layer = cs_first;
#endif
    const int n_split = att_n_split(n_pos - first, at.n_groups);
    const int n_units = N_HEAD * n_split;
    const bool pf_idle =
        at.n_groups > n_units && at.n_groups - n_units >= at.n_groups / PF_IDLE_DIV;
    const int n_idle = at.n_groups - n_units;
#if POST_NORMS
    const __global float* post_ffn =
        il > 0 ? (const __global float*)(arena + lo[LO_POST_FFN - LO_N]) : 0;
#else
    const __global float* post_ffn = 0;
#endif

    // P1: q, k, v = Wqkv rmsnorm(x); RoPE; k, v -> cache
    qkv_rope_append(&w, &s, &lm, &at, lo, cache_base, pos, kv_slot(pos, ring), il > 0 ? x : 0,
                    post_ffn, rope, gw, cs_layer, &ra, &rb);
    grid_arrive(&gb);
    if (L2_PREFETCH && !pf_idle) prefetch_weights(&w, il, at.gwarp, at.n_gwarps, at.lane);
    grid_wait(&gb, &at);

    // P2: att = softmax(q K^T / sqrt(HEAD_DIM)) V
    if (L2_PREFETCH && pf_idle && at.group >= n_units) {
      prefetch_weights(&w, il, at.slot * n_idle + at.group - n_units, WARPS * n_idle, at.lane);
    }
    attention(&w, &s, &lm, &at, lo, rope, cache_base, ring, first, n_pos, n_split);
    grid_arrive(&gb);
    matvec_first_row(WT_WO, WT_WO_ALT, USES_ALT(lo, WO), arena, lo + LO_WO_Q, lo + LO_WO_S,
                     N_EMBD_Q, &at, &ra);
    grid_wait(&gb, &at);

    // P3: x += Wo att (POST_NORMS: o = Wo att)
    matvec_residual(WT_WO, WT_WO_ALT, USES_ALT(lo, WO), arena, lo + LO_WO_Q, lo + LO_WO_S, N_EMBD_Q,
                    att, POST_NORMS ? o : x, xl, &at, &ra, XI_WO);
    grid_arrive(&gb);
    ffn_early_loads(&w, lo, &at, &ra, &rb, gw);
    grid_wait(&gb, &at);

    // P4: h = silu(Wg rmsnorm(x)) * (Wu rmsnorm(x))
    ffn_gate_up(&w, &s, &lm, &at, lo, gw, &ra, &rb);
    grid_arrive(&gb);
    matvec_first_row(WT_DOWN, WT_DOWN_ALT, USES_ALT(lo, DOWN), arena, lo + LO_DOWN_Q,
                     lo + LO_DOWN_S, N_FF, &at, &ra);
    grid_wait(&gb, &at);

    // P5: x += Wd h (POST_NORMS: o = Wd h)
    matvec_residual(WT_DOWN, WT_DOWN_ALT, USES_ALT(lo, DOWN), arena, lo + LO_DOWN_Q, lo + LO_DOWN_S,
                    N_FF, h, POST_NORMS ? o : x, xl, &at, &ra, XI_DOWN);
    grid_arrive(&gb);
    qkv_early_loads(&w, il + 1, &at, &ra, &rb, gw);
    grid_wait(&gb, &at);
    cache_base += (size_t)ring * N_EMBD_KV;
  }

  // The head: logits = Whead rmsnorm(x), each work-group's argmax candidate.
  head_logits(&w, &s, &lm, &at, gw);
  if (top_k > 0) {
    sample_maxima(&s, &sa, &at, pos, scratch);
    __global ulong* const traced = gb.trace;  // one more barrier, in the head's time
    gb.trace = 0;
    grid_sync(&gb, &at);
    gb.trace = traced;
    sample_list(&s, &sa, &at, scratch, &s_ul);
  }
  // The last work-group to arrive picks the token; the others are done (no
  // wait at a grid barrier). Its arrival counts like a barrier's, so the
  // host's bar_base stays in step. (A grid barrier and then work-group 0:
  // the same speed on the H200.)
  if (!arrive_last(bar, bar_base + (gb.n + 1) * (uint)at.n_groups - 1, &flag)) return;
  if (trace && at.lid == 0) trace[gb.n + (top_k > 0 ? 0 : 1)] = global_timer_ns();
  if (top_k > 0) {
    sample_pick(&s, &sa, &at, pos, ids, abort_flag, scratch, &s_sum, &s_ul, s_state);
  } else {
    pick_token(&s, &lm, &at, ids, abort_flag);
  }
  // The id's copy for the host, which reads it on a queue of its own while the
  // next launch (reading ids[0]) runs: a read of ids[0] between the launches
  // held the next one back ~9 us (engine/cl/decode_state.h).
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (at.lid == 0) ids[N_CTX + pos % ID_RING] = ids[0];
}
