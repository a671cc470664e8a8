// Causal attention of a prefill chunk against the KV cache. Query t of the
// chunk sits at position pos0 + t and attends to cache positions
// 0..pos0 + t (the chunk's own keys were appended by rope_kv_rows before),
// or with window > 0 (sliding-window layers) to the last `window` of them.
// Position p's K and V are the caches' row p % ring from float offset
// layer_off (ring: the layer's rows, engine/cl/decode_state.h; ring_row).
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
// With ATT_KS > 1 (GPUs: more work-items per query, shorter serial chains),
// ATT_KS work-items share a query, each taking every ATT_KS-th key of a tile
// with its own running (m, l, o); lane 0 merges them through local memory
// at the end. out[t][h * HEAD_DIM ..] = o / l. HEAD_DIM (a multiple of 4) is a build
// option so q and o are register arrays of float4.
// With ATT_DS > 1 (wide heads on GPUs: 256 dimensions of q and o per
// work-item spill its registers) ATT_DS work-items share each (query, key
// lane), each holding HEAD_DIM / ATT_DS of the dimensions: a tile's scores
// are summed from their partial dot products through local memory (one
// local barrier more per tile), every one of them adding the partials in the
// same order, so they keep the same (m, l).
// CPU variant (-DATT_DIRECT=1): no local memory and no barriers (PoCL runs a
// work-group's items one after another in one thread and keeps every item's
// q and o in memory across each barrier): PoCL, SmolLM2 shape, pp512, the
// 30 layers' attention took 144-232 ms against the tiled kernel's 666-766 ms
// in the same minutes. Its first form scored one query against 8 keys at a
// time (a horizontal sum per key) and took 3.17 s of a 2,048-token prefill's
// 7.46 s on the 2-core EPYC (AVX2); as three register-blocked products on a
// transposed key tile (below) 1.70-1.77 s, and Gemma 3's pp512 attention
// 121-144 ms against 212-237. Masked entries use a large
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
#ifndef ATT_KS
#define ATT_KS 1
#endif
#ifndef ATT_DS
#define ATT_DS 1
#endif
#if ATT_TK % ATT_KS != 0
#error "ATT_TK must be a multiple of ATT_KS"
#endif
#define HD4 (HEAD_DIM / 4)
#if HD4 % ATT_DS != 0
#error "ATT_DS must divide HEAD_DIM / 4"
#endif
#define DS4 (HD4 / ATT_DS)  // float4s of q and o per work-item
#define NEG_BIG (-1.0e30f)

// The cache row of key k of a span of keys that starts at key k0, in row r0 =
// k0 % ring: the spans here (a query's window, or a work-group's) are
// shorter than the ring, so they wrap at most once, and one modulus per span
// does.
inline int ring_row(int k, int k0, int r0, int ring) {
  const int r = r0 + (k - k0);
  return r < ring ? r : r - ring;
}
#define WG (ATT_TQ * ATT_KS * ATT_DS)
#ifndef ATT_DIRECT
#define ATT_DIRECT 0
#endif

#if ATT_DIRECT
#if HEAD_DIM % 8 == 0
typedef float8 floatV;
#define VW 8
#define VLOADV vload8
#define VSTOREV vstore8
#else
typedef float4 floatV;
#define VW 4
#define VLOADV vload4
#define VSTOREV vstore4
#endif
#define HDV (HEAD_DIM / VW)           // vectors of q and o per query
#define DCV (HDV % 2 == 0 ? 2 : 1)    // vectors of o per query in one register block
#define TKV ((ATT_TK + 15) / 16 * 2)  // float8s of keys per tile (even)
#define TKP (TKV * 8)                 // keys per tile, ATT_TK rounded up to 16
#define QB 4                          // queries per register block
#define TQP ((ATT_TQ + QB - 1) / QB * QB)
// Loops over register blocks, unrolled so that they stay in registers
// (PoCL's pipeline leaves short constant loops rolled, their arrays on the stack).
#define UNROLL __attribute__((opencl_unroll_hint))

