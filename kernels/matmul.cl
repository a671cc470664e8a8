// Matrix-matrix kernels for batched prompt prefill, for one weight type chosen
// at build time with -DWTYPE=<GGML type id> (0 F32, 1 F16, 2 Q4_0, 3 Q4_1,
// 8 Q8_0, 30 BF16, and the types of kernels/quant_blocks.cl, which is built
// before this file), in the block layout of engine/cl/block_layout.h
// (payloads and scale records in separate buffers).
//
// matmul: out[t][r] (+)= sum_k W[r][k] * x[t][k] for the n_tok tokens of a
// chunk. A work-group computes a tile of TILE_R rows x TILE_T tokens and walks
// k in steps of one quant block (32 values). Per step it
//   1. dequantizes its TILE_R x 32 weights in registers, each work-item a few
//      units of 8 values (one 32-bit word of nibbles), and stores them k-major
//      into local memory wl[32][TILE_R] (row r fastest: conflict-free);
//   2. copies the TILE_T x 32 activations into local memory xl[32][TILE_T+1],
//      k-major too;
//   3. after a barrier, each work-item multiplies its register tile: MM_VR
//      consecutive rows held as one vector (floatN) times MM_WT tokens, strided
//      by MM_NT so neighbouring work-items read neighbouring local words. Per k
//      that is one vector load of weights and MM_WT scalar (broadcast) loads of
//      x for MM_WT vector multiply-adds.
// Every weight is therefore read from global memory once per tile of TILE_T
// tokens (ceil(chunk / TILE_T) times per chunk, from cache after the first),
// instead of once per token as in decode. Explicit vectors (not the
// implicit vectorization of a CPU runtime across work-items) keep PoCL fast:
// one work-item's tile is straight-line SIMD code. Rows past n_rows and
// tokens past n_tok are computed on zeros and not stored; F32/F16 rows need
// not hold whole blocks of 32 (stories260K's FFN is 172 wide).
//
// CPU variant (-DMM_DIRECT=1, PoCL's default): no local memory and no
// barriers, which PoCL would turn into loops that spill every work-item's
// accumulators at each barrier. A work-item takes MM_VR rows x MM_WT
// consecutive tokens and vectorizes along k instead: per 8 values of k it
// dequantizes its rows' weights in registers (vector shifts and masks of the
// 16 nibble bytes), loads 8 values of each token's x (from the cache, where a
// CPU's "local memory" would live anyway) and does MM_VR * MM_WT float8
// multiply-adds; the 8 lanes are summed once at the end. Each weight is read
// once per MM_WT tokens, and rows/tokens past the end are clamped for reading
// and not stored.
//
// embed_rows: x[t] = dequantized row ids[id_off + t] of the embedding matrix,
// the ids read on the device.
//
// Only core OpenCL 1.2: fp16 is read with vload_half (no cl_khr_fp16), no
// subgroups. Tunables (host defaults per device type in engine/cl/prefill.cpp):
// MM_VR rows per work-item (1, 2, 4, 8 or 16), MM_NR work-items along rows,
// MM_WT tokens per work-item, MM_NT work-items along tokens; a work-group is
// (MM_NR, MM_NT) and its tile TILE_R = MM_NR * MM_VR rows by
// TILE_T = MM_NT * MM_WT tokens.

#ifndef WTYPE
#define WTYPE 2
#endif
#ifndef MM_VR
#define MM_VR 4
#endif
#ifndef MM_NR
#define MM_NR 16
#endif
#ifndef MM_WT
#define MM_WT 4
#endif
#ifndef MM_NT
#define MM_NT 16
#endif

#ifndef MM_DIRECT
#define MM_DIRECT 0
#endif

#define KB 32
#define TILE_R (MM_NR * MM_VR)
#define TILE_T (MM_NT * MM_WT)
#define LDX (TILE_T + 1)  // padded: the transposed stores of step 2 spread over banks
#define WG_SIZE (MM_NR * MM_NT)

#if WTYPE != 0 && WTYPE != 1 && WTYPE != 2 && WTYPE != 3 && WTYPE != 8 && WTYPE != 30 && \
    !QT_GENERIC(WTYPE)
