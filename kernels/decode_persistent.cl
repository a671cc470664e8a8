// One decode token in ONE launch: a persistent kernel whose work-groups stay
// resident for the whole token and meet at grid-wide barriers between the
// stages that depend on each other's results. On NVIDIA's OpenCL each launch
// costs ~3 us of host time and the GPU runs dependent tiny kernels at about
// that pace, so replacing ~150 launches by one is the point; a grid barrier
// costs ~1.5 us.
//
// Stages (each followed by a grid barrier), per layer il:
//   P1  x' = rmsnorm(x) * attn_norm; [q; k; v] = Wqkv x'; RoPE; k, v -> cache
//   P2  attention of each head over cache positions 0..pos -> att (long
//       contexts: a head's positions split over work-groups, the last of
//       them to finish merges the partials)
//   P3  x += Wo att
//   P4  x' = rmsnorm(x) * ffn_norm; h = silu(Wg x') * (Wu x')
//   P5  x += Wd h
// then the head: x' = rmsnorm(x) * output_norm; logits = Whead x' with each
// work-group's argmax candidate; the last work-group to arrive picks the
// token (NaN never wins, ties go to the lowest id) and writes ids[0].
// The embedding row is dequantized by every work-group straight into local
// memory at the start (work-group 0 also stores it as x).
//
// Work split: a warp (32 work-items, PTX shuffles) computes one matrix row at
// a time, its lanes taking every 32nd block; rows are spread over all warps of
// the grid. Activations that a stage reads whole (x, att, h) are first staged
// into local memory with volatile loads, which bypass the non-coherent L1
// (other work-groups wrote them during this launch).
//
// Weights live in one arena buffer; `layer_off` holds byte offsets per layer
// (LO_* in kernels/persistent_layout.cl, built before this file). Types are
// compile-time: WT_QKV, WT_WO, WT_FFN (gate and up), WT_DOWN, WT_HEAD,
// WT_EMBD (GGML type ids 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0); layouts are
// the repacked ones of engine/cl/weights.h.
//
// The barrier counts arrivals on a counter that only the host resets: barrier
// k of this launch waits until counter - (bar_base + k * n_groups) >= 0 in
// wrapping 32-bit arithmetic. A work-group that waits too long (work-groups
// not all resident) sets *abort_flag and stops waiting; the host then falls
// back to the multi-kernel path. Requires NVIDIA (inline PTX); the host enables this
// path only after the kernel's own self-test (token_index < 0) passes.

#ifndef PWG
#define PWG 256
#endif
#define WARPS (PWG / 32)
// A barrier wait gives up after this long (GPU clock, ns).
#ifndef SPIN_NS
#define SPIN_NS 100000000ul
#endif

// Layer offsets (LO_*), N_EMBD_KV and N_QKV: kernels/persistent_layout.cl.
#define LOCAL_X (N_FF > N_EMBD ? N_FF : N_EMBD)
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
#ifndef ATT_SPLIT_SPAN
#define ATT_SPLIT_SPAN (ATT_SPLIT_POS < 64 ? ATT_SPLIT_POS : 64)
#endif
// Attention (P2): a warp per position at a time, lane l holding AW_D of the
// dimensions (HEAD_DIM a power of two, 32 to 256); the warps'
// partials meet in att_acc, a row of AW_STRIDE floats per warp, where
// work-item (d, p) of ATT_PARTS per dimension adds every ATT_PARTS-th warp
// (the stride's padding puts those loads in distinct banks).
#define AW_D (HEAD_DIM / 32)
// ATT_DIM_STRIDE: 1, lane l holds dimensions l, l + 32, ... (each load
// instruction of a warp reads 128 contiguous bytes); 0 (A/B), l * AW_D ..
// + AW_D - 1. H200, 1 against 0: tg128 2,434-2,445 vs 2,425-2,429, @d512
// 2,086-2,099 vs 2,072-2,086, @d2048 1,798 vs 1,754.
#ifndef ATT_DIM_STRIDE
#define ATT_DIM_STRIDE 1
#endif
#define AW_LANE(lane) ((lane) * (ATT_DIM_STRIDE ? 1 : AW_D))
#define AW_STEP (ATT_DIM_STRIDE ? 32 : 1)
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

// ---- warp primitives (PTX) --------------------------------------------------

