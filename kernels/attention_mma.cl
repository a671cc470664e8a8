// Causal attention of a prefill chunk against the KV cache on tensor cores
// (NVIDIA only: mma.sync m16n8k16 with fp16 inputs and fp32 accumulation by
// inline PTX; after mma_f16.cl). Same contract as attention_prefill.cl: query t of the chunk
// sits at position pos0 + t and attends to cache positions 0..pos0 + t, or
// with window > 0 to the last `window` of them; position p's K and V are
// the caches' row p % ring from float offset layer_off; query head h reads
// KV head h / (n_head / n_head_kv); out[t][h * HEAD_DIM ..] = softmax(q K^T /
// sqrt(HEAD_DIM)) V. The host takes it for heads of 64 and 128 after a
// start-up self-test against attention_prefill.cl.
//
// A work-group of WG / 32 warps (4) takes BQ (64) consecutive queries of one
// head, each warp 16 of them, and walks the keys in tiles of 64 (up to the last key its
// last query needs):
//   1. the tile's K rows (key-major) and V rows (transposed, dimension-major)
//      are converted to fp16 into local memory, from loads issued in
//      batches (heads of 64: the whole tile in one, during the previous
//      tile's steps 2-4; heads of 128: four batches in turn);
//   2. each warp computes S = Q K^T for its 16 queries x 64 keys (Q's A
//      fragments built once, times log2(e) / sqrt(HEAD_DIM));
//   3. masks S (causal, window, keys past the chunk), updates its rows'
//      running maximum m and sum l the streaming way, P = 2^(S - m);
//   4. O = O * 2^(m_old - m) + P V, P's A fragments taken straight from S's
//      accumulators (the C layout of two n8 tiles is the A layout of one k16
//      step).
// A warp whose queries see none of a tile's keys skips 2-4 for it. Accuracy:
// q, k, v and p rounded to fp16 (relative 2^-11 each), sums in fp32.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): lane = 4 g + tig;
// A regs: (row g, k 2tig..+1), (row g+8, k 2tig..), (row g, k 2tig+8..+9),
// (row g+8, k 2tig+8..); B regs: (k 2tig..+1, n g), (k 2tig+8..+9, n g);
// C: (row g, n 2tig), (row g, n 2tig+1), (row g+8, n 2tig), (row g+8, n 2tig+1).
//
// Launch: global (n_head, ceil(n_tok / BQ) * WG), local (1, WG).

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#if HEAD_DIM != 64 && HEAD_DIM != 128
#error "attention_mma: heads of 64 or 128"
#endif
#ifndef BQ
#define BQ 64  // queries per work-group (the host passes ClPrefill::k_att_mma_queries)
#endif
#ifndef WG
#define WG 128  // work-items (ClPrefill::k_att_mma_threads)
#endif
#if BQ != 16 * (WG / 32)
#error "attention_mma: 16 queries per warp"
#endif
#define BK 64                     // keys per tile
#define KS (HEAD_DIM / 2 + 4)     // K tile row stride in words (conflict-free B loads)
#define VS (BK / 2 + 4)           // transposed V tile row stride in words
#define DT (HEAD_DIM / 8)         // n8 tiles of O (dimensions)
#define QK (HEAD_DIM / 16)        // k16 steps of S
#define LOAD_ITEMS (BK / 2 * HEAD_DIM / 4 / WG)  // a work-item's key pairs x dimension quads a tile
// LOAD_BATCH of them are loaded at once (16 or 8 float4; fewer where a tile has fewer)
#define LOAD_BATCH_MAX (HEAD_DIM == 64 ? 4 : 2)
#define LOAD_BATCH (LOAD_ITEMS < LOAD_BATCH_MAX ? LOAD_ITEMS : LOAD_BATCH_MAX)
#if LOAD_ITEMS % LOAD_BATCH != 0 || BK / 2 * HEAD_DIM / 4 % WG != 0
#error "attention_mma: a tile's loads must divide into batches"
#endif
#define NEG_BIG (-1.0e30f)
#define LOG2E 1.4426950408889634f

inline float quad_max(float v) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v));
  v = fmax(v, r);
  asm volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v));
  return fmax(v, r);
}

inline float quad_sum(float v) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v));
  v += r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v));
  return v + r;
}

// The cache row of key k of a span of keys that starts at key k0, in row r0 =
// k0 % ring (a span shorter than the ring wraps at most once).
inline int ring_row(int k, int k0, int r0, int ring) {
  const int r = r0 + (k - k0);
  return r < ring ? r : r - ring;
}

// Item i of work-item lid in a tile: key pair jp, dimension quad d4.
inline int tile_pair(int lid, int i) { return (lid + i * WG) / (HEAD_DIM / 4); }
inline int tile_quad(int lid, int i) { return (lid + i * WG) % (HEAD_DIM / 4); }

