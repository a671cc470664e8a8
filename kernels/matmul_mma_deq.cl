// Tensor-core matmul with the weights dequantized to fp16 in registers
// (WTYPE 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K in
// the device block layout of engine/cl/block_layout.h), NVIDIA only:
// mma.sync m16n8k16 with fp16 inputs and fp32 accumulation over the whole
// row, by inline PTX (after mma_f16.cl). Same contract as matmul.cl:
// out[t * ld_out + out_off + r] (+)= sum_k W[r][k] * x[t][k]. The host takes
// it for these types after a start-up self-test (ClPrefill::mma_ok).
//
// Why: the two kernels before it (integer codes in fp16 with x as two fp16
// halves; integer mma with x as two int8 halves; docs/history) finished
// every 32-value block with an epilogue per output (scale, conversion,
// add: ~5 issue slots per value against one mma per 16 x 8 x 32 products),
// which bound them at ~10% of the tensor cores. Here a weight enters the
// mma as its value, d (c - o) (+ m), so the accumulators run over the whole
// row and the only per-block work is building A (two rows' codes per lane,
// shared by every token tile of the warp). H200, pp512, Llama-3.2-1B shape
// Q4_0: 51.2k tok/s against the integer kernel's 40.5k.
//
// Accuracy: each weight is its exact value rounded once to fp16 (relative
// 2^-11 at most; Q4_K / Q5_K / Q6_K scales, float products in the file's
// dequantization, rounded to fp16 first); x is scaled per token by a power
// of two 2^k that brings the token's largest |x| to [2^14, 2^15) (no fp16
// overflow, undone exactly at the store) and rounded to fp16 (2^-11). The
// sums are fp32. GGML's CUDA backend takes the same fp16 inputs for large
// batches.
//
// Activations come packed (once per input, by pack_x_f16, or by
// rmsnorm_pack_f16 / glu_pack_f16, which compute them): per token, block
// and tig 0..3 one uint4 of fp16 {x[4tig], x[4tig+1] | x[4tig+2], x[4tig+3]
// | x[16+4tig], .. | .., x[16+4tig+3]} times the token's 2^k, and per token
// xs[tok] = 2^-k. The mma's k order is permuted within a block (both
// operands alike): for the k-step h (values 16h..16h+15), lane (g, tig)
// holds values 16h+4tig, +1 as its k 2tig, 2tig+1 and 16h+4tig+2, +3 as its
// k 2tig+8, 2tig+9, so A comes from word tig of the block's nibbles (low
// nibbles: h 0, high: h 1) and B from one 16-byte load per token tile.
//
// Work split: a work-group of MMA_WR x MMA_WN warps computes TILE_R rows x TILE_T tokens, each warp MMA_MI m16 tiles x MMA_NJ
// n8 tiles; per stage of MMA_KB blocks the raw code blocks and scale records
// of its rows and its tokens' packed x are copied to local memory by cp.async,
// MMA_STAGES - 1 stages ahead, into a ring of MMA_STAGES buffers (one barrier
// a stage).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): lane = 4 g + tig;
// A regs: (row g, k 2tig..+1), (row g+8, k 2tig..), (row g, k 2tig+8..+9),
// (row g+8, k 2tig+8..); B regs: (k 2tig..+1, n g), (k 2tig+8..+9, n g);
// C: (row g, n 2tig), (row g, n 2tig+1), (row g+8, n 2tig), (row g+8, n 2tig+1).
//
// Split-K (MMA_SPLIT > 1, for matrices whose grid would leave compute units
// idle with the wider token tile): MMA_SPLIT consecutive work-groups share a
// row tile, each taking a contiguous share of its stages, and write their
// sums to `part` instead of `out`; mma_split_sum then adds them into `out`.
//
// Launch: global (ceil(n_rows / TILE_R) * MMA_SPLIT * WG_THREADS,
// ceil(n_tok / TILE_T)), local (WG_THREADS, 1). n_in is a multiple of 32.
// pack_x_f16, rmsnorm_pack_f16, glu_pack_f16: global (PACK_WG, n_tok),
// local (PACK_WG, 1): a work-group a token.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef MMA_MI
#define MMA_MI 2
#endif
#ifndef MMA_NJ
#define MMA_NJ 4
#endif
#ifndef MMA_WR
#define MMA_WR 4
#endif
#ifndef MMA_WN
#define MMA_WN 1
#endif
#ifndef MMA_KB
#define MMA_KB 4
#endif
#ifndef MMA_STAGES
#define MMA_STAGES 3
#endif
#ifndef MMA_SPLIT
#define MMA_SPLIT 1
#endif
#ifndef PACK_WG
#define PACK_WG 256  // the host passes ClPrefill::k_pack_group
#endif
#ifndef SPLIT_SUM_WG
#define SPLIT_SUM_WG 256  // the host passes ClPrefill::k_split_sum_group
#endif

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 6 && WTYPE != 7 && WTYPE != 8 && WTYPE != 12 && \
    WTYPE != 13 && WTYPE != 14
