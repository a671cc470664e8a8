// Tensor-core variant of matmul.cl's `matmul` for quantized weights (WTYPE 2
// Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K in the
// device block layout of engine/cl/block_layout.h), NVIDIA only:
// it uses inline PTX (mma.sync m16n8k16 with fp16 inputs and fp32
// accumulation, sub.f16x2, shfl.sync), which NVIDIA's OpenCL C accepts without
// cl_khr_fp16 because fp16 values travel as packed uint bits. The host selects
// it only after a start-up self-test per weight type (ClPrefill::mma_ok);
// everywhere else the portable matmul.cl runs. Same contract as matmul.cl:
// out[t * ld_out + out_off + r] (+)= sum_k W[r][k] * x[t][k].
//
// Accuracy (the tests want 1e-3 relative to float64 at the end of a model):
//   - weights enter the mma as the block's integer codes (q - 8, q - 16,
//     q - 32, q, or the int8), which fp16 holds exactly; the block scale
//     (and the min of Q4_1, Q5_1, Q4_K, Q5_K) is applied in fp32 to each
//     block's partial sum (Q6_K: to each 16-value half's, which have their
//     own scales), so the quantized weights are used exactly;
//   - activations are split into x = hi + lo, both fp16 (MMA_SPLIT=1, the
//     default), and both halves go through the mma: about 22 bits of x
//     instead of fp16's 11 (one fp16 alone gives ~3e-4 relative error per
//     product, which a model compounds over its layers). MMA_SPLIT=0 drops lo.
//   - Q4_1: sum_k (d q_k + m) x_k = d sum q_k x_k + m sum x_k, the block sums
//     of x in fp32 from pack_x_mma (likewise Q5_1, and Q4_K / Q5_K with -m).
//   - the fifth bit (Q5_*: one qh word per block) and the top two bits (Q6_K:
//     two words, one per half) are staged in local memory beside the scales
//     and or'ed into the nibble codes as the A fragments are built.
// Integer codes to fp16 without half arithmetic in C: code c (0..1023) or'ed
// into the mantissa of 1024.0 (0x6400) is the fp16 value 1024 + c; one
// sub.f16x2 of (1024 + offset) per two values gives the code exactly.
//
// Activations come packed (pack_x_mma, once per input: the matmuls that
// read the same x share it): per token, per 16-value chunk of k and per tig
// 0..3 one uint4 holding the B-fragment words of both fp16 halves, {hi(2tig,
// 2tig+1), hi(2tig+8, 2tig+9), lo(2tig, 2tig+1), lo(2tig+8, 2tig+9)}, and per
// token and block the block sum of x (the min term's factor).
//
// Work split: a work-group of MMA_WR x MMA_WN warps computes TILE_R rows x
// TILE_T tokens; each warp MMA_MI m16 tiles (rows) x MMA_NJ n8 tiles
// (tokens). Per stage of MMA_KB quant blocks (32 k each) the work-group
//   1. copies the raw quant bytes and the scales of its rows into local memory
//      (one 16- or 32-byte block per work-item: consecutive items read
//      consecutive blocks of a row, so each row's bytes come in whole sectors);
//   2. copies its tokens' packed activations (uint4 each, a token's stage
//      contiguous) into local memory, rows of LDQ uint4 (16 words mod 32: a
//      quarter-warp's 16-byte B loads, 2 tokens x 4 tig, hit 32 distinct banks);
//   3. after a barrier, each warp builds its A fragments from the raw bytes
//      (the nibble/byte pairs a lane needs, as fp16 codes) and loads each
//      B fragment pair (hi and lo) with one 16-byte load, runs the mma per
//      block into a zeroed partial sum, then acc += d * partial (+ m * block
//      sum of x).
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): lane = 4 * g + tig;
// A regs: (row g, k 2tig..+1), (row g+8, k 2tig..), (row g, k 2tig+8..),
// (row g+8, k 2tig+8..); B regs: (k 2tig..+1, n g), (k 2tig+8..+9, n g);
// C: (row g, n 2tig), (row g, n 2tig+1), (row g+8, n 2tig), (row g+8, n 2tig+1).
// In a Q4 block, nibble byte j holds value j (low) and j + 16 (high), so the
// mma over k 0..15 takes the low nibbles and the one over k 16..31 the high
// nibbles of the same bytes 2tig, 2tig+1, 2tig+8, 2tig+9.
//
// Launch: global (ceil(n_rows / TILE_R) * WG_THREADS, ceil(n_tok / TILE_T)),
// local (WG_THREADS, 1). n_in is a multiple of 32 (quantized rows).
// pack_x_mma: global (n_in / 4 rounded up to a multiple of 32, n_tok),
// local (a multiple of 32, 1).

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
#define MMA_WR 2
#endif
#ifndef MMA_WN
#define MMA_WN 2
#endif
#ifndef MMA_KB
#define MMA_KB 2
#endif
#ifndef MMA_SPLIT
#define MMA_SPLIT 1
#endif

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 6 && WTYPE != 7 && WTYPE != 8 && WTYPE != 12 && \
    WTYPE != 13 && WTYPE != 14