// A tile's loads (step 1 below), items b0..b0 + LOAD_BATCH - 1 of work-item
// lid: keys 2 jp and 2 jp + 1 (zeros past n_keys) at dimensions 4 d4..+3.
typedef struct {
  float4 k[LOAD_BATCH][2], v[LOAD_BATCH][2];
} TileLoads;
inline void tile_load(TileLoads* t, const __global float* kh, const __global float* vh, int b0,
                      int lid, int kt, int n_keys, int first, int r_first, int ring,
                      int n_embd_kv) {
#pragma unroll
  for (int b = 0; b < LOAD_BATCH; ++b) {
    const int jp = tile_pair(lid, b0 + b), d4 = tile_quad(lid, b0 + b);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int key = kt + 2 * jp + c;
      const bool in = key < n_keys;
      const size_t row = (size_t)ring_row(in ? key : first, first, r_first, ring) * n_embd_kv;
      t->k[b][c] = in ? vload4(d4, kh + row) : (float4)(0.0f);
      t->v[b][c] = in ? vload4(d4, vh + row) : (float4)(0.0f);
    }
  }
}
// ... as fp16 into the K tile and the transposed V tile (one word: keys
// 2 jp, 2 jp + 1 of a dimension).
inline void tile_store(const TileLoads* t, __local uint* kl, __local uint* vlw, int b0, int lid) {
#pragma unroll
  for (int b = 0; b < LOAD_BATCH; ++b) {
    const int jp = tile_pair(lid, b0 + b), d4 = tile_quad(lid, b0 + b);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      kl[(2 * jp + c) * KS + 2 * d4] = pack_half2(t->k[b][c].x, t->k[b][c].y);
      kl[(2 * jp + c) * KS + 2 * d4 + 1] = pack_half2(t->k[b][c].z, t->k[b][c].w);
    }
    vlw[(4 * d4 + 0) * VS + jp] = pack_half2(t->v[b][0].x, t->v[b][1].x);
    vlw[(4 * d4 + 1) * VS + jp] = pack_half2(t->v[b][0].y, t->v[b][1].y);
    vlw[(4 * d4 + 2) * VS + jp] = pack_half2(t->v[b][0].z, t->v[b][1].z);
    vlw[(4 * d4 + 3) * VS + jp] = pack_half2(t->v[b][0].w, t->v[b][1].w);
  }
}