inline float hmax8(float8 v) {
  const float4 a = fmax(v.lo, v.hi);
  const float2 b = fmax(a.lo, a.hi);
  return fmax(b.x, b.y);
}

inline float hsum8f(float8 v) {
  const float4 a = v.lo + v.hi;
  const float2 b = a.lo + a.hi;
  return b.x + b.y;
}

// Rows r[0..7] (8 keys, VW dimensions each) -> at[e * TKP + j] = r[j][e]:
// 8 consecutive keys of dimension e in one float8 of the transposed tile
// (kernels/cpu_transpose.cl).
inline void transpose_keys(const floatV* r, float* at) {
  float8 rows[8], cols[8];
#if VW == 8
  UNROLL for (int j = 0; j < 8; ++j) rows[j] = r[j];
#else
  UNROLL for (int j = 0; j < 8; ++j) rows[j] = (float8)(r[j], (float4)(0.0f));
#endif
  transpose8x8(rows, cols);
  UNROLL for (int e = 0; e < VW; ++e) vstore8(cols[e], 0, at + e * TKP);
}

// Same arguments as the tiled kernel below. A work-item takes ATT_TQ
// consecutive queries of one head and walks the keys in tiles of TKP
// (ATT_TK rounded up to 16), each tile three small matrix products on
// register blocks of QB queries:
//   1. the tile's K rows transposed into kt (dimension-major, 8 keys a
//      float8), so that
//   2. the scores S = Q K^T come out as float8s along keys: per dimension
//      a broadcast of each query's value times two key vectors, QB x 2
//      float8 accumulators, no horizontal sums;
//   3. per query: mask, tile maximum, one rescale factor, exp along keys;
//   4. O = O * corr + P V: per key a broadcast of each query's probability
//      times DCV vectors of the V row, QB x DCV accumulators.
// Launch: global (n_head, ceil(n_tok / ATT_TQ)), local (1, 1).
__kernel void attention_prefill(const __global float* q, const __global float* k_cache,
                                const __global float* v_cache, ulong layer_off, int pos0, int n_tok,
                                int n_head, int n_head_kv, int window, int ring,
                                __global float* out) {
  const int h = get_global_id(0);
  const int t0 = get_global_id(1) * ATT_TQ;
  if (t0 >= n_tok) return;
  const int nq = min(ATT_TQ, n_tok - t0);
  const int n_embd = n_head * HEAD_DIM;
  const int n_embd_kv = n_head_kv * HEAD_DIM;
  const int kvh = h / (n_head / n_head_kv);
  const __global float* kh = k_cache + layer_off + kvh * HEAD_DIM;
  const __global float* vh = v_cache + layer_off + kvh * HEAD_DIM;
  const float scale = rsqrt((float)HEAD_DIM);
  float qs[TQP * HEAD_DIM];  // the queries times scale (rows past nq: zeros)
  floatV o[TQP * HDV];
  float m[TQP], l[TQP], corr[TQP];
  float kt[HEAD_DIM * TKP];  // the tile's keys, kt[d * TKP + j]
  float8 s[TQP * TKV];       // the tile's scores, then probabilities
  size_t vrow[TKP];          // the tile's cache rows (float offsets)
  for (int i = 0; i < TQP; ++i) {
    m[i] = NEG_BIG;
    l[i] = 0.0f;
    for (int d = 0; d < HDV; ++d) {
      o[i * HDV + d] = (floatV)(0.0f);
      const floatV qv = i < nq ? VLOADV(d, q + (size_t)(t0 + i) * n_embd + h * HEAD_DIM) * scale
                               : (floatV)(0.0f);
      VSTOREV(qv, d, qs + i * HEAD_DIM);
    }
  }
  const int nqb = (nq + QB - 1) / QB * QB;  // query rows computed: whole register blocks
  const int n_keys_all = pos0 + t0 + nq;    // keys the last query sees
  const int first_all = window > 0 ? max(0, pos0 + t0 + 1 - window) : 0;
  const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  for (int k0 = first_all; k0 < n_keys_all; k0 += TKP) {
    const int n = min(TKP, n_keys_all - k0);  // keys in this tile (the rest repeat the last)
    const int r0 = k0 % ring;
    for (int j = 0; j < TKP; ++j) {
      vrow[j] = (size_t)ring_row(k0 + min(j, n - 1), k0, r0, ring) * n_embd_kv;
    }
    // 1. kt
    for (int j0 = 0; j0 < TKP; j0 += 8) {
      for (int dv = 0; dv < HDV; ++dv) {
        floatV r[8];
        UNROLL for (int j = 0; j < 8; ++j) r[j] = VLOADV(dv, kh + vrow[j0 + j]);
        transpose_keys(r, kt + dv * VW * TKP + j0);
      }
    }
    // 2. scores
    for (int i0 = 0; i0 < nqb; i0 += QB) {
      for (int kv = 0; kv < TKV; kv += 2) {
        float8 acc[QB][2];
        UNROLL for (int r = 0; r < QB; ++r) acc[r][0] = acc[r][1] = (float8)(0.0f);
        for (int d = 0; d < HEAD_DIM; ++d) {
          const float8 ka = vload8(0, kt + d * TKP + kv * 8);
          const float8 kb = vload8(0, kt + d * TKP + kv * 8 + 8);
          UNROLL for (int r = 0; r < QB; ++r) {
            const float8 qd = (float8)(qs[(i0 + r) * HEAD_DIM + d]);
            acc[r][0] = fma(qd, ka, acc[r][0]);
            acc[r][1] = fma(qd, kb, acc[r][1]);
          }
        }
        UNROLL for (int r = 0; r < QB; ++r) {
          s[(i0 + r) * TKV + kv] = acc[r][0];
          s[(i0 + r) * TKV + kv + 1] = acc[r][1];
        }
      }
    }
    // 3. softmax: query i sees keys first..pos (and not the tile's repeats
    // past n). A query none of whose keys came yet keeps m = NEG_BIG and
    // takes probabilities of 1 (exp(0)); the first tile with one of its keys
    // scales them by corr = exp(NEG_BIG - m) = 0, so they never count.
    for (int i = 0; i < nqb; ++i) {
      const int pos = pos0 + t0 + i;
      const int first = window > 0 ? max(0, pos + 1 - window) : 0;
      const int hi = min(pos, k0 + n - 1);
      float8 tmax = (float8)(NEG_BIG);
      for (int kv = 0; kv < TKV; ++kv) {
        const int8 key = (int8)(k0 + kv * 8) + lane;
        const int8 seen = key >= (int8)(first) & key <= (int8)(hi);
        const float8 sv = select((float8)(NEG_BIG), s[i * TKV + kv], seen);
        s[i * TKV + kv] = sv;
        tmax = fmax(tmax, sv);
      }
      const float m_new = fmax(m[i], hmax8(tmax));
      corr[i] = exp(m[i] - m_new);
      float8 lsum = (float8)(0.0f);
      for (int kv = 0; kv < TKV; ++kv) {
        const float8 sv = s[i * TKV + kv];
        const float8 p = exp(sv - m_new);
        s[i * TKV + kv] = p;
        lsum += p;
      }
      l[i] = fma(l[i], corr[i], hsum8f(lsum));
      m[i] = m_new;
    }
    // 4. O = O * corr + P V
    const float* sp = (const float*)s;
    for (int i0 = 0; i0 < nqb; i0 += QB) {
      for (int dv = 0; dv < HDV; dv += DCV) {
        floatV acc[QB][DCV];
        UNROLL for (int r = 0; r < QB; ++r) {
          UNROLL for (int c = 0; c < DCV; ++c) acc[r][c] = o[(i0 + r) * HDV + dv + c] * corr[i0 + r];
        }
        for (int j = 0; j < n; ++j) {
          floatV v[DCV];
          UNROLL for (int c = 0; c < DCV; ++c) v[c] = VLOADV(dv + c, vh + vrow[j]);
          UNROLL for (int r = 0; r < QB; ++r) {
            const floatV p = (floatV)(sp[(i0 + r) * TKP + j]);
            UNROLL for (int c = 0; c < DCV; ++c) acc[r][c] = fma(p, v[c], acc[r][c]);
          }
        }
        UNROLL for (int r = 0; r < QB; ++r) {
          UNROLL for (int c = 0; c < DCV; ++c) o[(i0 + r) * HDV + dv + c] = acc[r][c];
        }
      }
    }
  }
  for (int i = 0; i < nq; ++i) {
    const float inv_l = 1.0f / l[i];
    for (int d = 0; d < HDV; ++d) {
      VSTOREV(o[i * HDV + d] * inv_l, d, out + (size_t)(t0 + i) * n_embd + h * HEAD_DIM);
    }
  }
}