#error "matmul_mma_deq: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights only"
#endif
#if MMA_STAGES < 2 || MMA_STAGES > 4
#error "matmul_mma_deq: MMA_STAGES 2 to 4"
#endif
#if MMA_SPLIT < 1 || MMA_SPLIT > 4
#error "matmul_mma_deq: MMA_SPLIT 1 to 4"
#endif

#define KB 32
#define TILE_R (MMA_WR * MMA_MI * 16)
#define TILE_T (MMA_WN * MMA_NJ * 8)
#define WG_THREADS (MMA_WR * MMA_WN * 32)
#define XQ (MMA_KB * 4)                  // packed uint4 per token per stage
#define LDQ (XQ % 8 == 4 ? XQ : XQ + 4)  // their row stride: 16 words mod 32
#define QV (WTYPE == 8 ? 2 : 1)          // uint4 of codes per block
// Scale-record words per block as staged: Q4_0 and Q8_0 the aligned word
// holding the block's half d (picked by the block index's parity), Q4_1
// half2 {d, m}, Q5_0 {half d, 0; qh}, Q5_1 {half2 d m; qh}, Q4_K float2
// {s, m}, Q5_K {s, m, qh, 0}, Q6_K {s0, s1, h0, h1}.
#if WTYPE == 2 || WTYPE == 3 || WTYPE == 8
#define SWORDS 1
#elif WTYPE == 6 || WTYPE == 7 || WTYPE == 12
#define SWORDS 2
#else
#define SWORDS 4
#endif
// fp16 pair of 1024 + the code's offset (the codes arrive as 1024 + c)
#if WTYPE == 2
#define CODE_BIAS 0x64086408u
#elif WTYPE == 6
#define CODE_BIAS 0x64106410u
#elif WTYPE == 8
#define CODE_BIAS 0x64806480u
#elif WTYPE == 14
#define CODE_BIAS 0x64206420u
#else
#define CODE_BIAS 0x64006400u
#endif
#define HAS_MIN (WTYPE == 3 || WTYPE == 7 || WTYPE == 12 || WTYPE == 13)

// The fp16 pair {v, v}.
inline uint half2_of(float v) { return pack_half2(v, v); }