inline float shfl_bfly(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}
inline float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += shfl_bfly(v, m);
  return v;
}
inline float warp_max(float v) {
  for (int m = 16; m > 0; m >>= 1) v = fmax(v, shfl_bfly(v, m));
  return v;
}
// fence.acq_rel.gpu orders this thread's (and, through a work-group barrier,
// its work-group's) memory operations where a count publishes data (the
// attention splits, the final argmax). The grid barrier's wait needs no
// fence: it polls with acquire loads (GRID_FENCE=2, the default). For A/B
// runs, GRID_FENCE=1 polls with volatile loads and then fences (acq_rel);
// GRID_FENCE=0 builds the stronger membar.gl (fence.sc.gpu) of earlier
// versions. H200, Q4_0 tg128: 2,096-2,106 tok/s with 2, 1,948-1,954 with 1
// (and in an earlier session 1,850 with 1 and the release add below, 1,810
// with membar.gl and a fenced atomic).
#ifndef GRID_FENCE
#define GRID_FENCE 2
#endif
#if GRID_FENCE
inline void fence_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
#else
inline void fence_gpu(void) { asm volatile("membar.gl;" ::: "memory"); }
#endif
inline ulong global_timer_ns(void) {
  ulong t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Non-blocking: asks for the 128-byte line at p to be brought into L2.
inline void prefetch_l2(const __global void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// ---- grid barrier -------------------------------------------------------------

// In two halves, so that a work-group can issue loads that do not depend on
// the other work-groups (the next stage's weights) after it has arrived and
// before it waits: issued before the arrival, they would hold up thread 0's
// release (which waits for the thread's outstanding loads).
// The arrival is a work-group barrier (ordering only local memory: the
// release below covers the work-group's global writes that precede it) and
// one `red.release.gpu` add by work-item 0: no fence of its own and no
// returned value to wait for. The wait polls the counter, then acquires.
// For A/B runs: GRID_RED=0 arrives with a fence and atomic_inc as before,
// GRID_BAR_FLAGS=(CLK_LOCAL_MEM_FENCE|CLK_GLOBAL_MEM_FENCE) the old barriers.
#ifndef GRID_RED
#define GRID_RED 1
#endif
#ifndef GRID_BAR_FLAGS
#define GRID_BAR_FLAGS CLK_LOCAL_MEM_FENCE
#endif
inline void grid_arrive(volatile __global uint* counter) {
  barrier(GRID_BAR_FLAGS);
  if (get_local_id(0) == 0) {
#if GRID_RED
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
#else
    fence_gpu();
    atomic_inc(counter);
#endif
  }
}
// The barrier's poll: an acquire load (GRID_FENCE=2), or a volatile one
// that the wait follows with a fence.
inline uint grid_poll(volatile __global uint* counter) {
#if GRID_FENCE == 2
  uint v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
#else
  return *counter;
#endif
}
// The poll loop reads the abort flag and the clock every 256 spins only: a
// read of the flag in every spin doubled the spin's time, and with it the
// delay between the last arrival and its detection. (ABORT_EVERY_SPIN=1 for
// A/B runs.)
#ifndef ABORT_EVERY_SPIN
#define ABORT_EVERY_SPIN 0
#endif
inline void grid_wait(volatile __global uint* counter, uint target,
                      volatile __global uint* abort_flag) {
  if (get_local_id(0) == 0) {
    uint spins = 0;
    ulong start = 0;
    while ((int)(grid_poll(counter) - target) < 0) {
#if ABORT_EVERY_SPIN
      if (*abort_flag) break;
#endif
      if ((++spins & 255) == 0) {  // the abort flag and the clock now and then
#if !ABORT_EVERY_SPIN
        if (*abort_flag) break;
#endif
        const ulong now = global_timer_ns();
        if (start == 0) {
          start = now;
        } else if (now - start > SPIN_NS) {
          *abort_flag = 1;
          break;
        }
      }
    }
#if GRID_FENCE != 2
    fence_gpu();
#endif
  }
  barrier(GRID_BAR_FLAGS);
}
inline void grid_sync(volatile __global uint* counter, uint target,
                      volatile __global uint* abort_flag) {
  grid_arrive(counter);
  grid_wait(counter, target, abort_flag);
}

// "The last to arrive": a work-group's global writes so far are released
// (work-group barrier, then one add by work-item 0) and the work-group that
// finds the count at `last` acquires everyone's: returns true in all of its
// work-items. Used where a count, not a grid barrier, decides who goes on
// (the attention splits' merge, the final argmax). `flag`: local scratch.
// LAST_ATOM=1: one atom.acq_rel.gpu add; 0 (A/B): fence, atomic_inc, fence
// (H200 tg128 @d512, where heads split: 1,843-1,850 tok/s against
// 1,815-1,828).
#ifndef LAST_ATOM
#define LAST_ATOM 1
#endif
inline bool arrive_last(volatile __global uint* count, uint last, __local int* flag) {
#if LAST_ATOM
  barrier(CLK_LOCAL_MEM_FENCE);
  if (get_local_id(0) == 0) {
    uint old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(old)
                 : "l"(count)
                 : "memory");
    *flag = old == last;
  }
#else
  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
  if (get_local_id(0) == 0) {
    fence_gpu();
    const bool is_last = atomic_inc(count) == last;
    if (is_last) fence_gpu();
    *flag = is_last;
  }
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  return *flag;
}

// ---- weights ------------------------------------------------------------------

// sum_j code_j * x_j and sum_j x_j over one block of 32 (x in local memory);
// byte k of the 16 holds value k (low nibble) and value k + 16 (high nibble).
inline float2 nibble_dot_local(uint4 q, const __local float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.0f, xs = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 xl = vload4(i, x);
    const float4 xh = vload4(i + 4, x);
    const uint v = w[i];
    acc += (float)(v & 15) * xl.x + (float)((v >> 8) & 15) * xl.y +
           (float)((v >> 16) & 15) * xl.z + (float)((v >> 24) & 15) * xl.w;
    acc += (float)((v >> 4) & 15) * xh.x + (float)((v >> 12) & 15) * xh.y +
           (float)((v >> 20) & 15) * xh.z + (float)(v >> 28) * xh.w;
    xs += xl.x + xl.y + xl.z + xl.w + xh.x + xh.y + xh.z + xh.w;
  }
  return (float2)(acc, xs);
}

