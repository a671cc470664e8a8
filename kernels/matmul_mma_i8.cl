// Tensor-core matmul on integer mma for 4-bit weights whose codes need no
// high bits (WTYPE 2 Q4_0, 3 Q4_1, 12 Q4_K in the device block layout of
// engine/cl/block_layout.h), NVIDIA only: mma.sync m16n8k32 with unsigned
// 8-bit weights, signed 8-bit activations and int32 accumulation, by inline
// PTX. Same contract as matmul.cl and matmul_mma.cl:
// out[t * ld_out + out_off + r] (+)= sum_k W[r][k] * x[t][k]. The host takes
// it instead of matmul_mma.cl for these types after the same start-up
// self-test (ClPrefill::mma_ok).
//
// Accuracy: x is quantized per block of 32 values to 15-bit integers,
// q = round(x * 16383 / max|x|), kept as two int8 halves q = 256 hi + lo
// (hi in -64..64, lo in -128..127); both halves go through the mma and
// hi * 256 + lo is formed in int32, exactly. So each product uses the
// quantized weights exactly and x to 15 bits of its block's largest value
// (relative error ~3e-5 per product on random data; kernels/matmul_x16.cl
// keeps 16 bits per 16 values on CPUs).
//
// Per block, with the unsigned codes c (0..15) in the mma and the offset 8
// folded in as the mma's initial value -8 sum(q): s = sum (c - 8) q, with
// |s| <= 32 * 8 * 16383 < 2^22, so float(s) is one integer add and one
// float subtract (the float 1.5 * 2^23 + s has s in its low mantissa bits)
// instead of a conversion instruction (a quarter of the float rate). Then
//   Q4_0 (d (c - 8)):         acc += d * dx * s
//   Q4_1, Q4_K (d c + m):     acc += d * dx * s + (m + 8 d) * dx * sum(q)
// with dx = max|x| / 16383 the block's activation scale.
//
// Activations come packed (pack_x_i8, once per input): per token, per block
// and per tig 0..3 one uint4 {hi(4tig..4tig+3), hi(16+4tig..), lo(4tig..),
// lo(16+4tig..)}, bytes in k order (the B fragment words of both halves), and
// per token pair and block the scales and sums the epilogue needs (below).
//
// Work split as matmul_mma.cl: a work-group of MMA_WR x MMA_WN warps computes
// TILE_R rows x TILE_T tokens, each warp MMA_MI m16 tiles x MMA_NJ n8 tiles.
// Per stage of MMA_KB blocks the raw 16-byte nibble blocks and scale words of
// its rows and its tokens' packed x and pair records are copied to local
// memory by asynchronous copies (cp.async), MMA_STAGES - 1 stages ahead into
// a ring of MMA_STAGES buffers, so one barrier per stage suffices and no
// registers hold loads in flight. Each warp builds its A fragments from one
// word per row and block (a0 = low nibbles of word tig of row g, a2 = its
// high nibbles; a1, a3 the same of row g + 8) and loads each B pair with one
// 16-byte load. H200, pp512 against matmul_mma.cl in the same call:
// Llama-3.2-1B shape Q4_0 40.4-40.7k against 29.2k tok/s (the register-staged
// first form of this kernel: 32.7k; the ring 36.2k with 1 x 16 rows per warp,
// 40.7k with 2 x 16).
//
// Pair records: per token pair and block, float4 {dx, dx', bias, bias'}
// (bias = -8 sum(q), the first mma's initial value, as int bits) and, for
// the types with a min term, float4 {dx sum(q), dx' sum(q'), -, -}.
// Fragment layouts (PTX ISA, mma.m16n8k32 .u8/.s8): lane = 4 g + tig;
// A regs: (row g, k 4tig..+3), (row g+8, k 4tig..), (row g, k 16+4tig..),
// (row g+8, k 16+4tig..); B regs: (k 4tig..+3, n g), (k 16+4tig.., n g);
// C: (row g, n 2tig), (row g, n 2tig+1), (row g+8, n 2tig), (row g+8, n 2tig+1).
// Nibble byte j of a block holds value j (low) and j + 16 (high), so word
// tig's low nibbles are values 4tig..4tig+3 and its high nibbles 16+4tig...
//
// Launch: global (ceil(n_rows / TILE_R) * WG_THREADS, ceil(n_tok / TILE_T)),
// local (WG_THREADS, 1). n_in is a multiple of 32.
// pack_x_i8: global (n_in / 8 rounded up to a multiple of 32, n_tok),
// local (a multiple of 32, 1).

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef MMA_MI
#define MMA_MI 1
#endif
#ifndef MMA_NJ
#define MMA_NJ 4
#endif
#ifndef MMA_WR
#define MMA_WR 8
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