// Bytes of {b, a} picked by sel (PTX prmt: a is bytes 0-3, b bytes 4-7).
inline uint prmt(uint a, uint b, uint sel) {
  uint d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
inline uint hsub2(uint a, uint b) {
  uint d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
inline uint hmul2(uint a, uint b) {
  uint d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
inline uint hfma2(uint a, uint b, uint c) {
  uint d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The block's scale pair(s) as fp16 pairs: sc[h] multiplies the codes of
// k-step h (values 16h..16h+15), mn the added min (types with one).
typedef struct {
  uint sc0, sc1, mn;
} Scales;

// Codes c of the four values a lane takes from k-step h, one per byte
// (value 16h + 4 tig + b in byte b), from the staged block (q: its code
// words, rec: its scale record).
inline uint step_codes(const __local uint* q, const __local uint* rec, int h, int tig) {
#if WTYPE == 8
  (void)rec;
  return q[4 * h + tig] ^ 0x80808080u;  // int8 + 128
#else
  uint c = h ? (q[tig] >> 4) & 0x0f0f0f0fu : q[tig] & 0x0f0f0f0fu;
#if WTYPE == 6 || WTYPE == 7 || WTYPE == 13
  // bit j of qh is bit 4 of value j: four bits to bit 4 of each byte
  const uint t = (rec[WTYPE == 13 ? 2 : 1] >> (16 * h + 4 * tig)) & 0xfu;
  c |= ((t * 0x00204081u) & 0x01010101u) << 4;
#elif WTYPE == 14
  // bits 2j, 2j + 1 of half h's word are the top bits of its value j
  const uint t = (rec[2 + h] >> (8 * tig)) & 0xffu;
  const uint u = (t | (t << 12)) & 0x000f000fu;  // values 0-1 at bits 0-3, 2-3 at 16-19
  c |= ((u | (u << 6)) & 0x03030303u) << 4;
#else
  (void)rec;
#endif
  return c;
#endif
}

// fp16 pairs (first value in the low half) of codes bytes 0-1 and 2-3,
// dequantized: d (c - o) or s c + m, each rounded once.
inline void step_values(uint c, uint sc, uint mn, uint* lo, uint* hi) {
  const uint p0 = hsub2(prmt(c, 0x64646464u, 0x4140u), CODE_BIAS);
  const uint p1 = hsub2(prmt(c, 0x64646464u, 0x4342u), CODE_BIAS);
#if HAS_MIN
  *lo = hfma2(p0, sc, mn);
  *hi = hfma2(p1, sc, mn);
#else
  (void)mn;
  *lo = hmul2(p0, sc);
  *hi = hmul2(p1, sc);
#endif
}

// The scales of a staged block; par: the block index's parity (Q4_0, Q8_0).
inline Scales block_scales(const __local uint* rec, int par) {
  Scales s;
#if WTYPE == 2 || WTYPE == 8 || WTYPE == 6
  const uint w = rec[0];
#if WTYPE == 6
  (void)par;
  s.sc0 = prmt(w, 0u, 0x1010u);
#else
  s.sc0 = prmt(w, 0u, par ? 0x3232u : 0x1010u);
#endif
  s.sc1 = s.sc0;
  s.mn = 0u;
#elif WTYPE == 3 || WTYPE == 7
  (void)par;
  const uint w = rec[0];  // half2 {d, m}
  s.sc0 = s.sc1 = prmt(w, 0u, 0x1010u);
  s.mn = prmt(w, 0u, 0x3232u);
#elif WTYPE == 12 || WTYPE == 13
  (void)par;
  s.sc0 = s.sc1 = half2_of(as_float(rec[0]));
  s.mn = half2_of(-as_float(rec[1]));
#else  // Q6_K: a scale per 16-value half
  (void)par;
  s.sc0 = half2_of(as_float(rec[0]));
  s.sc1 = half2_of(as_float(rec[1]));
  s.mn = 0u;
#endif
  return s;
}

// Lane (lane ^ mask)'s v.
inline float shfl_bfly(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

// Asynchronous copies global -> local memory (cp.async, sm_80 and later):
// `bytes` of the copy's size are read, the rest zero-filled (0: all zeros;
// the source address is then not read). `dst` is the local address in the
// shared window (smem_addr).
inline void cp_async16(uint dst, const __global void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
inline void cp_async8(uint dst, const __global void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
inline void cp_async4(uint dst, const __global void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
// The shared-window address of a local pointer: the compiler may hand the
// asm either that address or a generic one (which lies in the shared window
// of the generic space), so the generic case is converted.
inline uint smem_addr(__local const void* p) {
  uint a;
  asm("{\n\t.reg .pred s;\n\t.reg .u64 g;\n\t"
      "isspacep.shared s, %1;\n\t"
      "@s cvta.to.shared.u64 g, %1;\n\t"
      "@!s mov.u64 g, %1;\n\t"
      "cvt.u32.u64 %0, g;\n\t}"
      : "=r"(a)
      : "l"((ulong)(size_t)p));
  return a;
}
inline void cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most MMA_STAGES - 2 of this work-item's groups are pending.
#if MMA_STAGES == 2
#define CP_WAIT() asm volatile("cp.async.wait_group 0;" ::: "memory")
#elif MMA_STAGES == 3
#define CP_WAIT() asm volatile("cp.async.wait_group 1;" ::: "memory")
#else
#define CP_WAIT() asm volatile("cp.async.wait_group 2;" ::: "memory")
#endif

#if SWORDS == 1
#if WTYPE == 3
#define CP_SCALE(dst, blk, ok) cp_async4((dst), (const __global uint*)ws + (blk), (ok) ? 4 : 0)
#else
#define CP_SCALE(dst, blk, ok) cp_async4((dst), (const __global uint*)ws + ((blk) >> 1), (ok) ? 4 : 0)
#endif
#elif SWORDS == 2
#define CP_SCALE(dst, blk, ok) cp_async8((dst), (const __global uint2*)ws + (blk), (ok) ? 8 : 0)
#else
#define CP_SCALE(dst, blk, ok) cp_async16((dst), (const __global uint4*)ws + (blk), (ok) ? 16 : 0)
#endif

#define W_ITEMS ((TILE_R * MMA_KB + WG_THREADS - 1) / WG_THREADS)
#define X_ITEMS ((TILE_T * XQ + WG_THREADS - 1) / WG_THREADS)

// Stage s_ (blocks s_ * MMA_KB ..) into buffer s_ % MMA_STAGES: code blocks,
// scale records, packed x; zeros past the matrix, the blocks or the tokens.
// One commit group per stage.
#define ISSUE(s_)                                                                           \
  do {                                                                                      \
    const int b0_ = (s_)*MMA_KB, buf_ = (s_) % MMA_STAGES;                                  \
    _Pragma("unroll") for (int it = 0; it < W_ITEMS; ++it) {                                \
      const int e = lid + it * WG_THREADS;                                                  \
      if (e < TILE_R * MMA_KB) {                                                            \
        const int kb = e % MMA_KB, r = e / MMA_KB, row = row0 + r, b = b0_ + kb;            \
        const bool ok = row < n_rows && b < b_end;                                          \
        const size_t blk = ok ? (size_t)row * (size_t)n_blocks + (size_t)b : 0;             \
        const int slot = (buf_ * MMA_KB + kb) * TILE_R + r;                                 \
        _Pragma("unroll") for (int v = 0; v < QV; ++v) {                                    \
          cp_async16(wql_s + (slot * QV + v) * 16, wq + blk * QV + v, ok ? 16 : 0);         \
        }                                                                                   \
        CP_SCALE(wsl_s + slot * SWORDS * 4, blk, ok);                                       \
      }                                                                                     \
    }                                                                                       \
    _Pragma("unroll") for (int it = 0; it < X_ITEMS; ++it) {                                \
      const int e = lid + it * WG_THREADS;                                                  \
      if (e < TILE_T * XQ) {                                                                \
        const int tok = tok0 + e / XQ, q = b0_ * 4 + e % XQ;                                \
        const bool ok = tok < n_tok && q < b_end * 4;                                       \
        cp_async16(xl_s + (buf_ * (TILE_T * LDQ) + (e / XQ) * LDQ + e % XQ) * 16,           \
                   xp + (ok ? (size_t)tok * (size_t)(n_blocks * 4) + q : 0), ok ? 16 : 0);  \
      }                                                                                     \
    }                                                                                       \
    cp_commit();                                                                            \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void matmul_mma_deq(
    const __global uint4* wq, const __global void* ws, int n_in, int n_rows,
    const __global uint4* xp, const __global float* xs, int n_tok, __global float* out,
    int ld_out, int out_off, int accumulate, __global float* part) {
  __local uint4 wql[MMA_STAGES * MMA_KB * TILE_R * QV];
  __local uint4 wsl4[(MMA_STAGES * MMA_KB * TILE_R * SWORDS + 3) / 4];  // 16-byte aligned
  __local uint* const wsl = (__local uint*)wsl4;
  __local uint4 xl[MMA_STAGES * TILE_T * LDQ];
  const uint wql_s = smem_addr(wql), wsl_s = smem_addr(wsl4), xl_s = smem_addr(xl);
  const int lid = get_local_id(0);
  const int lane = lid & 31;
  const int warp = lid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wr0 = (warp % MMA_WR) * (MMA_MI * 16);  // warp's first row in the tile
  const int wn0 = (warp / MMA_WR) * (MMA_NJ * 8);   // and first token
  const int row0 = get_group_id(0) / MMA_SPLIT * TILE_R;
  const int tok0 = get_group_id(1) * TILE_T;
  const int n_blocks = n_in / KB;
  const int n_stages = (n_blocks + MMA_KB - 1) / MMA_KB;
  // This work-group's stages s_begin .. s_end - 1 (split-K: its share of
  // the row's stages; blocks before b_end).
  const int split = get_group_id(0) % MMA_SPLIT;
  const int s_begin = n_stages * split / MMA_SPLIT;
  const int s_end = n_stages * (split + 1) / MMA_SPLIT;
  const int b_end = min(n_blocks, s_end * MMA_KB);

  float acc[MMA_MI][MMA_NJ][4];
#pragma unroll
  for (int i = 0; i < MMA_MI; ++i)
#pragma unroll
    for (int j = 0; j < MMA_NJ; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  // MMA_STAGES - 1 stages in flight before the first is used (stages past
  // the end copy zeros, so every iteration waits for the same count).
#pragma unroll
  for (int s = s_begin; s < s_begin + MMA_STAGES - 1; ++s) ISSUE(s);

  for (int s = s_begin; s < s_end; ++s) {
    CP_WAIT();                     // this work-item's copies of stage s arrived
    barrier(CLK_LOCAL_MEM_FENCE);  // everyone's; and stage s - 1's buffer is free
    ISSUE(s + MMA_STAGES - 1);
    const int buf = s % MMA_STAGES;
#pragma unroll
    for (int kb = 0; kb < MMA_KB; ++kb) {
      const int sk = buf * MMA_KB + kb;
      // a[i][h]: A of m16 tile i for k-step h
      uint a[MMA_MI][2][4];
#pragma unroll
      for (int i = 0; i < MMA_MI; ++i) {
        const int r = wr0 + 16 * i + g;
#pragma unroll
        for (int rh = 0; rh < 2; ++rh) {  // rows r and r + 8
          const int slot = sk * TILE_R + r + 8 * rh;
          const __local uint* q = (const __local uint*)(wql + slot * QV);
          const __local uint* rec = wsl + slot * SWORDS;
#if WTYPE == 2 || WTYPE == 8
          const int par = ((row0 + r + 8 * rh) * n_blocks + s * MMA_KB + kb) & 1;
#else
          const int par = 0;
#endif
          const Scales sc = block_scales(rec, par);
          step_values(step_codes(q, rec, 0, tig), sc.sc0, sc.mn, &a[i][0][rh],
                      &a[i][0][2 + rh]);
          step_values(step_codes(q, rec, 1, tig), sc.sc1, sc.mn, &a[i][1][rh],
                      &a[i][1][2 + rh]);
        }
      }
#pragma unroll
      for (int j = 0; j < MMA_NJ; ++j) {
        const uint4 b = xl[buf * (TILE_T * LDQ) + (wn0 + 8 * j + g) * LDQ + kb * 4 + tig];
#pragma unroll
        for (int i = 0; i < MMA_MI; ++i) {
          mma16816(acc[i][j], a[i][0][0], a[i][0][1], a[i][0][2], a[i][0][3], b.x, b.y);
          mma16816(acc[i][j], a[i][1][0], a[i][1][1], a[i][1][2], a[i][1][3], b.z, b.w);
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");  // nothing left in flight at exit

#pragma unroll
  for (int j = 0; j < MMA_NJ; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int tok = tok0 + wn0 + 8 * j + 2 * tig + (c & 1);
      if (tok >= n_tok) continue;
      const float unscale = xs[tok];
#pragma unroll
      for (int i = 0; i < MMA_MI; ++i) {
        const int row = row0 + wr0 + 16 * i + g + (c >> 1) * 8;
        if (row < n_rows) {
          const float v = acc[i][j][c] * unscale;
#if MMA_SPLIT > 1
          (void)out;
          (void)ld_out;
          (void)out_off;
          (void)accumulate;
          part[((size_t)split * n_tok + tok) * n_rows + row] = v;
#else
          (void)part;
          __global float* o = out + (size_t)tok * ld_out + out_off + row;
          *o = accumulate ? *o + v : v;
#endif
        }
      }
    }
  }
}

// Split-K (MMA_SPLIT > 1): matmul_mma_deq wrote each split's share of the
// product to part[split][tok][row]; this adds them in split order (the same
// sum whatever order the work-groups ran in) and stores or accumulates
// them as matmul_mma_deq would have. Global (ceil(n_rows / SPLIT_SUM_WG) *
// SPLIT_SUM_WG, n_tok), local (SPLIT_SUM_WG, 1).
__kernel __attribute__((reqd_work_group_size(SPLIT_SUM_WG, 1, 1))) void mma_split_sum(
    const __global float* part, int n_rows, int n_tok, __global float* out, int ld_out,
    int out_off, int accumulate) {
  const int row = get_global_id(0), tok = get_global_id(1);
  if (row >= n_rows || tok >= n_tok) return;
  float v = part[(size_t)tok * n_rows + row];
#pragma unroll
  for (int s = 1; s < MMA_SPLIT; ++s) v += part[((size_t)s * n_tok + tok) * n_rows + row];
  __global float* o = out + (size_t)tok * ld_out + out_off + row;
  *o = accumulate ? *o + v : v;
}

// What the packs store at columns c..c+3 of a token's row: PACK_PLAIN the
// row itself; PACK_RMSNORM row * g * rms (aux = g, the norm's weights; rms
// applied at the store, once the row's sum of squares is known);
// PACK_SILU / PACK_GELU act(row) * aux (aux = the token's up row: SwiGLU,
// GeGLU with GELU's tanh form, as prefill_ops.cl's silu_mul / gelu_mul).
#define PACK_PLAIN 0
#define PACK_RMSNORM 1
#define PACK_SILU 2
#define PACK_GELU 3
// The packs' helpers are called from three kernels: always inlined, since a
// C99 inline left as a call has no out-of-line definition to link.
#define PACK_INLINE inline __attribute__((always_inline))

// Columns c..c+3 as pack_row scales them (PACK_RMSNORM: row * g, rms not
// yet applied); *ss += the sum of the row's squares there.
PACK_INLINE float4 pack_value4(const __global float* row, const __global float* aux, int c,
                               int mode, float* ss) {
  const float4 v = vload4(0, row + c);
  if (mode == PACK_RMSNORM) {
    *ss += dot(v, v);
    return v * vload4(0, aux + c);
  }
  if (mode == PACK_SILU) return v / (1.0f + exp(-v)) * vload4(0, aux + c);
  if (mode == PACK_GELU) {
    return 0.5f * v * (1.0f + tanh(0.7978845608f * (v + 0.044715f * v * v * v))) *
           vload4(0, aux + c);
  }
  return v;
}

// The largest of m and the sum of ss over the work-group (PACK_WG items),
// through `slots` (2 PACK_WG / 32 floats), in one round.
PACK_INLINE void group_reduce(float* m, float* ss, __local float* slots) {
  const int lid = get_local_id(0);
  float a = *m, b = *ss;
  for (int mask = 16; mask > 0; mask >>= 1) {
    a = fmax(a, shfl_bfly(a, mask));
    b += shfl_bfly(b, mask);
  }
  if ((lid & 31) == 0) {
    slots[lid >> 5] = a;
    slots[PACK_WG / 32 + (lid >> 5)] = b;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  a = slots[0];
  b = slots[PACK_WG / 32];
  for (int w = 1; w < PACK_WG / 32; ++w) {
    a = fmax(a, slots[w]);
    b += slots[PACK_WG / 32 + w];
  }
  *m = a;
  *ss = b;
}

#ifndef PACK_CACHE
#define PACK_CACHE 4  // items a work-item keeps in registers between the two passes
#endif

// One token's row (n_in values, mode as pack_value4; PACK_RMSNORM: times
// rms = 1 / sqrt(mean(row^2) + eps)) -> its packed uint4 and xs: the power
// of two 2^k that brings the largest |value| to [2^14, 2^15) (k clamped to
// -126..126 and so that rms 2^k is finite; 0 for a zero row), xs = 2^-k,
// and per block and tig one uint4 of fp16 value * 2^k, rounded to nearest. A work-item's first PACK_CACHE
// items (rows of up to 8 PACK_WG PACK_CACHE values: 8192) stay in
// registers from the load to the store, so the row is read once; the rest
// are computed twice. The largest value and the sum of squares meet in one
// reduction (max |row * g| * rms is the largest |row * g * rms|).
PACK_INLINE void pack_row(const __global float* row, const __global float* aux, int n_in,
                          float eps, int mode, __global uint4* xp_row, __global float* xs_tok,
                          __local float* slots) {
  const int lid = get_local_id(0);
  const int n_items = n_in / 8;
  float4 lo[PACK_CACHE], hi[PACK_CACHE];  // item e: values 4 tig .. and 16 + 4 tig ..
  float m = 0.0f, ss = 0.0f;
#pragma unroll
  for (int it = 0; it < PACK_CACHE; ++it) {
    const int e = lid + it * PACK_WG;
    lo[it] = hi[it] = (float4)(0.0f);
    if (e < n_items) {
      const int c = 32 * (e >> 2) + 4 * (e & 3);
      lo[it] = pack_value4(row, aux, c, mode, &ss);
      hi[it] = pack_value4(row, aux, c + 16, mode, &ss);
    }
    const float4 v = fmax(fabs(lo[it]), fabs(hi[it]));
    m = fmax(m, fmax(fmax(v.x, v.y), fmax(v.z, v.w)));
  }
  for (int e = lid + PACK_CACHE * PACK_WG; e < n_items; e += PACK_WG) {
    const int c = 32 * (e >> 2) + 4 * (e & 3);
    const float4 v = fmax(fabs(pack_value4(row, aux, c, mode, &ss)),
                          fabs(pack_value4(row, aux, c + 16, mode, &ss)));
    m = fmax(m, fmax(fmax(v.x, v.y), fmax(v.z, v.w)));
  }
  group_reduce(&m, &ss, slots);
  const float rms = mode == PACK_RMSNORM ? rsqrt(ss / n_in + eps) : 1.0f;
  m *= rms;
  const int e2 = (int)((as_uint(m) >> 23) & 0xffu) - 127;  // floor(log2 m) for normal m
  // k also no larger than keeps rms * 2^k finite (a row with max |x * g|
  // under ~2^-113 would otherwise store inf)
  const int er = (int)((as_uint(rms) >> 23) & 0xffu) - 127;  // floor(log2 rms)
  const int k = m > 0.0f ? clamp(14 - e2, -126, min(126, 126 - er)) : 0;
  const float scale = rms * as_float((uint)(k + 127) << 23);
#pragma unroll
  for (int it = 0; it < PACK_CACHE; ++it) {
    const int e = lid + it * PACK_WG;
    if (e < n_items) {
      __global half* dst = (__global half*)(xp_row + e);
      vstore_half4_rte(lo[it] * scale, 0, dst);
      vstore_half4_rte(hi[it] * scale, 1, dst);
    }
  }
  for (int e = lid + PACK_CACHE * PACK_WG; e < n_items; e += PACK_WG) {
    const int c = 32 * (e >> 2) + 4 * (e & 3);
    __global half* dst = (__global half*)(xp_row + e);
    float unused = 0.0f;
    vstore_half4_rte(pack_value4(row, aux, c, mode, &unused) * scale, 0, dst);
    vstore_half4_rte(pack_value4(row, aux, c + 16, mode, &unused) * scale, 1, dst);
  }
  if (lid == 0) *xs_tok = as_float((uint)(127 - k) << 23);
}

// x (n_tok rows of ld_x floats) -> xp and xs, the layout matmul_mma_deq
// reads (see the top of this file). One work-group of PACK_WG items per token.
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1))) void pack_x_f16(
    const __global float* x, int ld_x, int n_in, int n_tok, __global uint4* xp,
    __global float* xs) {
  __local float slots[2 * (PACK_WG / 32)];
  const int tok = get_group_id(1);
  if (tok >= n_tok) return;  // the whole work-group
  pack_row(x + (size_t)tok * ld_x, 0, n_in, 0.0f, PACK_PLAIN, xp + (size_t)tok * (n_in / 8),
           xs + tok, slots);
}

// rmsnorm_rows and pack_x_f16 in one pass: the packed form of x[t] /
// sqrt(mean(x[t]^2) + eps) * g (x rows of n_in floats).
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1))) void rmsnorm_pack_f16(
    const __global float* x, int n_in, int n_tok, const __global float* g, float eps,
    __global uint4* xp, __global float* xs) {
  __local float slots[2 * (PACK_WG / 32)];
  const int tok = get_group_id(1);
  if (tok >= n_tok) return;
  pack_row(x + (size_t)tok * n_in, g, n_in, eps, PACK_RMSNORM, xp + (size_t)tok * (n_in / 8),
           xs + tok, slots);
}

// silu_mul (gelu != 0: gelu_mul) and pack_x_f16 in one pass: the packed
// form of act(gate[t]) * up[t] (rows of n_in floats).
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1))) void glu_pack_f16(
    const __global float* gate, const __global float* up, int n_in, int n_tok, int gelu,
    __global uint4* xp, __global float* xs) {
  __local float slots[2 * (PACK_WG / 32)];
  const int tok = get_group_id(1);
  if (tok >= n_tok) return;
  const size_t off = (size_t)tok * n_in;
  pack_row(gate + off, up + off, n_in, 0.0f, gelu ? PACK_GELU : PACK_SILU,
           xp + (size_t)tok * (n_in / 8), xs + tok, slots);
}