#error "matmul_mma: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights only"
#endif
// What varies with the type: a second per-block term m * (block sum of x)
// (MM_MIN), a scale per 16-value half (MM_HALVES, kept in wdl / wml), high
// code bits in HW words per block (0: none), and the offset subtracted from
// the code (MM_BIAS: fp16 1024 + offset in both halves).
#define MM_MIN (WTYPE == 3 || WTYPE == 7 || WTYPE == 12 || WTYPE == 13)
#define MM_HALVES (WTYPE == 14)
#define HW (WTYPE == 14 ? 2 : WTYPE == 6 || WTYPE == 7 || WTYPE == 13 ? 1 : 0)
#if WTYPE == 2
#define MM_BIAS 0x64086408u
#elif WTYPE == 6
#define MM_BIAS 0x64106410u
#elif WTYPE == 14
#define MM_BIAS 0x64206420u
#else
#define MM_BIAS 0x64006400u
#endif

#define KB 32
#define TILE_R (MMA_WR * MMA_MI * 16)
#define TILE_T (MMA_WN * MMA_NJ * 8)
#define WG_THREADS (MMA_WR * MMA_WN * 32)
#if WTYPE == 8
#define QW 8   // quant words per block
#define QS 12  // their stride in local memory (conflict-free A loads)
#else
#define QW 4
#define QS 4
#endif
#define XQ (MMA_KB * 8)  // packed uint4 per token per stage (2 chunks x 4 tig per block)
#define LDQ (XQ + 4)     // their row stride in local memory

// c += A * B (16x8x16, fp16 in, fp32 accumulate).
inline void mma16816(float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  float d0, d1, d2, d3;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
  c[0] = d0;
  c[1] = d1;
  c[2] = d2;
  c[3] = d3;
}