// Q8_0 (the lm_head here): each signed byte s becomes a float without a
// conversion instruction (I2F runs at 1/8 of the FMA rate, and the lm_head's
// 49152 x 576 bytes made it the bound): the byte, offset to s + 128 by
// flipping its top bit, is placed under the exponent of 2^23 by one PRMT,
// and 2^23 + 128 is subtracted (exact). H200: lm_head 33.9 -> 27.5 us,
// tg128 1,885 vs 1,855 (Q4_0), 1,883 vs 1,857 (Q4_1). INT8_PRMT=0: I2F.
#ifndef INT8_PRMT
#define INT8_PRMT 1
#endif
#if INT8_PRMT
inline float int8_word_dot(uint w, float4 x) {
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
inline float int8_dot_local(uint4 q, const __local float* x) {
  return int8_word_dot(q.x, vload4(0, x)) + int8_word_dot(q.y, vload4(1, x)) +
         int8_word_dot(q.z, vload4(2, x)) + int8_word_dot(q.w, vload4(3, x));
}
#else
inline float int8_dot_local(uint4 q, const __local float* x) {
  const char16 c = as_char16(q);
  const float16 p = convert_float16(c) * vload16(0, x);
  const float8 p8 = p.lo + p.hi;
  const float4 p4 = p8.lo + p8.hi;
  return p4.x + p4.y + p4.z + p4.w;
}
#endif
// A Q8_0 block's 32 bytes (lo: values 0-15, hi: 16-31) dotted with x.
inline float q8_block_dot(uint4 lo, uint4 hi, const __local float* x) {
  return int8_dot_local(lo, x) + int8_dot_local(hi, x + 16);
}

// This lane's share of dot(W[row], x) for a row of n_in values of type T;
// `wq`/`ws` point at the matrix's payloads and scales in the arena.
inline float row_dot_t0(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        const __local float* x, int lane) {
  const __global float* w = (const __global float*)wq + (size_t)row * n_in;
  float s = 0.0f;
  for (int i = lane; i < n_in / 4; i += 32) s += dot(vload4(i, w), vload4(0, x + XP(4 * i)));
  return s;
}
inline float row_dot_t1(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        const __local float* x, int lane) {
  const __global half* w = (const __global half*)wq + (size_t)row * n_in;
  float s = 0.0f;
  for (int i = lane; i < n_in / 4; i += 32) s += dot(vload_half4(i, w), vload4(0, x + XP(4 * i)));
  return s;
}
inline float row_dot_t2(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
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
inline float row_dot_t3(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
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
inline float row_dot_t8(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
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
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ROW_DOT(T) CAT(row_dot_t, T)

// ---- a row's weights in registers -----------------------------------------------

// Every stage gives a warp at most a row or two of each matrix, so the warp's
// first row(s) of the next stage are loaded into registers between its
// work-group's arrival at the barrier and its wait there; after the barrier
// only the activations are waited for. Lane `lane` holds blocks lane,
// lane + 32, ... of the row: at most RB blocks (Q8_0 blocks take two uint4);
// F32 and F16 rows are not held (their dot reads the row).
#define RB ((LOCAL_X / 32 + 31) / 32)
#define ROW_LOAD(T) CAT(row_load_t, T)
#define ROW_DOT_REGS(T) CAT(row_dot_regs_t, T)

inline void row_load_t0(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        int lane, uint4* q, float2* s) {}
inline void row_load_t1(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        int lane, uint4* q, float2* s) {}
inline float row_dot_regs_t0(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const uint4* q, const float2* s) {
  return row_dot_t0(wq, ws, n_in, row, x, lane);
}
inline float row_dot_regs_t1(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const uint4* q, const float2* s) {
  return row_dot_t1(wq, ws, n_in, row, x, lane);
}

// Blocks of 16 * `chunks` bytes (Q4_0 2, Q4_1 3: 1; Q8_0 8: 2) and each
// block's (scale, min): Q4_0's min is -8 * scale, Q8_0's is unused.
inline void row_load_blocks(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                            int lane, uint4* q, float2* s, int chunks, int type) {
  const int nb = n_in / 32;
  const size_t base = (size_t)row * nb;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < nb) {
#pragma unroll
      for (int c = 0; c < chunks; ++c) {
        q[chunks * k + c] = ((const __global uint4*)wq)[chunks * (base + b) + c];
      }
      if (type == 3) {
        s[k] = vload_half2(base + b, (const __global half*)ws);
      } else {
        const float d = vload_half(base + b, (const __global half*)ws);
        s[k] = (float2)(d, -8.0f * d);
      }
    }
  }
}
inline void row_load_t2(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        int lane, uint4* q, float2* s) {
  row_load_blocks(wq, ws, n_in, row, lane, q, s, 1, 2);
}
inline void row_load_t3(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        int lane, uint4* q, float2* s) {
  row_load_blocks(wq, ws, n_in, row, lane, q, s, 1, 3);
}
inline void row_load_t8(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                        int lane, uint4* q, float2* s) {
  row_load_blocks(wq, ws, n_in, row, lane, q, s, 2, 8);
}
// Q4_0 (2), Q4_1 (3): d * sum(code * x) + m * sum(x) (Q4_0's m is -8 d).
inline float row_dot_regs_nibbles(int n_in, const __local float* x, int lane, const uint4* q,
                                  const float2* s) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      const float2 r = nibble_dot_local(q[k], x + b * XS);
      acc += s[k].x * r.x + s[k].y * r.y;
    }
  }
  return acc;
}
inline float row_dot_regs_t2(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const uint4* q, const float2* s) {
  return row_dot_regs_nibbles(n_in, x, lane, q, s);
}
inline float row_dot_regs_t3(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const uint4* q, const float2* s) {
  return row_dot_regs_nibbles(n_in, x, lane, q, s);
}
// Q8_0 (8): int8.
inline float row_dot_regs_t8(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                             const __local float* x, int lane, const uint4* q, const float2* s) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < RB; ++k) {
    const int b = lane + 32 * k;
    if (b < n_in / 32) {
      acc += s[k].x * q8_block_dot(q[2 * k], q[2 * k + 1], x + b * XS);
    }
  }
  return acc;
}

// Bytes of one row's payloads and scales in the repacked layout.
#define ROW_Q_BYTES(T, n) \
  ((T) == 0 ? (n) * 4 : (T) == 1 ? (n) * 2 : (T) == 8 ? (n) : (n) / 2)
#define ROW_S_BYTES(T, n) ((T) == 0 || (T) == 1 ? 0 : (T) == 3 ? (n) / 8 : (n) / 16)

// The lanes of a warp prefetch rows [row, row + 1) of a matrix into L2.
inline void prefetch_row(const __global uchar* wq, const __global uchar* ws, size_t q_bytes,
                         size_t s_bytes, int row, int lane) {
  for (size_t o = (size_t)lane * 128; o < q_bytes; o += 32 * 128) {
    prefetch_l2(wq + (size_t)row * q_bytes + o);
  }
  if (s_bytes && lane == 31) prefetch_l2(ws + (size_t)row * s_bytes);
}
// The rows of a matrix go to warps pf_w, pf_w + pf_n, ... (set by
// LAYER_PREFETCH in decode_token, the only user).
#define PREFETCH_ROWS(T, q_off, s_off, n_in, n_rows)                                            \
  for (int r = pf_w; r < (n_rows); r += pf_n)                                                   \
  prefetch_row(arena + (q_off), arena + (s_off), ROW_Q_BYTES(T, n_in), ROW_S_BYTES(T, n_in), r, \
               lane)

// The lm_head's rows (49152 x 576 Q8_0 here: 28 MB, a third of a token's
// weights) are prefetched into L2 in shares in the last HEAD_PF_LAYERS
// layers, with the layers' prefetches (LAYER_PREFETCH). (A/B knob; H200
// tg128 against 1, all in the last layer: +0.5% at depth 0, +0.9% at 512;
// 2 and 8 gained less, 8 again with the idle work-groups prefetching: no
// change.)
#ifndef HEAD_PF_LAYERS
#define HEAD_PF_LAYERS 4
#endif