#else  // !ATT_DIRECT

// q, out: [n_tok][n_head * HEAD_DIM]; caches [ring][n_head_kv * HEAD_DIM]
// from float offset layer_off. Launch: global (n_head, ceil(n_tok / ATT_TQ) *
// WG), local (1, WG), WG = ATT_TQ * ATT_KS * ATT_DS.
__kernel __attribute__((reqd_work_group_size(1, WG, 1))) void attention_prefill(
    const __global float* q, const __global float* k_cache, const __global float* v_cache,
    ulong layer_off, int pos0, int n_tok, int n_head, int n_head_kv, int window, int ring,
    __global float* out) {
  __local float4 kl[ATT_TK * HD4];
  __local float4 vl[ATT_TK * HD4];
#if ATT_KS > 1
  // the (m, l, o) of key lanes 1..ATT_KS-1, merged by lane 0 at the end
  __local float4 ml_o[(ATT_KS - 1) * ATT_TQ * HD4];
  __local float ml_m[(ATT_KS - 1) * ATT_TQ], ml_l[(ATT_KS - 1) * ATT_TQ];
#endif
#if ATT_DS > 1
  // partial scores: [key lane][query][key of the lane's tile share][dim lane]
  __local float sp[ATT_KS * ATT_TQ * (ATT_TK / ATT_KS) * ATT_DS];
#endif
  const int h = get_group_id(0);
  const int wid = get_local_id(1);
  const int lid = wid % ATT_TQ;             // the query within the group
  const int ds = wid / ATT_TQ % ATT_DS;     // the dim lane: q and o float4s ds * DS4..
  const int ks = wid / (ATT_TQ * ATT_DS);   // the key lane: keys ks, ks + ATT_KS, .. of each tile
  const int d0 = ds * DS4;
  const int t0 = get_group_id(1) * ATT_TQ;
  const int t = t0 + lid;
  const int n_embd = n_head * HEAD_DIM;
  const int n_embd_kv = n_head_kv * HEAD_DIM;
  const int kvh = h / (n_head / n_head_kv);
  const __global float* kh = k_cache + layer_off + kvh * HEAD_DIM;
  const __global float* vh = v_cache + layer_off + kvh * HEAD_DIM;
  const float scale = rsqrt((float)HEAD_DIM);

  const bool active = t < n_tok;
  float4 qr[DS4], o[DS4];
  for (int d = 0; d < DS4; ++d) {
    qr[d] =
        active ? vload4(d0 + d, q + (size_t)t * n_embd + h * HEAD_DIM) * scale : (float4)(0.0f);
    o[d] = (float4)(0.0f);
  }
  float m = NEG_BIG, l = 0.0f;
  const int n_keys_me = pos0 + t + 1;  // keys this query sees: first_me..n_keys_me - 1
  const int first_me = window > 0 ? max(0, n_keys_me - window) : 0;
  const int n_keys = pos0 + min(t0 + ATT_TQ, n_tok);  // keys the work-group needs
  const int first = window > 0 ? max(0, pos0 + t0 + 1 - window) : 0;
  const int r_first = first % ring;

  for (int kt = first; kt < n_keys; kt += ATT_TK) {
    // 1. K and V rows kt..kt + ATT_TK into local memory.
    for (int e = wid; e < ATT_TK * HD4; e += WG) {
      const int j = e / HD4, d = e % HD4;
      const bool in = kt + j < n_keys;
      const size_t row = (size_t)ring_row(kt + j, first, r_first, ring) * n_embd_kv;
      kl[e] = in ? vload4(d, kh + row) : (float4)(0.0f);
      vl[e] = in ? vload4(d, vh + row) : (float4)(0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if ATT_DS > 1
    // 2a. this dim lane's share of each score, summed in 2b by every lane.
    __local float* spq = sp + (ks * ATT_TQ + lid) * (ATT_TK / ATT_KS) * ATT_DS;
    for (int jj = 0; jj < ATT_TK / ATT_KS; ++jj) {
      const int j = ks + jj * ATT_KS;
      float4 acc = (float4)(0.0f);
      for (int d = 0; d < DS4; ++d) acc = mad(qr[d], kl[j * HD4 + d0 + d], acc);
      spq[jj * ATT_DS + ds] = acc.x + acc.y + acc.z + acc.w;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    // 2. scores of this lane's keys and the streaming softmax update.
    if (active && kt + ks < n_keys_me) {
      float s[ATT_TK / ATT_KS];
      float tile_max = NEG_BIG;
      for (int jj = 0; jj < ATT_TK / ATT_KS; ++jj) {
        const int j = ks + jj * ATT_KS;
#if ATT_DS > 1
        float dot = 0.0f;
        for (int i = 0; i < ATT_DS; ++i) dot += spq[jj * ATT_DS + i];
#else
        float4 acc = (float4)(0.0f);
        for (int d = 0; d < HD4; ++d) acc = mad(qr[d], kl[j * HD4 + d], acc);
        const float dot = acc.x + acc.y + acc.z + acc.w;
#endif
        const bool seen = kt + j < n_keys_me && kt + j >= first_me;
        const float sj = seen ? dot : NEG_BIG;
        s[jj] = sj;
        tile_max = fmax(tile_max, sj);
      }
      const float m_new = fmax(m, tile_max);
      const float corr = exp(m - m_new);
      l *= corr;
      for (int d = 0; d < DS4; ++d) o[d] *= corr;
      for (int jj = 0; jj < ATT_TK / ATT_KS; ++jj) {
        const int j = ks + jj * ATT_KS;
        const float p = kt + j < n_keys_me && kt + j >= first_me ? exp(s[jj] - m_new) : 0.0f;
        l += p;
        for (int d = 0; d < DS4; ++d) o[d] = mad((float4)(p), vl[j * HD4 + d0 + d], o[d]);
      }
      m = m_new;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#if ATT_KS > 1
  // 3. lane 0 of each query merges the other key lanes' partial softmaxes:
  // M = max m_i, L = sum l_i e^(m_i - M), O = sum o_i e^(m_i - M). A lane that
  // saw no keys has m = NEG_BIG, l = 0, o = 0 and adds nothing.
  if (ks > 0) {
    const int slot = (ks - 1) * ATT_TQ + lid;
    if (ds == 0) {  // the same (m, l) in every dim lane
      ml_m[slot] = m;
      ml_l[slot] = l;
    }
    for (int d = 0; d < DS4; ++d) ml_o[slot * HD4 + d0 + d] = o[d];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (ks > 0) return;
  float m_all = m;
  for (int i = 1; i < ATT_KS; ++i) m_all = fmax(m_all, ml_m[(i - 1) * ATT_TQ + lid]);
  const float c0 = exp(m - m_all);
  l *= c0;
  for (int d = 0; d < DS4; ++d) o[d] *= c0;
  for (int i = 1; i < ATT_KS; ++i) {
    const int slot = (i - 1) * ATT_TQ + lid;
    const float c = exp(ml_m[slot] - m_all);
    l = mad(ml_l[slot], c, l);
    for (int d = 0; d < DS4; ++d) o[d] = mad(ml_o[slot * HD4 + d0 + d], (float4)(c), o[d]);
  }
#endif
  if (active) {
    const float inv_l = 1.0f / l;
    for (int d = 0; d < DS4; ++d) {
      vstore4(o[d] * inv_l, d0 + d, out + (size_t)t * n_embd + h * HEAD_DIM);
    }
  }
}
#endif  // ATT_DIRECT