// Two fp16 lanes a - b.
inline uint sub_f16x2(uint a, uint b) {
  uint d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

inline float shfl_bfly(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

// The fp16 codes of the two weights in the 16 bits s (bytes 2tig, 2tig+1 or
// 2tig+8, 2tig+9 of the block), for the mma half `hi` (nibble types: high
// nibbles), with `top` the high code bits already at bits 4.. and 20.. .
inline uint codes(uint s, int hi, uint top) {
#if WTYPE == 8
  (void)hi;
  (void)top;
  const uint u = s ^ 0x8080u;  // int8 + 128
  return sub_f16x2(0x64006400u | (u & 0xffu) | ((u & 0xff00u) << 8), 0x64806480u);
#else
  const uint n = hi ? ((s >> 4) & 0xfu) | ((s & 0xf000u) << 4) : (s & 0xfu) | ((s & 0xf00u) << 8);
  return sub_f16x2(0x64006400u | n | top, MM_BIAS);
#endif
}

// The high bits of the two values whose qh / h bits start at bit 0 of hb, in
// the positions codes() wants: Q5 one bit (bit 4), Q6_K two (bits 4-5).
inline uint top_bits(uint hb) {
#if HW == 1
  return ((hb & 1u) << 4) | ((hb & 2u) << 19);
#elif HW == 2
  return ((hb & 3u) << 4) | ((hb & 0xcu) << 18);
#else
  (void)hb;
  return 0u;
#endif
}

#define W_ITEMS ((TILE_R * MMA_KB + WG_THREADS - 1) / WG_THREADS)
#define X_ITEMS ((TILE_T * XQ + WG_THREADS - 1) / WG_THREADS)
#define S_ITEMS ((TILE_T * MMA_KB + WG_THREADS - 1) / WG_THREADS)
#if QW == 8
#define FETCH_Q2(it, blk) wqr2[it] = vload4(1, wq + (blk)*QW)
#define ZERO_Q2(it) wqr2[it] = (uint4)(0u)
#else
#define FETCH_Q2(it, blk)
#define ZERO_Q2(it)
#endif
// A block's record (block_layout.h) -> the scale pair wsr (d and the min
// term's factor, or Q6_K's two half scales) and the high-bit words whr.
#define WSH ((const __global half*)ws)
#define WSU ((const __global uint*)ws)
#define WSF ((const __global float*)ws)
#if WTYPE == 3
#define FETCH_S(it, blk) wsr[it] = vload_half2((blk), WSH)
#elif WTYPE == 6
#define FETCH_S(it, blk) \
  (wsr[it] = (float2)(vload_half(4 * (blk), WSH), 0.0f), whr[it].x = WSU[2 * (blk) + 1])
#elif WTYPE == 7
#define FETCH_S(it, blk) (wsr[it] = vload_half2(2 * (blk), WSH), whr[it].x = WSU[2 * (blk) + 1])
#elif WTYPE == 12
#define FETCH_S(it, blk) (wsr[it] = vload2((blk), WSF) * (float2)(1.0f, -1.0f))
#elif WTYPE == 13
#define FETCH_S(it, blk) \
  (wsr[it] = vload2(2 * (blk), WSF) * (float2)(1.0f, -1.0f), whr[it].x = WSU[4 * (blk) + 2])
#elif WTYPE == 14
#define FETCH_S(it, blk) (wsr[it] = vload2(2 * (blk), WSF), whr[it] = vload2(2 * (blk) + 1, WSU))
#else
#define FETCH_S(it, blk) wsr[it] = (float2)(vload_half((blk), WSH), 0.0f)
#endif
#if MM_MIN
#define FETCH_XS(b0_)                                                   \
  do {                                                                  \
    _Pragma("unroll") for (int it = 0; it < S_ITEMS; ++it) {            \
      const int e = lid + it * WG_THREADS;                              \
      const int tok = tok0 + e / MMA_KB, b = (b0_) + e % MMA_KB;        \
      xsr[it] = 0.0f;                                                   \
      if (e < TILE_T * MMA_KB && tok < n_tok && b < n_blocks) {         \
        xsr[it] = xs[(size_t)tok * (size_t)n_blocks + b];               \
      }                                                                 \
    }                                                                   \
  } while (0)
#else
#define FETCH_XS(b0_)
#endif
// Stage `b0_` (blocks b0_ .. b0_ + MMA_KB - 1) into the registers wqr, wsr,
// xr (and xsr); zeros past the matrix, the blocks or the tokens.
#define FETCH(b0_)                                                     \
  do {                                                                 \
    _Pragma("unroll") for (int it = 0; it < W_ITEMS; ++it) {           \
      const int e = lid + it * WG_THREADS;                             \
      const int row = row0 + e / MMA_KB, b = (b0_) + e % MMA_KB;       \
      if (e < TILE_R * MMA_KB && row < n_rows && b < n_blocks) {       \
        const size_t blk = (size_t)row * (size_t)n_blocks + (size_t)b; \
        wqr[it] = vload4(0, wq + blk * QW);                            \
        FETCH_Q2(it, blk);                                             \
        FETCH_S(it, blk);                                              \
      } else {                                                         \
        wqr[it] = (uint4)(0u);                                         \
        ZERO_Q2(it);                                                   \
        wsr[it] = (float2)(0.0f);                                      \
        whr[it] = (uint2)(0u);                                         \
      }                                                                \
    }                                                                  \
    _Pragma("unroll") for (int it = 0; it < X_ITEMS; ++it) {           \
      const int e = lid + it * WG_THREADS;                             \
      const int tok = tok0 + e / XQ, q = (b0_)*8 + e % XQ;             \
      xr[it] = (uint4)(0u);                                            \
      if (e < TILE_T * XQ && tok < n_tok && q < n_blocks * 8) {        \
        xr[it] = xp[(size_t)tok * (size_t)(n_blocks * 8) + q];         \
      }                                                                \
    }                                                                  \
    FETCH_XS(b0_);                                                     \
  } while (0)

#define ZERO_PART()                                           \
  do {                                                        \
    _Pragma("unroll") for (int i = 0; i < MMA_MI; ++i)        \
        _Pragma("unroll") for (int j = 0; j < MMA_NJ; ++j)    \
            _Pragma("unroll") for (int c = 0; c < 4; ++c)     \
                part[i][j][c] = 0.0f;                         \
  } while (0)
#if MM_MIN
#define MIN_LOAD()                                                      \
  const float m0 = wml[r], m1 = wml[r + 8];                             \
  const int t = kb * TILE_T + wn0 + 8 * j + 2 * tig;                    \
  const float s0 = xsl[t], s1 = xsl[t + 1]
#define ACC_ADD(c, d, m, x) acc[i][j][c] += d * part[i][j][c] + m * x
#else
#define MIN_LOAD()
#define ACC_ADD(c, d, m, x) acc[i][j][c] += d * part[i][j][c]
#endif
// acc += scale * part (+ min * block sum of x), the row scales from `sc`.
#define APPLY_PART(sc)                                              \
  do {                                                              \
    _Pragma("unroll") for (int i = 0; i < MMA_MI; ++i) {            \
      const int r = kb * TILE_R + wr0 + 16 * i + g;                 \
      const float d0 = (sc)[r], d1 = (sc)[r + 8];                   \
      _Pragma("unroll") for (int j = 0; j < MMA_NJ; ++j) {          \
        MIN_LOAD();                                                 \
        ACC_ADD(0, d0, m0, s0);                                     \
        ACC_ADD(1, d0, m0, s1);                                     \
        ACC_ADD(2, d1, m1, s0);                                     \
        ACC_ADD(3, d1, m1, s1);                                     \
      }                                                             \
    }                                                               \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void matmul_mma(
    const __global uint* wq, const __global void* ws, int n_in, int n_rows,
    const __global uint4* xp, const __global float* xs, int n_tok, __global float* out, int ld_out,
    int out_off, int accumulate) {
  __local uint wql[MMA_KB * TILE_R * QS];
  __local float wdl[MMA_KB * TILE_R];
#if MM_MIN || MM_HALVES
  __local float wml[MMA_KB * TILE_R];
#endif
#if MM_MIN
  __local float xsl[MMA_KB * TILE_T];
#endif
#if HW
  __local uint whl[MMA_KB * TILE_R * HW];
#endif
  __local uint4 xl[TILE_T * LDQ];
  const int lid = get_local_id(0);
  const int lane = lid & 31;
  const int warp = lid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wr0 = (warp % MMA_WR) * (MMA_MI * 16);  // warp's first row in the tile
  const int wn0 = (warp / MMA_WR) * (MMA_NJ * 8);   // and first token
  const int row0 = get_group_id(0) * TILE_R;
  const int tok0 = get_group_id(1) * TILE_T;
  const int n_blocks = n_in / KB;

  float acc[MMA_MI][MMA_NJ][4];
#pragma unroll
  for (int i = 0; i < MMA_MI; ++i)
#pragma unroll
    for (int j = 0; j < MMA_NJ; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  // Global loads of a stage go to registers first and are stored to local
  // memory at the top of the next iteration, so they are in flight while the
  // warps run the previous stage's mma (work-groups are few: 80 to 240 per
  // matrix at a 512-token chunk, so latency is not hidden by occupancy).
  uint4 wqr[W_ITEMS];
#if QW == 8
  uint4 wqr2[W_ITEMS];
#endif
  float2 wsr[W_ITEMS];  // d (and the min factor, or Q6_K's two scales)
  uint2 whr[W_ITEMS];   // high-bit words (Q5_*: .x, Q6_K: both)
  uint4 xr[X_ITEMS];
#if MM_MIN
  float xsr[S_ITEMS];
#else
  (void)xs;
#endif
  FETCH(0);

  for (int b0 = 0; b0 < n_blocks; b0 += MMA_KB) {
    // 1. raw weight blocks and scales, MMA_KB consecutive blocks per row.
#pragma unroll
    for (int it = 0; it < W_ITEMS; ++it) {
      const int e = lid + it * WG_THREADS;
      if (e < TILE_R * MMA_KB) {
        const int kb = e % MMA_KB, r = e / MMA_KB;
        __local uint* dst = wql + (kb * TILE_R + r) * QS;
        vstore4(wqr[it], 0, dst);
#if QW == 8
        vstore4(wqr2[it], 1, dst);
#endif
        wdl[kb * TILE_R + r] = wsr[it].x;
#if MM_MIN || MM_HALVES
        wml[kb * TILE_R + r] = wsr[it].y;
#endif
#if HW == 1
        whl[kb * TILE_R + r] = whr[it].x;
#elif HW == 2
        vstore2(whr[it], kb * TILE_R + r, whl);
#endif
      }
    }
    // 2. packed activations (and block sums of x)
#pragma unroll
    for (int it = 0; it < X_ITEMS; ++it) {
      const int e = lid + it * WG_THREADS;
      if (e < TILE_T * XQ) xl[(e / XQ) * LDQ + e % XQ] = xr[it];
    }
#if MM_MIN
#pragma unroll
    for (int it = 0; it < S_ITEMS; ++it) {
      const int e = lid + it * WG_THREADS;
      if (e < TILE_T * MMA_KB) xsl[(e % MMA_KB) * TILE_T + e / MMA_KB] = xsr[it];
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    if (b0 + MMA_KB < n_blocks) FETCH(b0 + MMA_KB);

    // 3. the warp's tiles, block by block.
    for (int kb = 0; kb < MMA_KB; ++kb) {
      float part[MMA_MI][MMA_NJ][4];
      ZERO_PART();
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // k 0..15, then 16..31 of the block
        uint a[MMA_MI][4];
#pragma unroll
        for (int i = 0; i < MMA_MI; ++i) {
          const int r = kb * TILE_R + wr0 + 16 * i + g;
          const __local uint* q0 = wql + r * QS;
          const __local uint* q1 = q0 + 8 * QS;
          const int sh = (tig & 1) * 16;
#if WTYPE == 8
          const int w0 = h * 4 + (tig >> 1);  // bytes 16h + 2tig ..
#else
          const int w0 = tig >> 1;  // nibble bytes 2tig ..
#endif
#if HW == 1
          // bit 16h + j of qh is bit 4 of value 16h + j
          const uint hb0 = whl[r] >> (16 * h + 2 * tig), hb1 = whl[r + 8] >> (16 * h + 2 * tig);
          const uint t0 = top_bits(hb0), t1 = top_bits(hb1);
          const uint t2 = top_bits(hb0 >> 8), t3 = top_bits(hb1 >> 8);
#elif HW == 2
          // bits 2j, 2j + 1 of half h's word are the top bits of its value j
          const uint hb0 = whl[2 * r + h] >> (4 * tig), hb1 = whl[2 * (r + 8) + h] >> (4 * tig);
          const uint t0 = top_bits(hb0), t1 = top_bits(hb1);
          const uint t2 = top_bits(hb0 >> 16), t3 = top_bits(hb1 >> 16);
#else
          const uint t0 = 0u, t1 = 0u, t2 = 0u, t3 = 0u;
#endif
          a[i][0] = codes((q0[w0] >> sh) & 0xffffu, h, t0);
          a[i][1] = codes((q1[w0] >> sh) & 0xffffu, h, t1);
          a[i][2] = codes((q0[w0 + 2] >> sh) & 0xffffu, h, t2);
          a[i][3] = codes((q1[w0 + 2] >> sh) & 0xffffu, h, t3);
        }
#pragma unroll
        for (int j = 0; j < MMA_NJ; ++j) {
          const uint4 b = xl[(wn0 + 8 * j + g) * LDQ + (kb * 2 + h) * 4 + tig];
#pragma unroll
          for (int i = 0; i < MMA_MI; ++i) {
            mma16816(part[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b.x, b.y);
#if MMA_SPLIT
            mma16816(part[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b.z, b.w);
#endif
          }
        }
#if MM_HALVES
        // acc += (scale of half h) * part
        APPLY_PART(h ? wml : wdl);
        ZERO_PART();
#endif
      }
#if !MM_HALVES
      // acc += d * part (+ m * block sum of x)
      APPLY_PART(wdl);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#pragma unroll
  for (int i = 0; i < MMA_MI; ++i) {
#pragma unroll
    for (int j = 0; j < MMA_NJ; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int row = row0 + wr0 + 16 * i + g + (c >> 1) * 8;
        const int tok = tok0 + wn0 + 8 * j + 2 * tig + (c & 1);
        if (row < n_rows && tok < n_tok) {
          __global float* o = out + (size_t)tok * ld_out + out_off + row;
          *o = accumulate ? *o + acc[i][j][c] : acc[i][j][c];
        }
      }
    }
  }
}

// x (n_tok rows of ld_x floats) -> xp and xs, the layout matmul_mma reads:
// per token, per 16-value chunk and per tig one uint4 {hi(2tig, 2tig+1),
// hi(2tig+8, 2tig+9), lo(2tig, 2tig+1), lo(2tig+8, 2tig+9)} of fp16 pairs
// (first value in the low half), where hi is x rounded to 11 significant
// bits (exactly an fp16 value in its normal range) and lo the exact fp32
// remainder rounded to fp16; xs[tok * n_blocks + b] the sum of block b.
// One work-item per uint4 (consecutive items: consecutive uint4 and 64-byte
// chunks of x), the 8 of a block sum it by shuffles; launched in whole warps
// (global0 a multiple of 32, items past n_in / 4 take zeros and store
// nothing).
__kernel void pack_x_mma(const __global float* x, int ld_x, int n_in, int n_tok,
                         __global uint4* xp, __global float* xs) {
  const int e = get_global_id(0), tok = get_global_id(1);
  if (tok >= n_tok) return;  // whole rows of the launch
  const bool in = e < n_in / 4;
  const int q = e & 7;  // 4 * (chunk in the block) + tig
  const __global float* c = x + (size_t)tok * ld_x + 16 * (e >> 2) + 2 * (q & 3);
  const float4 v = in ? (float4)(c[0], c[1], c[8], c[9]) : (float4)(0.0f);
  const float4 hi = as_float4((as_uint4(v) + (uint4)(0x1000u)) & (uint4)(0xffffe000u));
  float sum = (v.x + v.y) + (v.z + v.w);
  sum += shfl_bfly(sum, 4);
  sum += shfl_bfly(sum, 2);
  sum += shfl_bfly(sum, 1);
  if (!in) return;
  __global half* dst = (__global half*)(xp + (size_t)tok * (n_in / 4) + e);
  vstore_half4_rte(hi, 0, dst);
  vstore_half4_rte(v - hi, 1, dst);
  if (q == 0) xs[(size_t)tok * (n_in / KB) + (e >> 3)] = sum;
}