#if WTYPE != 2 && WTYPE != 3 && WTYPE != 12
#error "matmul_mma_i8: Q4_0, Q4_1 or Q4_K weights only"
#endif
#if MMA_STAGES < 2 || MMA_STAGES > 4
#error "matmul_mma_i8: MMA_STAGES 2 to 4"
#endif
#define MM_MIN (WTYPE != 2)
#define SW (MM_MIN ? 2 : 1)  // float4s of a token pair's record a stage reads

#define KB 32
#define X_CODE_MAX 16383.0f
#define TILE_R (MMA_WR * MMA_MI * 16)
#define TILE_T (MMA_WN * MMA_NJ * 8)
#define WG_THREADS (MMA_WR * MMA_WN * 32)
#define XQ (MMA_KB * 4)                  // packed uint4 per token per stage
#define LDQ (XQ % 8 == 4 ? XQ : XQ + 4)  // their row stride: 16 words mod 32
#define MAGIC 0x4B400000                 // 1.5 * 2^23 as float bits
#define MAGIC_F 12582912.0f

// c = A * B + c (16x8x32, u8 x s8, s32 accumulate).
inline void mma_u8s8(int* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  int d0, d1, d2, d3;
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};"
      : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]),
        "r"(c[3]));
  c[0] = d0;
  c[1] = d1;
  c[2] = d2;
  c[3] = d3;
}

inline float shfl_bfly_f(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

inline int shfl_bfly_i(int v, int mask) {
  int r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(mask));
  return r;
}

// The integer s (|s| < 2^22) as a float.
inline float small_int_to_float(int s) { return as_float(s + MAGIC) - MAGIC_F; }

#define W_ITEMS ((TILE_R * MMA_KB + WG_THREADS - 1) / WG_THREADS)
#define X_ITEMS ((TILE_T * XQ + WG_THREADS - 1) / WG_THREADS)
#define S_ITEMS ((TILE_T / 2 * MMA_KB * SW + WG_THREADS - 1) / WG_THREADS)

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

// A block's scale words: Q4_0 the aligned word holding its half d (the half
// picked by the block index's parity), Q4_1 half2 {d, m}, Q4_K float2 {d, m}.
#if WTYPE == 2
#define SWORDS 1
#define CP_SCALE(dst, blk, ok) cp_async4((dst), (const __global uint*)ws + ((blk) >> 1), (ok) ? 4 : 0)
#elif WTYPE == 3
#define SWORDS 1
#define CP_SCALE(dst, blk, ok) cp_async4((dst), (const __global uint*)ws + (blk), (ok) ? 4 : 0)
#else
#define SWORDS 2
#define CP_SCALE(dst, blk, ok) cp_async8((dst), (const __global uint2*)ws + (blk), (ok) ? 8 : 0)
#endif