// SKELETON (a measurement knob, results are wrong): 1 = no weight loads,
// prefetches or dot products, while every stage keeps its input staging,
// reductions, stores and grid barriers; 2 = attention skipped as well. The
// time per token is then the floor of this stage structure (the host keeps
// such a kernel without checking its first token).
#ifndef SKELETON
#define SKELETON 0
#endif
#if SKELETON
inline void row_load_none(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                          int lane, uint4* q, float2* s) {}
inline float row_dot_regs_none(const __global uchar* wq, const __global uchar* ws, int n_in,
                               int row, const __local float* x, int lane, const uint4* q,
                               const float2* s) {
  return 0.0f;
}
inline float row_dot_none(const __global uchar* wq, const __global uchar* ws, int n_in, int row,
                          const __local float* x, int lane) {
  return 0.0f;
}
#undef ROW_LOAD
#undef ROW_DOT_REGS
#undef ROW_DOT
#undef PREFETCH_ROWS
#define ROW_LOAD(T) row_load_none
#define ROW_DOT_REGS(T) row_dot_regs_none
#define ROW_DOT(T) row_dot_none
#define PREFETCH_ROWS(T, q_off, s_off, n_in, n_rows)
#endif

// ---- work-group helpers -------------------------------------------------------

// xl[i] = src[i] for i < n into the padded layout (XP); volatile: written by
// other work-groups. 16-byte loads: one or two per work-item instead of 3-6
// scalar ones in a row (n % 4 == 0; groups of 4 never straddle a padded block).
inline void stage_padded(__local float* xl, volatile const __global float* src, int n) {
  for (int i = get_local_id(0); i < n / 4; i += PWG) {
    vstore4(((volatile const __global float4*)src)[i], 0, xl + XP(4 * i));
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// The norm weights a work-item applies in stage_norm: float4 number
// lid + k * PWG of g for k < NORM_MAX. Loaded before the barrier wait that
// precedes the norm (EARLY_LOADS), they are off its critical path.
#define NORM_MAX ((N_EMBD / 4 + PWG - 1) / PWG)
inline void load_norm(float4* gw, const __global float* g) {
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = get_local_id(0) + k * PWG;
    if (i < N_EMBD / 4) gw[k] = vload4(i, g);
  }
}

// RMSNorm folded into the staging: xl = src * g over N_EMBD values (padded
// layout; src null: xl in place; g from load_norm) and the return value is
// 1 / rms(src), which the caller applies to each row's dot product
// (dot(W, x * g) * scale), so one local barrier suffices.
inline float stage_norm(__local float* xl, volatile const __global float* src, const float4* gw,
                        __local float* red) {
  const int lid = get_local_id(0);
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < NORM_MAX; ++k) {
    const int i = lid + k * PWG;
    if (i < N_EMBD / 4) {
      const float4 v = src ? ((volatile const __global float4*)src)[i] : vload4(0, xl + XP(4 * i));
      ss += dot(v, v);
      vstore4(v * gw[k], 0, xl + XP(4 * i));
    }
  }
  ss = warp_sum(ss);
  if (lid % 32 == 0) red[lid / 32] = ss;
  barrier(CLK_LOCAL_MEM_FENCE);
  float total = 0.0f;
  for (int w = 0; w < WARPS; ++w) total += red[w];
  return rsqrt(total / N_EMBD + RMS_EPS);
}