// q, out: [n_tok][n_head * HEAD_DIM]; caches [ring][n_head_kv * HEAD_DIM]
// from float offset layer_off.
__kernel __attribute__((reqd_work_group_size(1, WG, 1))) void attention_mma(
    const __global float* q, const __global float* k_cache, const __global float* v_cache,
    ulong layer_off, int pos0, int n_tok, int n_head, int n_head_kv, int window, int ring,
    __global float* out) {
  __local uint kl[BK * KS];         // K tile: [key][dim pairs]
  __local uint vlw[HEAD_DIM * VS];  // V tile transposed: [dim][key pairs]
  const int h = get_group_id(0);
  const int lid = get_local_id(1);
  const int lane = lid & 31, warp = lid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int t0 = get_group_id(1) * BQ;
  const int n_embd = n_head * HEAD_DIM;
  const int n_embd_kv = n_head_kv * HEAD_DIM;
  const int kvh = h / (n_head / n_head_kv);
  const __global float* kh = k_cache + layer_off + kvh * HEAD_DIM;
  const __global float* vh = v_cache + layer_off + kvh * HEAD_DIM;
  const float qscale = rsqrt((float)HEAD_DIM) * LOG2E;

  // this warp's rows g and g + 8: queries tw + g, tw + g + 8
  const int tw = t0 + 16 * warp;
  const int ta = tw + g, tb = tw + g + 8;
  // Q's A fragments, k16 step kk: dims 16 kk + 2 tig.. and 16 kk + 8 + 2 tig..
  uint qa[QK][4];
  {
    const __global float* qra = q + (size_t)min(ta, n_tok - 1) * n_embd + h * HEAD_DIM;
    const __global float* qrb = q + (size_t)min(tb, n_tok - 1) * n_embd + h * HEAD_DIM;
#pragma unroll
    for (int kk = 0; kk < QK; ++kk) {
      const float2 a0 = vload2(0, qra + 16 * kk + 2 * tig) * qscale;
      const float2 a1 = vload2(0, qrb + 16 * kk + 2 * tig) * qscale;
      const float2 a2 = vload2(0, qra + 16 * kk + 8 + 2 * tig) * qscale;
      const float2 a3 = vload2(0, qrb + 16 * kk + 8 + 2 * tig) * qscale;
      qa[kk][0] = pack_half2(a0.x, a0.y);
      qa[kk][1] = pack_half2(a1.x, a1.y);
      qa[kk][2] = pack_half2(a2.x, a2.y);
      qa[kk][3] = pack_half2(a3.x, a3.y);
    }
  }
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float ma = NEG_BIG, mb = NEG_BIG, la = 0.0f, lb = 0.0f;  // rows g, g + 8 (partial l per lane)

  // keys the work-group needs: first..n_keys - 1; each row's own: first_x..pos_x
  const int n_keys = pos0 + min(t0 + BQ, n_tok);
  const int first = window > 0 ? max(0, pos0 + t0 + 1 - window) : 0;
  const int r_first = first % ring;
  const int pos_a = pos0 + ta, pos_b = pos0 + tb;
  const int first_a = window > 0 ? pos_a + 1 - window : 0;
  const int first_b = window > 0 ? pos_b + 1 - window : 0;
  const int warp_last = pos0 + min(tw + 15, n_tok - 1);   // the warp's last key
  const int warp_first = window > 0 ? pos0 + tw + 1 - window : 0;

  // 1. K and V rows kt..kt + BK - 1 as fp16 (zeros past n_keys): a
  // work-item takes keys 2 jp and 2 jp + 1 at dimensions 4 d4..4 d4 + 3
  // (consecutive work-items cover a row's dimensions: coalesced), LOAD_BATCH such
  // items at once, every load of a batch issued before the first store.
  // Where one batch is the whole tile (heads of 64), the next tile's loads
  // are issued before this tile's products and stored after them. H200,
  // pp512, Llama-3.2-1B shape Q4_0: attention 444 us a chunk against 614
  // with a load and a store per item in turn (472 with each tile's loads
  // at once but not ahead).
  TileLoads next;
#if LOAD_ITEMS == LOAD_BATCH
  tile_load(&next, kh, vh, 0, lid, first, n_keys, first, r_first, ring, n_embd_kv);
#endif
  for (int kt = first; kt < n_keys; kt += BK) {
#if LOAD_ITEMS == LOAD_BATCH
    tile_store(&next, kl, vlw, 0, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (kt + BK < n_keys) {
      tile_load(&next, kh, vh, 0, lid, kt + BK, n_keys, first, r_first, ring, n_embd_kv);
    }
#else
#pragma unroll
    for (int b0 = 0; b0 < LOAD_ITEMS; b0 += LOAD_BATCH) {
      tile_load(&next, kh, vh, b0, lid, kt, n_keys, first, r_first, ring, n_embd_kv);
      tile_store(&next, kl, vlw, b0, lid);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (kt <= warp_last && kt + BK - 1 >= warp_first) {
      // 2. S = Q K^T (scaled by log2(e) / sqrt(HEAD_DIM))
      float s[BK / 8][4];
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        const __local uint* kr = kl + (8 * j + g) * KS + tig;
#pragma unroll
        for (int kk = 0; kk < QK; ++kk) {
          mma16816(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kr[8 * kk], kr[8 * kk + 4]);
        }
      }
      // 3. mask, running max, P
      float xa = NEG_BIG, xb = NEG_BIG;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = kt + 8 * j + 2 * tig + c;
          const bool ok_a = key <= pos_a && key >= first_a && key < n_keys;
          const bool ok_b = key <= pos_b && key >= first_b && key < n_keys;
          s[j][c] = ok_a ? s[j][c] : NEG_BIG;
          s[j][2 + c] = ok_b ? s[j][2 + c] : NEG_BIG;
          xa = fmax(xa, s[j][c]);
          xb = fmax(xb, s[j][2 + c]);
        }
      }
      const float na = fmax(ma, quad_max(xa)), nb = fmax(mb, quad_max(xb));
      const float ca = exp2(ma - na), cb = exp2(mb - nb);
      ma = na;
      mb = nb;
      float sa = 0.0f, sb = 0.0f;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          s[j][c] = s[j][c] > 0.5f * NEG_BIG ? exp2(s[j][c] - na) : 0.0f;
          s[j][2 + c] = s[j][2 + c] > 0.5f * NEG_BIG ? exp2(s[j][2 + c] - nb) : 0.0f;
          sa += s[j][c];
          sb += s[j][2 + c];
        }
      }
      la = la * ca + sa;
      lb = lb * cb + sb;
#pragma unroll
      for (int j = 0; j < DT; ++j) {
        o[j][0] *= ca;
        o[j][1] *= ca;
        o[j][2] *= cb;
        o[j][3] *= cb;
      }
      // 4. O += P V, k16 step ks: keys 16 ks .. 16 ks + 15 (S tiles 2 ks, 2 ks + 1)
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        const uint p0 = pack_half2(s[2 * ks][0], s[2 * ks][1]);
        const uint p1 = pack_half2(s[2 * ks][2], s[2 * ks][3]);
        const uint p2 = pack_half2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
        const uint p3 = pack_half2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
        for (int j = 0; j < DT; ++j) {
          const __local uint* vr = vlw + (8 * j + g) * VS + 8 * ks + tig;
          mma16816(o[j], p0, p1, p2, p3, vr[0], vr[4]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  // out = O / l (l summed over the quad's lanes)
  const float ia = 1.0f / quad_sum(la), ib = 1.0f / quad_sum(lb);
#pragma unroll
  for (int j = 0; j < DT; ++j) {
    const int d = 8 * j + 2 * tig;
    if (ta < n_tok) {
      vstore2((float2)(o[j][0], o[j][1]) * ia, 0, out + (size_t)ta * n_embd + h * HEAD_DIM + d);
    }
    if (tb < n_tok) {
      vstore2((float2)(o[j][2], o[j][3]) * ib, 0, out + (size_t)tb * n_embd + h * HEAD_DIM + d);
    }
  }
}