#error "unsupported WTYPE"
#endif
#define QUANTIZED (WTYPE != 0 && WTYPE != 1 && WTYPE != 30)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if MM_VR == 1
typedef float floatR;
#define VLOADR(i, p) ((p)[i])
#define VSTORER(v, i, p) ((p)[i] = (v))
#else
typedef CAT(float, MM_VR) floatR;
#define VLOADR(i, p) CAT(vload, MM_VR)(i, p)
#define VSTORER(v, i, p) CAT(vstore, MM_VR)(v, i, p)
#endif

// Dequantizes unit `u` (0..3) of block `b` of row `row` into 8 values and
// stores them at wl[k * TILE_R + r] for their offsets k within the block.
// Q4_0/Q4_1: word u of the 16 nibble bytes holds values 4u..4u+3 (low
// nibbles) and 4u+16..4u+19 (high). Q8_0: words 2u, 2u+1 hold values
// 8u..8u+7. F32/F16/BF16: values 8u..8u+7 of the block, zero past n_in. The
// other types: values 8u..8u+7 by block_values8.
inline void dequant_unit(const __global uint* wq, const __global void* ws, int n_in, int row, int b,
                         int u, int r, __local float* wl) {
#if QT_GENERIC(WTYPE)
  const size_t blk = (size_t)row * (size_t)(n_in / KB) + (size_t)b;
  float v[8];
  vstore8(block_values8(WTYPE, (const __global uchar*)wq, (const __global uchar*)ws, blk, u), 0,
          v);
  for (int i = 0; i < 8; ++i) wl[(8 * u + i) * TILE_R + r] = v[i];
#elif WTYPE == 2 || WTYPE == 3
  const size_t blk = (size_t)row * (size_t)(n_in / KB) + (size_t)b;
  const uint word = wq[blk * 4 + u];
#if WTYPE == 2
  const float d = vload_half(blk, (const __global half*)ws);
  const float m = -8.0f * d;
#else
  const float2 dm = vload_half2(blk, (const __global half*)ws);
  const float d = dm.x, m = dm.y;
#endif
  for (int i = 0; i < 4; ++i) {
    wl[(4 * u + i) * TILE_R + r] = d * (float)((word >> (8 * i)) & 15u) + m;
    wl[(4 * u + 16 + i) * TILE_R + r] = d * (float)((word >> (8 * i + 4)) & 15u) + m;
  }
#elif WTYPE == 8
  const size_t blk = (size_t)row * (size_t)(n_in / KB) + (size_t)b;
  const float d = vload_half(blk, (const __global half*)ws);
  for (int h = 0; h < 2; ++h) {
    const uint word = wq[blk * 8 + 2 * u + h];
    // Sign-extend byte i by shifts: no dynamic vector indexing (not core CL).
    for (int i = 0; i < 4; ++i) {
      wl[(8 * u + 4 * h + i) * TILE_R + r] = d * (float)(((int)(word << (24 - 8 * i))) >> 24);
    }
  }
#else
  const int k0 = b * KB + 8 * u;
  const size_t base = (size_t)row * (size_t)n_in;
  for (int i = 0; i < 8; ++i) {
    const int k = k0 + i;
    const float v = k < n_in ? plain_value(WTYPE, (const __global uchar*)wq, base + k) : 0.0f;
    wl[(8 * u + i) * TILE_R + r] = v;
  }
#endif
}