// Stage s_ (blocks s_ * MMA_KB ..) into buffer s_ % MMA_STAGES: nibble
// blocks, scale words, packed codes, pair records; zeros past the matrix,
// the blocks or the tokens. One commit group per stage.
#define ISSUE(s_)                                                                                \
  do {                                                                                           \
    const int b0_ = (s_)*MMA_KB, buf_ = (s_) % MMA_STAGES;                                       \
    _Pragma("unroll") for (int it = 0; it < W_ITEMS; ++it) {                                     \
      const int e = lid + it * WG_THREADS;                                                       \
      if (e < TILE_R * MMA_KB) {                                                                 \
        const int kb = e % MMA_KB, r = e / MMA_KB, row = row0 + r, b = b0_ + kb;                 \
        const bool ok = row < n_rows && b < n_blocks;                                            \
        const size_t blk = ok ? (size_t)row * (size_t)n_blocks + (size_t)b : 0;                  \
        cp_async16(wql_s + ((buf_ * MMA_KB + kb) * TILE_R + r) * 16, wq + blk, ok ? 16 : 0);      \
        CP_SCALE(wsl_s + ((buf_ * MMA_KB + kb) * TILE_R + r) * SWORDS * 4, blk, ok);             \
      }                                                                                          \
    }                                                                                            \
    _Pragma("unroll") for (int it = 0; it < X_ITEMS; ++it) {                                     \
      const int e = lid + it * WG_THREADS;                                                       \
      if (e < TILE_T * XQ) {                                                                     \
        const int tok = tok0 + e / XQ, q = b0_ * 4 + e % XQ;                                     \
        const bool ok = tok < n_tok && q < n_blocks * 4;                                         \
        cp_async16(xl_s + (buf_ * (TILE_T * LDQ) + (e / XQ) * LDQ + e % XQ) * 16,                \
                   xp + (ok ? (size_t)tok * (size_t)(n_blocks * 4) + q : 0), ok ? 16 : 0);       \
      }                                                                                          \
    }                                                                                            \
    _Pragma("unroll") for (int it = 0; it < S_ITEMS; ++it) {                                     \
      const int e = lid + it * WG_THREADS;                                                       \
      if (e < TILE_T / 2 * MMA_KB * SW) {                                                        \
        const int h = e % SW, kb = (e / SW) % MMA_KB, p = e / (SW * MMA_KB);                     \
        const int pair = tok0 / 2 + p, b = b0_ + kb;                                             \
        const bool ok = 2 * pair < n_tok && b < n_blocks;                                        \
        cp_async16(xsl_s + (((buf_ * MMA_KB + kb) * (TILE_T / 2) + p) * SW + h) * 16,            \
                   xs + (ok ? ((size_t)pair * (size_t)n_blocks + b) * 2 + h : 0), ok ? 16 : 0); \
      }                                                                                          \
    }                                                                                            \
    cp_commit();                                                                                 \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void matmul_mma_i8(
    const __global uint4* wq, const __global void* ws, int n_in, int n_rows,
    const __global uint4* xp, const __global float4* xs, int n_tok, __global float* out,
    int ld_out, int out_off, int accumulate) {
  __local uint4 wql[MMA_STAGES * MMA_KB * TILE_R];
  __local uint4 wsl4[(MMA_STAGES * MMA_KB * TILE_R * SWORDS + 3) / 4];  // 16-byte aligned
  __local uint* const wsl = (__local uint*)wsl4;
  __local uint4 xl[MMA_STAGES * TILE_T * LDQ];
  __local float4 xsl[MMA_STAGES * MMA_KB * (TILE_T / 2) * SW];
  const uint wql_s = smem_addr(wql), wsl_s = smem_addr(wsl4), xl_s = smem_addr(xl),
             xsl_s = smem_addr(xsl);
  const int lid = get_local_id(0);
  const int lane = lid & 31;
  const int warp = lid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wr0 = (warp % MMA_WR) * (MMA_MI * 16);  // warp's first row in the tile
  const int wn0 = (warp / MMA_WR) * (MMA_NJ * 8);   // and first token
  const int row0 = get_group_id(0) * TILE_R;
  const int tok0 = get_group_id(1) * TILE_T;
  const int n_blocks = n_in / KB;
  const int n_stages = (n_blocks + MMA_KB - 1) / MMA_KB;

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
  for (int s = 0; s < MMA_STAGES - 1; ++s) ISSUE(s);

  for (int s = 0; s < n_stages; ++s) {
    CP_WAIT();                       // this work-item's copies of stage s arrived
    barrier(CLK_LOCAL_MEM_FENCE);    // everyone's; and stage s - 1's buffer is free
    ISSUE(s + MMA_STAGES - 1);
    const int buf = s % MMA_STAGES;
#pragma unroll
    for (int kb = 0; kb < MMA_KB; ++kb) {
      const int sk = buf * MMA_KB + kb;
      uint a[MMA_MI][4];
#pragma unroll
      for (int i = 0; i < MMA_MI; ++i) {
        const __local uint* w = (const __local uint*)(wql + sk * TILE_R + wr0 + 16 * i + g);
        const uint w0 = w[tig], w1 = w[8 * 4 + tig];
        a[i][0] = w0 & 0x0f0f0f0fu;
        a[i][1] = w1 & 0x0f0f0f0fu;
        a[i][2] = (w0 >> 4) & 0x0f0f0f0fu;
        a[i][3] = (w1 >> 4) & 0x0f0f0f0fu;
      }
      uint4 b[MMA_NJ];
      int part[MMA_MI][MMA_NJ][4];
#pragma unroll
      for (int j = 0; j < MMA_NJ; ++j) {
        b[j] = xl[buf * (TILE_T * LDQ) + (wn0 + 8 * j + g) * LDQ + kb * 4 + tig];
#pragma unroll
        for (int i = 0; i < MMA_MI; ++i) {
#pragma unroll
          for (int c = 0; c < 4; ++c) part[i][j][c] = 0;
          mma_u8s8(part[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j].x, b[j].y);
        }
      }
      float4 rec[MMA_NJ];  // the token pair's {dx, dx', bias, bias'}
#pragma unroll
      for (int j = 0; j < MMA_NJ; ++j) {
        rec[j] = xsl[(sk * (TILE_T / 2) + (wn0 + 8 * j) / 2 + tig) * SW];
        const int bias0 = as_int(rec[j].z), bias1 = as_int(rec[j].w);
#pragma unroll
        for (int i = 0; i < MMA_MI; ++i) {
          part[i][j][0] = part[i][j][0] * 256 + bias0;
          part[i][j][1] = part[i][j][1] * 256 + bias1;
          part[i][j][2] = part[i][j][2] * 256 + bias0;
          part[i][j][3] = part[i][j][3] * 256 + bias1;
          mma_u8s8(part[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j].z, b[j].w);
        }
      }
      // acc += d * dx * s (+ (m + 8 d) * dx * sum(q))
#pragma unroll
      for (int i = 0; i < MMA_MI; ++i) {
        const int r = wr0 + 16 * i + g;
#if WTYPE == 2
        const int b = s * MMA_KB + kb;
        const int par0 = ((row0 + r) * n_blocks + b) & 1, par1 = ((row0 + r + 8) * n_blocks + b) & 1;
        const float d0 = vload_half(par0, (const __local half*)(wsl + sk * TILE_R + r));
        const float d1 = vload_half(par1, (const __local half*)(wsl + sk * TILE_R + r + 8));
#elif WTYPE == 3
        const float2 dm0 = vload_half2(0, (const __local half*)(wsl + sk * TILE_R + r));
        const float2 dm1 = vload_half2(0, (const __local half*)(wsl + sk * TILE_R + r + 8));
#else
        const float2 dm0 = as_float2(vload2(sk * TILE_R + r, wsl));
        const float2 dm1 = as_float2(vload2(sk * TILE_R + r + 8, wsl));
#endif
#if MM_MIN
        const float d0 = dm0.x, d1 = dm1.x;
#if WTYPE == 3
        const float m0 = dm0.y + 8.0f * d0, m1 = dm1.y + 8.0f * d1;
#else
        const float m0 = 8.0f * d0 - dm0.y, m1 = 8.0f * d1 - dm1.y;
#endif
#endif
#pragma unroll
        for (int j = 0; j < MMA_NJ; ++j) {
          acc[i][j][0] += small_int_to_float(part[i][j][0]) * (d0 * rec[j].x);
          acc[i][j][1] += small_int_to_float(part[i][j][1]) * (d0 * rec[j].y);
          acc[i][j][2] += small_int_to_float(part[i][j][2]) * (d1 * rec[j].x);
          acc[i][j][3] += small_int_to_float(part[i][j][3]) * (d1 * rec[j].y);
#if MM_MIN
          const float4 sx = xsl[(sk * (TILE_T / 2) + (wn0 + 8 * j) / 2 + tig) * SW + 1];
          acc[i][j][0] += m0 * sx.x;
          acc[i][j][1] += m0 * sx.y;
          acc[i][j][2] += m1 * sx.x;
          acc[i][j][3] += m1 * sx.y;
#endif
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");  // nothing left in flight at exit

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

// The four low bytes of v, packed (value .x in byte 0).
inline uint pack_bytes(int4 v) {
  return (uint)(v.x & 0xff) | ((uint)(v.y & 0xff) << 8) | ((uint)(v.z & 0xff) << 16) |
         ((uint)v.w << 24);
}

// x (n_tok rows of ld_x floats) -> xp and xs, the layout matmul_mma_i8 reads
// (see the top of this file): per token, block and tig one uint4 of the
// 15-bit codes' hi and lo bytes; per token pair and block two float4s
// {dx, dx', bias, bias'} (bias = -8 sum(q) as int bits) and {dx sum(q),
// dx' sum(q'), -, -}, the even token's values first. One work-item per
// uint4 (the 4 of a block share max|x| and sum(q) by shuffles); launched in
// whole warps (global0 a multiple of 32; items past n_in / 8 take zeros and
// store nothing).
__kernel void pack_x_i8(const __global float* x, int ld_x, int n_in, int n_tok,
                        __global uint4* xp, __global float* xs) {
  const int e = get_global_id(0), tok = get_global_id(1);
  if (tok >= n_tok) return;  // whole rows of the launch
  const bool in = e < n_in / 8;
  const int tig = e & 3;
  const __global float* c = x + (size_t)tok * ld_x + 32 * (e >> 2) + 4 * tig;
  const float4 v0 = in ? vload4(0, c) : (float4)(0.0f);
  const float4 v1 = in ? vload4(4, c) : (float4)(0.0f);  // values 16 + 4 tig ..
  const float4 m4 = fmax(fabs(v0), fabs(v1));
  float amax = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
  amax = fmax(amax, shfl_bfly_f(amax, 2));
  amax = fmax(amax, shfl_bfly_f(amax, 1));
  const float id = amax > 0.0f ? X_CODE_MAX / amax : 0.0f;
  const int4 q0 = convert_int4_rte(v0 * id), q1 = convert_int4_rte(v1 * id);
  const int4 qs = q0 + q1;
  int sum = (qs.x + qs.y) + (qs.z + qs.w);
  sum += shfl_bfly_i(sum, 2);
  sum += shfl_bfly_i(sum, 1);
  if (!in) return;
  const int4 h0 = (q0 + 128) >> 8, h1 = (q1 + 128) >> 8;  // round(q / 256)
  const int4 l0 = q0 - (h0 << 8), l1 = q1 - (h1 << 8);
  xp[(size_t)tok * (n_in / 8) + e] =
      (uint4)(pack_bytes(h0), pack_bytes(h1), pack_bytes(l0), pack_bytes(l1));
  if (tig == 0) {
    const float dx = amax / X_CODE_MAX;
    const size_t rec = ((size_t)(tok >> 1) * (size_t)(n_in / KB) + (size_t)(e >> 2)) * 8;
    xs[rec + (tok & 1)] = dx;
    ((__global int*)xs)[rec + 2 + (tok & 1)] = -8 * sum;  // moved as bits, never computed with
    xs[rec + 4 + (tok & 1)] = dx * (float)sum;
  }
}