// The work-group's best (value, id) from each work-item's candidate: by
// shuffles within each warp, then over the warps; returned to work-item 0
// (its value in red_v[0]). Order-free: beats() breaks ties by the lower id.
inline int workgroup_argmax(float best, int best_i, __local float* red_v, __local int* red_i) {
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

// One round of the warp-per-position attention (P2): this warp's
// positions p0, p0 + WARPS, ... (nb of them, those before s_end), their K
// and V rows loaded at once, folded into the warp's online softmax (*m, *l,
// acc). Lane l holds dimensions AW_LANE(l) + AW_STEP * d, d < AW_D, of q, K,
// V and acc; row0 includes AW_LANE(l).
inline void att_warp_round(const __global float* k_cache, const __global float* v_cache,
                           size_t row0, int p0, int s_end, const int nb, const float* qv,
                           float* acc, float* m, float* l) {
  float kr[ATT_LONG_ROUND][AW_D], vr[ATT_LONG_ROUND][AW_D], sc[ATT_LONG_ROUND];
#pragma unroll
  for (int i = 0; i < nb; ++i) {
    const int p = p0 + WARPS * i;
#pragma unroll
    for (int d = 0; d < AW_D; ++d) {
      kr[i][d] = vr[i][d] = 0.0f;
      if (p < s_end) {
        kr[i][d] = k_cache[row0 + (size_t)p * N_EMBD_KV + AW_STEP * d];
        vr[i][d] = v_cache[row0 + (size_t)p * N_EMBD_KV + AW_STEP * d];
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

// ---- the token ----------------------------------------------------------------

__kernel __attribute__((reqd_work_group_size(PWG, 1, 1))) void decode_token(
    const __global uchar* arena, const __global ulong* layer_off, ulong embd_q, ulong embd_s,
    ulong head_q, ulong head_s, ulong out_norm, const __global float2* rope_cs,
    __global float* k_cache, __global float* v_cache, __global float* x, __global float* q,
    __global float* att, __global float* h, __global float* logits, __global float* part_val,
    __global int* part_idx, __global int* ids, int token_index, int pos,
    volatile __global uint* bar, uint bar_base, volatile __global uint* abort_flag,
    __global ulong* trace, __global float* att_part, volatile __global uint* att_count) {
  __local float xl[LOCAL_XP];
  __local float red[WARPS];
  __local float att_acc[WARPS * AW_STRIDE];
  __local float aw_m[WARPS], aw_l[WARPS];
  __local float red_v[WARPS];  // the head's argmax (red is stage_norm's)
  __local int red_i[WARPS];
  __local float sp_m[ATT_SPLIT_MAX], sp_l[ATT_SPLIT_MAX];
  __local int merge_here;

  const int lid = get_local_id(0);
  const int lane = lid % 32;
  const int warp = lid / 32;
  const int group = get_group_id(0);
  const int n_groups = get_num_groups(0);
  // Warp index in the grid, interleaved: consecutive rows go to different
  // work-groups, so a stage with fewer rows than warps busies every SM a
  // little instead of some SMs fully (H200: +5% against group-major).
  // WARP_ROT: warp w takes slot w - WARP_ROT (mod WARPS) in every stage's
  // rows and prefetches. With 1, warp 0, whose work-item 0 polls the
  // barriers, takes the last slot: rows only where a stage has more than
  // (WARPS - 1) * n_groups of them (here only the lm_head), so it loads no
  // next-stage rows before its polls, and the fewest prefetches (H200
  // against 0: tg128 2,458-2,459 vs 2,385-2,390, @d512 2,088-2,095 vs
  // 2,046-2,049, @d2048 1,795-1,806 vs 1,723-1,754).
#ifndef WARP_ROT
#define WARP_ROT 1
#endif
  const int slot = (warp + WARPS - WARP_ROT % WARPS) % WARPS;
  const int gwarp = slot * n_groups + group;
  const int n_gwarps = n_groups * WARPS;
  uint n_bar = 0;
  // With a trace buffer, work-group 0 records the GPU clock after each barrier
  // (CLCHAT_PERSIST_TRACE=1): per-stage times for tuning.
#define GRID_WAIT()                                                        \
  do {                                                                     \
    grid_wait(bar, bar_base + (++n_bar) * (uint)n_groups, abort_flag);     \
    if (trace && group == 0 && lid == 0) trace[n_bar] = global_timer_ns(); \
  } while (0)
#define GRID_SYNC()  \
  do {               \
    grid_arrive(bar); \
    GRID_WAIT();     \
  } while (0)
  // SKELETON with SKEL_DROP bit k set: the barrier after stage k of a layer
  // (0 Q/K/V, 1 attention, 2 Wo, 3 gate/up) is left out, the floor of a
  // design with fewer barriers; work-group 0 adds the arrivals the host
  // counts on.
#ifndef SKEL_DROP
#define SKEL_DROP 0
#endif
#define STAGE_DROPPED(k) (SKELETON && (((SKEL_DROP) >> (k)) & 1))
#define STAGE_ARRIVE(k)                  \
  do {                                   \
    if (!STAGE_DROPPED(k)) {             \
      grid_arrive(bar);                  \
    } else if (group == 0 && lid == 0) { \
      atomic_add(bar, (uint)n_groups);   \
    }                                    \
  } while (0)
#define STAGE_WAIT(k)                                                        \
  do {                                                                       \
    if (!STAGE_DROPPED(k)) {                                                 \
      GRID_WAIT();                                                           \
    } else {                                                                 \
      ++n_bar;                                                               \
      if (trace && group == 0 && lid == 0) trace[n_bar] = global_timer_ns(); \
    }                                                                        \
  } while (0)
  // This warp's first row(s) of the next stage (ROW_LOAD): row a, row b.
  uint4 qa[2 * RB], qb[2 * RB];
  float2 sa[RB], sb[RB];
  // Rows 2 * pair and 2 * pair + 1 of the Q/K/V matrix at offsets lo_.
#define LOAD_QKV_PAIR(lo_, pair)                                                                \
  do {                                                                                         \
    ROW_LOAD(WT_QKV)(arena + (lo_)[LO_QKV_Q], arena + (lo_)[LO_QKV_S], N_EMBD, 2 * (pair), lane, \
                     qa, sa);                                                                  \
    ROW_LOAD(WT_QKV)(arena + (lo_)[LO_QKV_Q], arena + (lo_)[LO_QKV_S], N_EMBD, 2 * (pair) + 1,  \
                     lane, qb, sb);                                                            \
  } while (0)
  if (trace && group == 0 && lid == 0) trace[0] = global_timer_ns();

    // Layer il + PF_AHEAD's Wo, gate, up and down rows and the next layer's
    // Q/K/V rows, prefetched into L2 by warps first_, first_ + stride_, ...
    // (rows by warp; the head's rows a share in each of the last
    // HEAD_PF_LAYERS layers). L2_PF 2: by the work-groups that have no
    // attention unit, at the start of P2, where at least 1 / PF_IDLE_DIV of
    // the work-groups are idle there, else as 1. 1: by every warp between its
    // work-group's arrival at P1's barrier and its wait, which delayed P1's
    // barrier (H200 against 1: tg128 2,417-2,421 vs 2,323-2,336 (1/2), @d512
    // 2,056-2,089 vs 1,959-1,980 (1/4; with 1/2 a d512 token has too few idle
    // work-groups); with 1/32, d2048's 6 idle work-groups prefetching
    // everything: 1,381 vs 1,723-1,754). 0: none (A/B: slower, 2,302-2,320).
#ifndef L2_PF
#define L2_PF 2
#endif
// PF_AHEAD: the layer stages' rows are prefetched that many layers ahead
// (layer 0 also prefetches its own). H200, 1 against 0: tg128 2,453-2,459
// vs 2,433-2,437, @d512 2,100-2,115 vs 2,077-2,079, @d2048 1,820 vs 1,784.
#ifndef PF_AHEAD
#define PF_AHEAD 1
#endif
#ifndef PF_IDLE_DIV
#define PF_IDLE_DIV 4
#endif
#define LAYER_PREFETCH(first_, stride_)                                                       \
  do {                                                                                        \
    const int pf_w = (first_), pf_n = (stride_);                                              \
    for (int lp = il + (il == 0 ? 0 : PF_AHEAD); lp <= il + PF_AHEAD && lp < N_LAYER; ++lp) { \
      const __global ulong* lq = layer_off + lp * LO_N;                                       \
      (void)lq; /* unused in SKELETON builds */                                               \
      PREFETCH_ROWS(WT_WO, lq[LO_WO_Q], lq[LO_WO_S], N_EMBD, N_EMBD);                         \
      PREFETCH_ROWS(WT_FFN, lq[LO_GATE_Q], lq[LO_GATE_S], N_EMBD, N_FF);                      \
      PREFETCH_ROWS(WT_FFN, lq[LO_UP_Q], lq[LO_UP_S], N_EMBD, N_FF);                          \
      PREFETCH_ROWS(WT_DOWN, lq[LO_DOWN_Q], lq[LO_DOWN_S], N_FF, N_EMBD);                     \
      if (lp + 1 < N_LAYER) {                                                                 \
        PREFETCH_ROWS(WT_QKV, lq[LO_N + LO_QKV_Q], lq[LO_N + LO_QKV_S], N_EMBD, N_QKV);       \
      }                                                                                       \
    }                                                                                         \
    if (!SKELETON && il >= N_LAYER - HEAD_PF_LAYERS) {                                        \
      const int j = il - (N_LAYER - HEAD_PF_LAYERS);                                          \
      const int r_end = (int)((long)(j + 1) * N_VOCAB / HEAD_PF_LAYERS);                      \
      for (int r = (int)((long)j * N_VOCAB / HEAD_PF_LAYERS) + pf_w; r < r_end; r += pf_n) {  \
        prefetch_row(arena + head_q, arena + head_s, ROW_Q_BYTES(WT_HEAD, N_EMBD),            \
                     ROW_S_BYTES(WT_HEAD, N_EMBD), r, lane);                                  \
      }                                                                                       \
    }                                                                                         \
  } while (0)

  // token_index < 0: the start-up self-test, run by this kernel itself so
  // that residency is judged with its own registers and local memory.
  // -token_index barriers; before each, work-group g writes a word of
  // part_idx (2 x n_groups of them) and after it checks a neighbour's;
  // mismatches are counted in ids[0].
  if (token_index < 0) {
    for (int r = 0; r < -token_index; ++r) {
      volatile __global int* data = (volatile __global int*)part_idx + (r & 1) * n_groups;
      if (lid == 0) data[group] = r * n_groups + group;
      GRID_SYNC();
      const int other = (group + 1 + r) % n_groups;
      if (lid == 0 && data[other] != r * n_groups + other) atomic_inc(ids);
    }
    return;
  }

  // Embedding row of ids[token_index] into local memory (and x, by group 0).
  const int token = ids[token_index];
  for (int i = lid; i < N_EMBD; i += PWG) {
    const float v = embd_value(arena + embd_q, arena + embd_s, token, i);
    xl[XP(i)] = v;
    if (group == 0) x[i] = v;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  if (gwarp < N_QKV / 2) LOAD_QKV_PAIR(layer_off, gwarp);
  // Loads that do not depend on other work-groups go out before the barrier
  // wait that precedes their use: the norm weights (gw) and the RoPE
  // cos/sin of this warp's first q/k pair (the same in every layer).
  // EARLY_LOADS=0 (A/B): after the wait, as before. (H200, Q4_0 tg128:
  // 1,964-1,970 tok/s against 1,881-1,887; P1 121 -> 107 us and P4 112 ->
  // 100 us per token.)
#ifndef EARLY_LOADS
#define EARLY_LOADS 1
#endif
  float4 gw[NORM_MAX];
#define PAIR_ROTATES(r0) \
  ((r0) < N_EMBD + N_EMBD_KV && ((r0) < N_EMBD ? (r0) : (r0)-N_EMBD) % HEAD_DIM < N_ROT)
#define PAIR_CS(r0)                                                                    \
  (lane == 0 && PAIR_ROTATES(r0)                                                       \
       ? rope_cs[pos * (N_ROT / 2) + ((r0) < N_EMBD ? (r0) : (r0)-N_EMBD) % HEAD_DIM / 2] \
       : (float2)(0.0f))
#if EARLY_LOADS
  load_norm(gw, (const __global float*)(arena + layer_off[LO_ATTN_NORM]));
  const float2 cs_first = gwarp < N_QKV / 2 ? PAIR_CS(2 * gwarp) : (float2)(0.0f);
#endif
  const int n_pos = pos + 1;
  const int split_cap = clamp(n_groups / N_HEAD, 1, ATT_SPLIT_MAX);
  const int n_split = n_pos <= ATT_SPLIT_POS
                          ? 1
                          : clamp((n_pos + ATT_SPLIT_SPAN - 1) / ATT_SPLIT_SPAN, 1, split_cap);
  const int n_units = N_HEAD * n_split;
#if L2_PF == 2
  const bool pf_idle = n_groups > n_units && n_groups - n_units >= n_groups / PF_IDLE_DIV;
#endif
  for (int il = 0; il < N_LAYER; ++il) {
    const __global ulong* lo = layer_off + il * LO_N;
    const size_t cache_base = ((size_t)il * N_CTX) * N_EMBD_KV;

    // P1: norm, q/k/v rows in pairs, RoPE, KV append.
#if !EARLY_LOADS
    load_norm(gw, (const __global float*)(arena + lo[LO_ATTN_NORM]));
    const float2 cs_first = gwarp < N_QKV / 2 ? PAIR_CS(2 * gwarp) : (float2)(0.0f);
#endif
    float scale = stage_norm(xl, il > 0 ? x : 0, gw, red);
    for (int pair = gwarp; pair < N_QKV / 2; pair += n_gwarps) {
      const int r0 = 2 * pair;
      const bool rotate = PAIR_ROTATES(r0);
      // The rotation's cos/sin load goes out with the rows' loads.
      const float2 cs = pair == gwarp ? cs_first : PAIR_CS(r0);
      if (pair != gwarp) LOAD_QKV_PAIR(lo, pair);
      // Both rows' loads are issued before the shuffles (asm) of either sum.
      float a = ROW_DOT_REGS(WT_QKV)(arena + lo[LO_QKV_Q], arena + lo[LO_QKV_S], N_EMBD, r0, xl,
                                     lane, qa, sa);
      float b = ROW_DOT_REGS(WT_QKV)(arena + lo[LO_QKV_Q], arena + lo[LO_QKV_S], N_EMBD, r0 + 1, xl,
                                     lane, qb, sb);
      a = warp_sum(a) * scale;
      b = warp_sum(b) * scale;
      if (lane == 0) {
        if (rotate) {
          const float ra = a * cs.x - b * cs.y;
          b = a * cs.y + b * cs.x;
          a = ra;
        }
        __global float* dst;
        if (r0 < N_EMBD) {
          dst = q + r0;
        } else if (r0 < N_EMBD + N_EMBD_KV) {
          dst = k_cache + cache_base + (size_t)pos * N_EMBD_KV + (r0 - N_EMBD);
        } else {
          dst = v_cache + cache_base + (size_t)pos * N_EMBD_KV + (r0 - N_EMBD - N_EMBD_KV);
        }
        dst[0] = a;
        dst[1] = b;
      }
    }
    STAGE_ARRIVE(0);
#if L2_PF == 1
    LAYER_PREFETCH(gwarp, n_gwarps);
#elif L2_PF == 2
    if (!pf_idle) LAYER_PREFETCH(gwarp, n_gwarps);
#endif
    STAGE_WAIT(0);

    // P2: attention. A unit is (head, split): a work-group per unit. Warp w
    // takes the unit's positions s_begin + w, + WARPS, ... in rounds of 4 or
    // 8 (att_warp_round: their K and V rows loaded at once), lane l
    // dimensions l, l + 32, ..., so K and V rows are read whole by a warp
    // (coalesced) and a score is a warp sum; each warp keeps its own
    // online softmax (max m, sum l, unnormalised sum of V) in registers. One
    // local barrier then merges the warps: work-item (d, p) rescales the
    // AW_D warps p, p + ATT_PARTS, ... of dimension d to the work-group's
    // max, and the ATT_PARTS adjacent lanes meet by shuffles. (H200 against
    // groups of 16 work-items per position with chunk-wide softmax passes
    // in local memory, three local barriers: tg128 2,289-2,301 vs
    // 2,228-2,246 tok/s, d512 1,966-1,975 vs 1,915-1,930.) One split: the
    // result goes straight to att; more: partials to att_part, which the
    // head's last split to finish merges into att.
#if L2_PF == 2
    if (pf_idle && group >= n_units) {
      LAYER_PREFETCH(slot * (n_groups - n_units) + group - n_units, WARPS * (n_groups - n_units));
    }
#endif
    for (int unit = group; SKELETON < 2 && unit < n_units; unit += n_groups) {
      const int hd = unit / n_split, sp = unit % n_split;
      const int kvh = hd / (N_HEAD / N_HEAD_KV);
      const int s_span = (n_pos + n_split - 1) / n_split;
      const int s_begin = sp * s_span, s_end = min(n_pos, s_begin + s_span);
      const size_t row0 = cache_base + kvh * HEAD_DIM + AW_LANE(lane);
      volatile const __global float* qh = q + hd * HEAD_DIM + AW_LANE(lane);
      float qv[AW_D], acc[AW_D];
#pragma unroll
      for (int d = 0; d < AW_D; ++d) {
        qv[d] = qh[AW_STEP * d] * rsqrt((float)HEAD_DIM);
        acc[d] = 0.0f;
      }
      float m = -1e30f, l = 0.0f;
      // Rounds of 8 positions per warp (ATT_LONG_ROUND) where the unit
      // gives a warp more than 4, else of 4 (H200, against 4 always: tg128
      // 2,316-2,320 vs 2,289-2,301 tok/s; at d512, where a split is 64
      // positions, 8 always lost: 1,937-1,953 vs 1,966-1,975).
      if (s_end - s_begin > 4 * WARPS) {
        for (int p0 = s_begin + warp; p0 < s_end; p0 += ATT_LONG_ROUND * WARPS) {
          att_warp_round(k_cache, v_cache, row0, p0, s_end, ATT_LONG_ROUND, qv, acc, &m, &l);
        }
      } else {
        for (int p0 = s_begin + warp; p0 < s_end; p0 += 4 * WARPS) {
          att_warp_round(k_cache, v_cache, row0, p0, s_end, 4, qv, acc, &m, &l);
        }
      }
#pragma unroll
      for (int d = 0; d < AW_D; ++d)
        att_acc[warp * AW_STRIDE + AW_LANE(lane) + AW_STEP * d] = acc[d];
      if (lane == 0) {
        aw_m[warp] = m;
        aw_l[warp] = l;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      {
        float mm = -1e30f;
        for (int w = 0; w < WARPS; ++w) mm = fmax(mm, aw_m[w]);
        const int d = lid / ATT_PARTS, pt = lid % ATT_PARTS;
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int j = 0; j < AW_D; ++j) {
          const int w = pt + j * ATT_PARTS;
          const float f = exp(aw_m[w] - mm);
          num += f * att_acc[w * AW_STRIDE + d];
          den += f * aw_l[w];
        }
        for (int mask = ATT_PARTS / 2; mask > 0; mask >>= 1) {
          num += shfl_bfly(num, mask);
          den += shfl_bfly(den, mask);
        }
        if (pt == 0) {
          if (n_split == 1) {
            att[hd * HEAD_DIM + d] = num / den;
          } else {
            __global float* pp = att_part + (hd * ATT_SPLIT_MAX + sp) * ATT_PART;
            pp[d] = num;
            if (d == 0) {
              pp[HEAD_DIM] = mm;
              pp[HEAD_DIM + 1] = den;
            }
          }
        }
      }
      if (n_split > 1) {
        // Publish the partial; the head's last split merges (and resets the
        // count for the next layer, which starts after a grid barrier).
        if (arrive_last(&att_count[hd], (uint)(n_split - 1), &merge_here)) {
          if (lid == 0) atomic_xchg(&att_count[hd], 0u);
          volatile const __global float* ph = att_part + hd * ATT_SPLIT_MAX * ATT_PART;
          if (lid < n_split) {
            sp_m[lid] = ph[lid * ATT_PART + HEAD_DIM];
            sp_l[lid] = ph[lid * ATT_PART + HEAD_DIM + 1];
          }
          barrier(CLK_LOCAL_MEM_FENCE);
          float mm = -1e30f;
          for (int i = 0; i < n_split; ++i) mm = fmax(mm, sp_m[i]);
          // Work-item (d, g) sums splits g, g + G, ... of dimension d.
          const int d = lid % HEAD_DIM, g = lid / HEAD_DIM;
          if (g < PWG / HEAD_DIM) {
            float num = 0.0f;
            for (int i = g; i < n_split; i += PWG / HEAD_DIM) {
              const float f = sp_l[i] > 0.0f ? exp(sp_m[i] - mm) : 0.0f;
              num += f * ph[i * ATT_PART + d];
            }
            att_acc[g * HEAD_DIM + d] = num;
          }
          barrier(CLK_LOCAL_MEM_FENCE);
          if (lid < HEAD_DIM) {
            float den = 0.0f;
            for (int i = 0; i < n_split; ++i) {
              if (sp_l[i] > 0.0f) den += exp(sp_m[i] - mm) * sp_l[i];
            }
            float total = 0.0f;
            for (int k = 0; k < PWG / HEAD_DIM; ++k) total += att_acc[k * HEAD_DIM + lid];
            att[hd * HEAD_DIM + lid] = total / den;
          }
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    STAGE_ARRIVE(1);
    if (gwarp < N_EMBD) {
      ROW_LOAD(WT_WO)(arena + lo[LO_WO_Q], arena + lo[LO_WO_S], N_EMBD, gwarp, lane, qa, sa);
    }
    STAGE_WAIT(1);

    // P3: x += Wo att.
    stage_padded(xl, att, N_EMBD);
    for (int row = gwarp; row < N_EMBD; row += n_gwarps) {
      const float x_row = lane == 0 ? ((volatile __global float*)x)[row] : 0.0f;  // early
      if (row != gwarp) {
        ROW_LOAD(WT_WO)(arena + lo[LO_WO_Q], arena + lo[LO_WO_S], N_EMBD, row, lane, qa, sa);
      }
      const float v = warp_sum(ROW_DOT_REGS(WT_WO)(arena + lo[LO_WO_Q], arena + lo[LO_WO_S], N_EMBD,
                                                   row, xl, lane, qa, sa));
      if (lane == 0) x[row] = x_row + v;
    }
    STAGE_ARRIVE(2);
    if (gwarp < N_FF) {
      ROW_LOAD(WT_FFN)(arena + lo[LO_GATE_Q], arena + lo[LO_GATE_S], N_EMBD, gwarp, lane, qa, sa);
      ROW_LOAD(WT_FFN)(arena + lo[LO_UP_Q], arena + lo[LO_UP_S], N_EMBD, gwarp, lane, qb, sb);
    }
#if EARLY_LOADS
    load_norm(gw, (const __global float*)(arena + lo[LO_FFN_NORM]));
#endif
    STAGE_WAIT(2);

    // P4: norm, gate and up, SwiGLU.
#if !EARLY_LOADS
    load_norm(gw, (const __global float*)(arena + lo[LO_FFN_NORM]));
#endif
    scale = stage_norm(xl, x, gw, red);
    for (int row = gwarp; row < N_FF; row += n_gwarps) {
      if (row != gwarp) {
        ROW_LOAD(WT_FFN)(arena + lo[LO_GATE_Q], arena + lo[LO_GATE_S], N_EMBD, row, lane, qa, sa);
        ROW_LOAD(WT_FFN)(arena + lo[LO_UP_Q], arena + lo[LO_UP_S], N_EMBD, row, lane, qb, sb);
      }
      float g = ROW_DOT_REGS(WT_FFN)(arena + lo[LO_GATE_Q], arena + lo[LO_GATE_S], N_EMBD, row, xl,
                                     lane, qa, sa);
      float u = ROW_DOT_REGS(WT_FFN)(arena + lo[LO_UP_Q], arena + lo[LO_UP_S], N_EMBD, row, xl,
                                     lane, qb, sb);
      g = warp_sum(g) * scale;
      u = warp_sum(u) * scale;
      if (lane == 0) h[row] = g / (1.0f + exp(-g)) * u;
    }
    STAGE_ARRIVE(3);
    if (gwarp < N_EMBD) {
      ROW_LOAD(WT_DOWN)(arena + lo[LO_DOWN_Q], arena + lo[LO_DOWN_S], N_FF, gwarp, lane, qa, sa);
    }
    STAGE_WAIT(3);

    // P5: x += Wd h.
    stage_padded(xl, h, N_FF);
    for (int row = gwarp; row < N_EMBD; row += n_gwarps) {
      const float x_row = lane == 0 ? ((volatile __global float*)x)[row] : 0.0f;  // early
      if (row != gwarp) {
        ROW_LOAD(WT_DOWN)(arena + lo[LO_DOWN_Q], arena + lo[LO_DOWN_S], N_FF, row, lane, qa, sa);
      }
      const float v = warp_sum(ROW_DOT_REGS(WT_DOWN)(arena + lo[LO_DOWN_Q], arena + lo[LO_DOWN_S],
                                                     N_FF, row, xl, lane, qa, sa));
      if (lane == 0) x[row] = x_row + v;
    }
    grid_arrive(bar);
    if (il + 1 < N_LAYER && gwarp < N_QKV / 2) LOAD_QKV_PAIR(lo + LO_N, gwarp);
#if EARLY_LOADS
    load_norm(gw, (const __global float*)(arena + (il + 1 < N_LAYER ? lo[LO_N + LO_ATTN_NORM]
                                                                     : out_norm)));
#endif
    GRID_WAIT();
  }

  // Head: final norm, logits, this work-group's argmax candidate.
#if !EARLY_LOADS
  load_norm(gw, (const __global float*)(arena + out_norm));
#endif
  const float scale = stage_norm(xl, x, gw, red);
  float best = 0.0f;
  int best_i = -1;
  // Four rows per iteration so their loads overlap (eight: slower); rows
  // stay in increasing order per warp (ties keep the lower id).
  for (int row0 = gwarp; row0 < N_VOCAB; row0 += 4 * n_gwarps) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = row0 + k * n_gwarps;
      v[k] = row < N_VOCAB ? ROW_DOT(WT_HEAD)(arena + head_q, arena + head_s, N_EMBD, row, xl, lane)
                           : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = row0 + k * n_gwarps;
      const float sum = warp_sum(v[k]) * scale;
      if (lane == 0 && row < N_VOCAB) {
        logits[row] = sum;
        if (beats(sum, row, best, best_i)) {
          best = sum;
          best_i = row;
        }
      }
    }
  }
  best_i = workgroup_argmax(best, best_i, red_v, red_i);
  if (lid == 0) {
    part_val[group] = red_v[0];
    part_idx[group] = best_i;
  }
#ifndef ARGMAX_LAST
#define ARGMAX_LAST 1
#endif
#if ARGMAX_LAST
  // The last work-group to arrive takes the argmax over all work-groups'
  // candidates; the others are done (no wait at a grid barrier). Its arrival
  // counts like a barrier's, so the host's bar_base stays in step.
  // (ARGMAX_LAST=0: a grid barrier, then work-group 0. The same speed on the
  // H200; either way the final argmax is spread over the work-group: done by
  // work-item 0 alone over 264 candidates it cost 3.5%.)
  if (!arrive_last(bar, bar_base + (n_bar + 1) * (uint)n_groups - 1, &merge_here)) return;
  if (trace && lid == 0) trace[n_bar + 1] = global_timer_ns();
#else
  GRID_SYNC();
  if (group != 0) return;
#endif
  best = 0.0f;
  best_i = -1;
  for (int g = lid; g < n_groups; g += PWG) {
    const float v = ((volatile __global float*)part_val)[g];
    const int i = ((volatile __global int*)part_idx)[g];
    if (beats(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  best_i = workgroup_argmax(best, best_i, red_v, red_i);
  if (lid == 0) ids[0] = *abort_flag ? -2 : (best_i < 0 ? 0 : best_i);
#undef GRID_SYNC
#undef GRID_WAIT
#undef STAGE_ARRIVE
#undef STAGE_WAIT
#undef STAGE_DROPPED
#undef LOAD_QKV_PAIR
#undef LAYER_PREFETCH
#undef PAIR_ROTATES
#undef PAIR_CS
}