#if !MM_DIRECT
// out[t * ld_out + out_off + r] = (accumulate ? out[...] : 0) + dot(W[r], x[t]),
// x[t] = x + t * ld_x, for r < n_rows, t < n_tok. Launch: global
// (ceil(n_rows / TILE_R) * MM_NR, ceil(n_tok / TILE_T) * MM_NT), local
// (MM_NR, MM_NT). `wq` is the payload buffer (uint words), `ws` the scales.
__kernel __attribute__((reqd_work_group_size(MM_NR, MM_NT, 1))) void matmul(
    const __global uint* wq, const __global void* ws, int n_in, int n_rows,
    const __global float* x, int ld_x, int n_tok, __global float* out, int ld_out, int out_off,
    int accumulate) {
  __local float wl[KB * TILE_R];
  __local float xl[KB * LDX];
  const int lr = get_local_id(0);
  const int lt = get_local_id(1);
  const int lid = lt * MM_NR + lr;
  const int row0 = get_group_id(0) * TILE_R;
  const int tok0 = get_group_id(1) * TILE_T;

  floatR acc[MM_WT];
  for (int j = 0; j < MM_WT; ++j) acc[j] = (floatR)(0.0f);

  const int n_blocks = (n_in + KB - 1) / KB;
  for (int b = 0; b < n_blocks; ++b) {
    // 1. weights: TILE_R rows x 4 units of 8 values, row fastest.
    for (int unit = lid; unit < TILE_R * 4; unit += WG_SIZE) {
      const int r = unit % TILE_R;
      const int u = unit / TILE_R;
      const int row = row0 + r;
      if (row < n_rows) {
        dequant_unit(wq, ws, n_in, row, b, u, r, wl);
      } else {
        for (int i = 0; i < 8; ++i) wl[(8 * u + i) * TILE_R + r] = 0.0f;
      }
    }
    // 2. activations: TILE_T tokens x 32, k fastest (coalesced global reads).
    for (int e = lid; e < TILE_T * KB; e += WG_SIZE) {
      const int kk = e % KB;
      const int t = e / KB;
      const int k = b * KB + kk;
      const int tok = tok0 + t;
      xl[kk * LDX + t] = tok < n_tok && k < n_in ? x[(size_t)tok * ld_x + k] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // 3. the register tile.
#pragma unroll 8
    for (int kk = 0; kk < KB; ++kk) {
      const floatR w = VLOADR(0, wl + kk * TILE_R + lr * MM_VR);
      const __local float* xk = xl + kk * LDX + lt;
      for (int j = 0; j < MM_WT; ++j) acc[j] = mad((floatR)(xk[j * MM_NT]), w, acc[j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  const int r = row0 + lr * MM_VR;
  for (int j = 0; j < MM_WT; ++j) {
    const int tok = tok0 + lt + j * MM_NT;
    if (tok >= n_tok || r >= n_rows) continue;
    __global float* o = out + (size_t)tok * ld_out + out_off + r;
    if (r + MM_VR <= n_rows) {
      floatR v = acc[j];
      if (accumulate) v += VLOADR(0, o);
      VSTORER(v, 0, o);
    } else {
      const float* a = (const float*)&acc[j];
      for (int i = 0; i < n_rows - r; ++i) o[i] = accumulate ? o[i] + a[i] : a[i];
    }
  }
}

#else  // MM_DIRECT

// Values 8 * k8 .. 8 * k8 + 7 of block b of `row`, k8 < 4 (whole blocks only
// for F32/F16: the caller takes the scalar tail otherwise).
inline float8 dequant8(const __global uint* wq, const __global void* ws, int n_in, int row, int b,
                       int k8) {
#if WTYPE == 0
  return vload8(0, (const __global float*)wq + (size_t)row * n_in + b * KB + 8 * k8);
#elif WTYPE == 1
  return vload_half8(0, (const __global half*)wq + (size_t)row * n_in + b * KB + 8 * k8);
#elif WTYPE == 30
  const ushort8 h = vload8(0, (const __global ushort*)wq + (size_t)row * n_in + b * KB + 8 * k8);
  return as_float8(convert_uint8(h) << 16);
#else
  const size_t blk = (size_t)row * (size_t)(n_in / KB) + (size_t)b;
#if QT_GENERIC(WTYPE)
  return block_values8(WTYPE, (const __global uchar*)wq, (const __global uchar*)ws, blk, k8);
#elif WTYPE == 8
  const char8 c = as_char8(vload2(k8, wq + blk * 8));
  return vload_half(blk, (const __global half*)ws) * convert_float8(c);
#else
  // values 0..15 are the low nibbles of bytes 0..15, values 16..31 the high.
  const uchar8 bytes = as_uchar8(vload2(k8 & 1, wq + blk * 4));
  const uchar8 code = k8 < 2 ? (bytes & (uchar8)(15)) : (bytes >> (uchar8)(4));
#if WTYPE == 2
  const float d = vload_half(blk, (const __global half*)ws);
  return d * convert_float8(code) - 8.0f * d;
#else
  const float2 dm = vload_half2(blk, (const __global half*)ws);
  return dm.x * convert_float8(code) + dm.y;
#endif
#endif
#endif
}

inline float hsum8(float8 v) {
  const float4 a = v.lo + v.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}

// Same contract and launch as the tiled matmul above.
__kernel void matmul(const __global uint* wq, const __global void* ws, int n_in, int n_rows,
                     const __global float* x, int ld_x, int n_tok, __global float* out,
                     int ld_out, int out_off, int accumulate) {
  const int r0 = get_group_id(0) * TILE_R + get_local_id(0) * MM_VR;
  const int t0 = get_group_id(1) * TILE_T + get_local_id(1) * MM_WT;
  if (r0 >= n_rows || t0 >= n_tok) return;
  int rows[MM_VR];
  const __global float* xt[MM_WT];
  for (int i = 0; i < MM_VR; ++i) rows[i] = min(r0 + i, n_rows - 1);
  for (int j = 0; j < MM_WT; ++j) xt[j] = x + (size_t)min(t0 + j, n_tok - 1) * ld_x;

  float8 acc[MM_VR][MM_WT];
  for (int i = 0; i < MM_VR; ++i)
    for (int j = 0; j < MM_WT; ++j) acc[i][j] = (float8)(0.0f);
  const int n_full = n_in / KB;  // whole blocks (all of them for quantized types)
  for (int b = 0; b < n_full; ++b) {
    for (int k8 = 0; k8 < 4; ++k8) {
      float8 w[MM_VR];
      for (int i = 0; i < MM_VR; ++i) w[i] = dequant8(wq, ws, n_in, rows[i], b, k8);
      for (int j = 0; j < MM_WT; ++j) {
        const float8 xv = vload8(0, xt[j] + b * KB + 8 * k8);
        for (int i = 0; i < MM_VR; ++i) acc[i][j] = mad(w[i], xv, acc[i][j]);
      }
    }
  }
  float sum[MM_VR][MM_WT];
  for (int i = 0; i < MM_VR; ++i)
    for (int j = 0; j < MM_WT; ++j) sum[i][j] = hsum8(acc[i][j]);
#if !QUANTIZED
  for (int k = n_full * KB; k < n_in; ++k) {  // F32/F16 rows that end mid-block
    for (int i = 0; i < MM_VR; ++i) {
      const float wv = plain_value(WTYPE, (const __global uchar*)wq, (size_t)rows[i] * n_in + k);
      for (int j = 0; j < MM_WT; ++j) sum[i][j] += wv * xt[j][k];
    }
  }
#endif
  for (int j = 0; j < MM_WT; ++j) {
    if (t0 + j >= n_tok) break;
    __global float* o = out + (size_t)(t0 + j) * ld_out + out_off;
    for (int i = 0; i < MM_VR; ++i) {
      if (r0 + i < n_rows) o[r0 + i] = accumulate ? o[r0 + i] + sum[i][j] : sum[i][j];
    }
  }
}
#endif  // MM_DIRECT

// x[t * n_in + i] = W[ids[id_off + t]][i] for t < n_tok. Launch: global
// (n_in, n_tok).
__kernel void embed_rows(const __global uint* wq, const __global void* ws, int n_in,
                         const __global int* ids, int id_off, int n_tok, __global float* x) {
  const int i = get_global_id(0);
  const int t = get_global_id(1);
  if (i >= n_in || t >= n_tok) return;
  const int row = ids[id_off + t];
  float v;
#if !QUANTIZED
  v = plain_value(WTYPE, (const __global uchar*)wq, (size_t)row * n_in + i);
#else
  const size_t blk = (size_t)row * (size_t)(n_in / KB) + (size_t)(i / KB);
  const int j = i % KB;
#if QT_GENERIC(WTYPE)
  float vals[8];
  vstore8(block_values8(WTYPE, (const __global uchar*)wq, (const __global uchar*)ws, blk, j / 8),
          0, vals);
  v = vals[j % 8];
#elif WTYPE == 8
  const uint word = wq[blk * 8 + j / 4];
  const int c = ((int)(word << (24 - 8 * (j % 4)))) >> 24;
  v = vload_half(blk, (const __global half*)ws) * (float)c;
#else
  const uint word = wq[blk * 4 + (j % 16) / 4];
  const uint byte = (word >> (8 * (j % 4))) & 255u;
  const float code = (float)(j < 16 ? (byte & 15u) : (byte >> 4));
#if WTYPE == 2
  v = vload_half(blk, (const __global half*)ws) * (code - 8.0f);
#else
  const float2 dm = vload_half2(blk, (const __global half*)ws);
  v = dm.x * code + dm.y;
#endif
#endif
#endif
  x[(size_t)t * n_in + i] = v;
}
