// One decode token in ONE launch on CPU devices (PoCL on x86-64), built
// after kernels/persistent_layout.cl, cpu_dot.cl and attention_cpu.cl.
//
// Why: PoCL's worker threads sleep between commands, and waking one costs
// 20-35 us per launch on the 2-core VM we measured (a 30-launch chain of
// matvecs ran at 11 G weights/s, the same rows as one launch at 19.4). The
// multi-kernel plan's 122 launches per token thus cost ~4 ms of a ~17 ms
// token. Here one work-group per core (n_groups = compute units) stays in
// the kernel for the whole token and the groups meet at spin barriers
// (~0.1 us each) between the stages that read each other's results.
// decode_token (at the end of this file) is the whole step, like llama2.c's
// forward():
//   embed               x = embedding row of ids[token_index]
//   per layer il:
//   P1 qkv_rope_append  q; k; v = Wqkv (x * attn_norm * rms), RoPE, k and v
//                       -> the layer's cache row for pos
//   P2 attention        attention of each head over the layer's window of
//                       positions (0..pos, or the last WINDOW of them)
//                       -> att, a claim per (KV head, range of positions),
//                       partials merged per head
//   P3 matvec_residual  x += Wo att
//   P4 ffn_gate_up      h = act(Wg x') * (Wu x'), x' = x * ffn_norm * rms,
//                       act SiLU or GELU
//   P5 matvec_residual  x += Wd h
//   head_logits         logits = Whead (x * output_norm * rms), each group's
//                       argmax candidate -> barrier -> pick_token: group 0
//                       writes the token to ids[0] (NaN never wins, ties go
//                       to the lowest id).
// 5 barriers per layer + 2.
//
// Other graphs (GENERAL_GRAPH, from the host for every model that is not
// plain llama; the options are decode_persistent.cl's: NEOX, QKV_BIAS,
// QK_NORM, POST_NORMS, FFN_GELU, WINDOW / KV_RING, EMBED_SCALE, Q_MUL,
// N_EMBD_Q): P1 claims whole heads of [Q; K; V] (qkv_heads: bias, head norm,
// RoPE of adjacent or NeoX pairs, q x Q_MUL, all in the group's registers);
// sliding-window layers (LAYER_SWA in the layer's LO_ALT word) attend over
// the last WINDOW positions of their ring of KV_RING rows with their own RoPE
// table (rope_cs_swa); with POST_NORMS, P3 and P5 write o = W in, and every
// group keeps its own copy of the residual stream (xr, in its slot of xn) to
// which the next normed stage first adds o * post_norm / rms(o): the same
// bits in every group, so no barrier and no shared write. Same barriers.
//
// Work split: each stage's rows ((KV head, split) pairs in P2) are claimed
// in chunks from a shared counter (CHUNKS_PER_GROUP chunks per group, so
// each chunk is a long run of rows), so a core that runs slower (another
// process, a noisy VM) takes fewer chunks instead of holding the others at the barrier. Every
// group makes exactly one failing claim per stage, so stage s's claims start
// at the sum over earlier stages of (chunks + n_groups), known to all groups
// without further communication; group 0 resets the counter at the end.
// Results do not depend on which group computes a row (same code, same order
// of operations per row). A normed stage's input x * g / rms(x) is made
// once per stage by each group into its own slot of xn, and so is the
// 16-bit form of a stage's input (x16_quantize) where its matrices' types
// take it. Rows are computed by cpu_dot.cl's rows_dot_x16 for those types,
// rows_dot for the others (F32, F16, BF16, Q2_K, Q3_K, IQ4); attention by
// attend_split8 below (8-wide), or attention_cpu.cl's attend_head (a whole
// head per claim) when the head size is not a multiple of 8.
//
// Memory ordering: PoCL's mem_fence() compiles to nothing, so the barrier
// orders memory with atomics: the arrival (atomic_inc, acq_rel) publishes
// this group's writes, and an atomic read-modify-write after the wait keeps
// the next stage's loads below it. x86's coherent caches do the rest.
//
// The barrier counts arrivals on a counter that is never reset, like
// decode_persistent.cl's: barrier k of this launch waits until counter -
// (bar_base + k * n_groups) >= 0 in wrapping 32-bit arithmetic. A group that
// spins longer than ~0.1 s (the TSC, __builtin_ia32_rdtsc) sets *abort_flag;
// all groups then stop waiting, the token's id becomes -2, and launches
// that find the flag set write -2 and return at once. The host enables this
// kernel only after grid_barrier_selftest passes, recomputes a token that
// comes back as -2 on the multi-kernel plan, and re-arms the kernel (a few
// times; then the plan stays).
//
// Weight types are compile-time per role, with a second (ALT) type per role
// for the layers whose LO_ALT word says so (kernels/persistent_layout.cl):
// each rows_dot call then has two literal types and a branch, which folds
// away where the role has one type. Q, K and V of different types are three
// matrices; of one type, one stacked matrix (QKV_STACKED).
//
// Work-groups have 2 work-items of which only the first works: the size is
// a compile-time constant for PoCL, and newer PoCL schedulers weigh a
// group's cost by log2 of its size, which is 0 for a single work-item.

#if !defined(__x86_64__)
#error "decode_persistent_cpu.cl needs an x86-64 device (rdtsc, pause)"
#endif

#define CPU_WG 2
#ifndef GENERAL_GRAPH
#define GENERAL_GRAPH 0
#endif
#if !GENERAL_GRAPH && (NEOX || QKV_BIAS || QK_NORM || POST_NORMS || FFN_GELU || WINDOW > 0)
#error "these graph options need GENERAL_GRAPH"
#endif
// Rows per claim: n_rows split into CHUNKS_PER_GROUP chunks per group, a
// multiple of NR rows each (1 to 8 measured alike within the VM's noise,
// 16 slower; 64-row chunks, the first version, were slower too).
#define CHUNKS_PER_GROUP 2
// A group's slot of xn (XN_STRIDE floats, from the host: 128-byte aligned
// slots): its normed input xg (N_EMBD rounded up to 32 floats), then a
// stage's input in 16-bit form (cpu_dot.cl's X16_BYTES of the longest of
// N_EMBD, N_FF and N_EMBD_Q, rounded up to 32 floats), then with POST_NORMS
// its copy of the residual stream xr (XG_FLOATS).
#define XG_FLOATS ((N_EMBD + 31) / 32 * 32)
#define X16_MAX_IN ((MAX2(MAX2(N_EMBD, N_FF), N_EMBD_Q) + 31) / 32 * 32)
#define XR_AT (XG_FLOATS + (X16_BYTES(X16_MAX_IN) / 4 + 31) / 32 * 32)
#if XN_STRIDE < XR_AT + (POST_NORMS ? XG_FLOATS : 0) || XN_STRIDE % 32 != 0
#error "XN_STRIDE too small for the slot"
#endif
// Whether a role's inputs need the 16-bit form: 16-bit activations for the
// block types that take them (rows_dot_x16; the float rows_dot for the
// others), SmolLM2-shaped Q4_0 decode 1.1-1.25x faster than with float
// activations in alternating runs.
#define ROLE_X16(role) (X16_TYPE(WT_##role) || X16_TYPE(WT_##role##_ALT))

// ---- barrier and work claims --------------------------------------------------

// Arrives at barrier `target` and waits for all groups; false when the wait
// was given up (now or by another group). Only time this thread spent
// spinning counts: a jump between two clock reads means it (or the whole
// process: Ctrl-Z, a debugger, a VM pause) did not run, not that the others
// are late. The barrier is checked once more before giving up.
// spin_ticks: TSC ticks of spinning before giving up (the host passes 0.1 s;
// an argument, not a define, so the program's cache key does not change with
// the measured TSC rate); a gap over spin_ticks / 100 (1 ms) between two
// clock reads is the thread not running.
inline bool cpu_grid_sync(volatile __global uint* bar, uint target,
                          volatile __global uint* abort_flag, ulong spin_ticks) {
  atomic_inc(bar);
  ulong last = __builtin_ia32_rdtsc();
  ulong waited = 0;
  uint spins = 0;
  while ((int)(*bar - target) < 0) {
    __builtin_ia32_pause();
    if (*abort_flag) return false;
    if ((++spins & 255) == 0) {
      const ulong now = __builtin_ia32_rdtsc();
      if (now - last < spin_ticks / 100) waited += now - last;
      last = now;
      if (waited > spin_ticks && (int)(*bar - target) < 0) {
        *abort_flag = 1;
        return false;
      }
    }
  }
  atomic_add(bar, 0u);  // the next stage's loads stay after the wait
  return true;
}

// A group's place in the grid, the barrier it meets the others at and the
// counter it claims work from.
typedef struct {
  int group, n_groups;
  volatile __global uint* bar;
  uint bar_base;  // the count at this launch's start
  uint n_bar;     // barriers passed in this launch
  volatile __global uint* abort_flag;
  ulong spin_ticks;
  __global ulong* trace;  // non-null: group 0 records the TSC after each barrier
  volatile __global uint* work;
  uint stage_base;  // claims made in earlier stages
} Grid;

// The next barrier. A wait given up sets *abort_flag, which the launch's
// result reports (-2); the stages run on meanwhile, their results unused.
CPU_INLINE void grid_sync(Grid* g) {
  cpu_grid_sync(g->bar, g->bar_base + (++g->n_bar) * (uint)g->n_groups, g->abort_flag,
                g->spin_ticks);
  if (g->trace && g->group == 0) g->trace[g->n_bar] = __builtin_ia32_rdtsc();
}

// Claim *c, counted from 0, of the current stage's n_claims (row chunks,
// attention units); false when none is left, and then the stage's claims
// are counted past: every group makes exactly one failing claim per stage.
CPU_INLINE bool claim(Grid* g, uint n_claims, uint* c) {
  *c = atomic_inc(g->work) - g->stage_base;
  if (*c < n_claims) return true;
  g->stage_base += n_claims + g->n_groups;
  return false;
}

// Rows per chunk of a stage of n rows.
CPU_INLINE int chunk_rows(int n, int n_groups) {
  return ((n + n_groups * CHUNKS_PER_GROUP - 1) / (n_groups * CHUNKS_PER_GROUP) + NR - 1) / NR * NR;
}
CPU_INLINE uint n_chunks(int n, int chunk) { return (n + chunk - 1) / chunk; }

// ---- small helpers --------------------------------------------------------------

// xg = x * g / rms(x) over N_EMBD values: the input of a normed stage, made
// once per stage by each group into its own slot (multiplying by g inside
// the row loop cost 27% of a matvec's speed).
inline void norm_into(const __global float* x, const __global float* g, __global float* xg) {
  const float scale = rms_scale(x, N_EMBD, RMS_EPS);
  for (int i = 0; i < N_EMBD; ++i) xg[i] = x[i] * scale * g[i];
}

// y = v * g / rms(v) over n values (a q or k head, in registers).
inline void head_norm(float* y, const __global float* g, int n) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += y[i] * y[i];
  const float scale = rsqrt(ss / n + RMS_EPS);
  for (int i = 0; i < n; ++i) y[i] *= scale * g[i];
}

// Attention splits: a head's positions go to several claims (2, or one per
// ATT_SPLIT_POS positions, up to ATT_SPLIT_MAX), so the cores share the
// work evenly; each claim leaves its partial
// (max, sum, unnormalised sum of V) in att_part and counts itself done in
// att_count[head]; the head's last claim merges them into att.
#ifndef ATT_SPLIT_POS
#define ATT_SPLIT_POS 64
#endif

// The window of a layer's attention: n keys, key t (0 .. n - 1) in cache row
// kv_row(t, wrap_at, ring) from `off` (floats; attention_cpu.cl's kv_row:
// a sliding-window layer's ring wraps to its row 0 at key wrap_at).
typedef struct {
  ulong off;
  int n, wrap_at, ring;
} KvWindow;

#if HEAD_DIM % 8 == 0
#define HD8 (HEAD_DIM / 8)
// Attention of query head hd over keys t0 .. t1 - 1 of window kw with
// 8-wide vectors, in three sweeps: scores and their max; exp (8 at a time)
// and their sum; the weighted sum of V in HD8 float8 registers. Leaves the
// running max in *m_out, the sum in *l_out and the unnormalised sum in acc.
inline void attend_range8(int hd, const __global float* q, const __global float* k_cache,
                          const __global float* v_cache, KvWindow kw, int t0, int t1,
                          __global float* scores, float* m_out, float* l_out, float8* acc) {
  const int kvh = hd / (N_HEAD / N_HEAD_KV);
  const __global float* kh = k_cache + kw.off + kvh * HEAD_DIM;
  const __global float* vh = v_cache + kw.off + kvh * HEAD_DIM;
  __global float* s = scores + (size_t)hd * N_CTX;
  float8 qv[HD8];
  const float kq_scale = rsqrt((float)HEAD_DIM);
  for (int d = 0; d < HD8; ++d) qv[d] = vload8(d, q + hd * HEAD_DIM) * kq_scale;
  float m = -FLT_MAX;  // finite: built with -cl-fast-relaxed-math
  for (int t = t0; t < t1; ++t) {
    const __global float* k = kh + kv_row(t, kw.wrap_at, kw.ring) * N_EMBD_KV;
    float8 a = qv[0] * vload8(0, k);
    for (int d = 1; d < HD8; ++d) a = fma(qv[d], vload8(d, k), a);
    const float st = hsum8(a);
    s[t] = st;
    m = fmax(m, st);
  }
  float l = 0.0f;
  int t = t0;
  for (; t + 8 <= t1; t += 8) {
    const float8 p = exp(vload8(0, s + t) - m);
    vstore8(p, 0, s + t);
    l += hsum8(p);
  }
  for (; t < t1; ++t) {
    s[t] = exp(s[t] - m);
    l += s[t];
  }
  for (int d = 0; d < HD8; ++d) acc[d] = 0.0f;
  for (t = t0; t < t1; ++t) {
    const float8 p = (float8)s[t];
    const __global float* v = vh + kv_row(t, kw.wrap_at, kw.ring) * N_EMBD_KV;
    for (int d = 0; d < HD8; ++d) acc[d] = fma(p, vload8(d, v), acc[d]);
  }
  *m_out = m;
  *l_out = l;
}

// Split sp of n_split of head hd over window kw; the head's last split to
// finish merges.
inline void attend_split8(int hd, int sp, int n_split, KvWindow kw, const __global float* q,
                          const __global float* k_cache, const __global float* v_cache,
                          __global float* scores, __global float* att, __global float* att_part,
                          volatile __global uint* att_count) {
  const int span = (kw.n + n_split - 1) / n_split;
  const int t0 = sp * span, t1 = min(kw.n, t0 + span);
  float m, l;  // an empty range leaves m = -FLT_MAX, l = 0, acc = 0
  float8 acc[HD8];
  attend_range8(hd, q, k_cache, v_cache, kw, t0, t1, scores, &m, &l, acc);
  if (n_split == 1) {
    const float inv = 1.0f / l;
    for (int d = 0; d < HD8; ++d) vstore8(acc[d] * inv, d, att + hd * HEAD_DIM);
    return;
  }
  __global float* pp = att_part + (hd * ATT_SPLIT_MAX + sp) * ATT_PART;
  for (int d = 0; d < HD8; ++d) vstore8(acc[d], d, pp);
  pp[HEAD_DIM] = m;
  pp[HEAD_DIM + 1] = l;
  // The increment publishes the stores above (an atomic read-modify-write;
  // x86 keeps store order), and the last one's loads stay below it.
  if (atomic_inc(&att_count[hd]) != (uint)(n_split - 1)) return;
  atomic_xchg(&att_count[hd], 0u);
  const __global float* ph = att_part + hd * ATT_SPLIT_MAX * ATT_PART;
  float mm = -FLT_MAX;
  for (int i = 0; i < n_split; ++i) {
    if (ph[i * ATT_PART + HEAD_DIM + 1] > 0.0f) mm = fmax(mm, ph[i * ATT_PART + HEAD_DIM]);
  }
  float8 num[HD8];
  for (int d = 0; d < HD8; ++d) num[d] = 0.0f;
  float den = 0.0f;
  for (int i = 0; i < n_split; ++i) {
    const float li = ph[i * ATT_PART + HEAD_DIM + 1];
    if (li <= 0.0f) continue;
    const float f = exp(ph[i * ATT_PART + HEAD_DIM] - mm);
    den += f * li;
    for (int d = 0; d < HD8; ++d) num[d] = fma((float8)f, vload8(d, ph + i * ATT_PART), num[d]);
  }
  const float inv = 1.0f / den;
  for (int d = 0; d < HD8; ++d) vstore8(num[d] * inv, d, att + hd * HEAD_DIM);
}
#endif

// ---- the token's buffers --------------------------------------------------------

// What the token reads and never writes (llama2.c's TransformerWeights).
typedef struct {
  const __global uchar* arena;      // every weight, at the byte offsets below
  const __global ulong* layer_off;  // (N_LAYER, LO_N) offsets of each layer's weights
  ulong embd_q, embd_s;             // token_embd (N_VOCAB, N_EMBD), type WT_EMBD
  ulong head_q, head_s;             // lm_head (N_VOCAB, N_EMBD), type WT_HEAD
  ulong out_norm;                   // (N_EMBD) float
  const __global float2* rope_cs;   // (n_ctx, N_ROT / 2) cos, sin
  const __global float2* rope_cs_swa;  // the same for sliding-window layers
} Weights;

// What the token writes (llama2.c's RunState).
typedef struct {
  __global float* x;                  // (N_EMBD) the residual stream
  __global float* q;                  // (N_EMBD_Q) this position's queries
  __global float* k_cache;            // per layer N_CTX or KV_RING rows of N_EMBD_KV
  __global float* v_cache;            // (engine/cl/decode_state.h's kv_layers)
  __global float* att;                // (N_EMBD_Q) attention output, heads side by side
  __global float* h;                  // (N_FF) silu(gate) * up
  __global float* logits;             // (N_VOCAB)
  __global float* part_val;           // (n_groups) each group's best logit
  __global int* part_idx;             // (n_groups) and its id
  __global float* scores;             // (N_HEAD, N_CTX) attention scratch
  __global float* att_part;           // (N_HEAD, ATT_SPLIT_MAX, ATT_PART) split partials
  volatile __global uint* att_count;  // (N_HEAD) splits done per head
  __global float* xg;                 // (N_EMBD) this group's normed input (its slot of xn)
  __global uchar* xq;                 // a stage's input in 16-bit form (next in the slot)
  __global float* o;                  // (N_EMBD) POST_NORMS: Wo att, then Wd h
  __global float* xr;                 // POST_NORMS: this group's residual stream (its slot)
} State;

// A matrix of the arena: payloads and scales (fp16 bits).
typedef struct {
  const __global uchar* q;
  const __global ushort* s;
} Matrix;
// The matrix whose offsets are lo[q_slot], lo[s_slot] (LO_*).
CPU_INLINE Matrix layer_matrix(const Weights* w, const __global ulong* lo, int q_slot, int s_slot) {
  const Matrix m = {w->arena + lo[q_slot], (const __global ushort*)(w->arena + lo[s_slot])};
  return m;
}

// ---- the stages -------------------------------------------------------------------

// Group 0: x = row `token` of the embedding (0 for an id out of range).
CPU_INLINE void embed(const Weights* w, __global float* x, int token) {
  const int row = token >= 0 && token < N_VOCAB ? token : 0;
  for (int i = 0; i < N_EMBD; ++i) {
    x[i] = embd_value(w->arena + w->embd_q, w->arena + w->embd_s, row, i);
#ifdef EMBED_SCALE
    x[i] *= EMBED_SCALE;
#endif
  }
}

// rows_dot of matrix m (rows of n_in values) of type `type` with `in`, or
// rows_dot_x16 with in16 (its 16-bit form) where the type takes it.
CPU_INLINE void rows_dot_typed(const int type, Matrix m, int n_in, int row0, int n_rows,
                               const __global float* in, X16 in16, float* dots) {
  if (X16_TYPE(type)) {
    rows_dot_x16(type, m.q, m.s, n_in, row0, n_rows, in16, dots);
  } else {
    rows_dot(type, m.q, m.s, n_in, row0, n_rows, in, 0, 0, dots);
  }
}

// rows_dot_typed with m of type type_alt where `alt`, else `type`: a role's
// two types (alt is a constant false at every call where they are one,
// USES_ALT, and only `type`'s code is left).
CPU_INLINE void rows_dot_alt(const int type, const int type_alt, bool alt, Matrix m, int n_in,
                             int row0, int n_rows, const __global float* in, X16 in16,
                             float* dots) {
  if (alt) {
    rows_dot_typed(type_alt, m, n_in, row0, n_rows, in, in16, dots);
  } else {
    rows_dot_typed(type, m, n_in, row0, n_rows, in, in16, dots);
  }
}

// `in` (n values) in 16-bit form in this group's slot where `needed` (a
// literal), else an unused value.
CPU_INLINE X16 stage_x16(const State* s, const __global float* in, int n, const bool needed) {
  if (needed) return x16_quantize(in, 0, 1.0f, n, s->xq);
  const X16 none = {0, 0, 0};
  return none;
}

// The residual stream as a normed stage reads it: x, or with POST_NORMS this
// group's copy xr after adding the last matrix stage's o * post / rms(o)
// (post null: xr = x, the embedding, at layer 0's first stage).
CPU_INLINE const __global float* stage_residual(const State* s, const __global float* post) {
#if POST_NORMS
  if (!post) {
    for (int i = 0; i < N_EMBD; ++i) s->xr[i] = s->x[i];
  } else {
    const float scale = rms_scale(s->o, N_EMBD, RMS_EPS);
    for (int i = 0; i < N_EMBD; ++i) s->xr[i] += s->o[i] * scale * post[i];
  }
  return s->xr;
#else
  return s->x;
#endif
}

#if !GENERAL_GRAPH && !QKV_STACKED
// P1's rows from0 .. to - 1 of [Q; K; V] that lie in matrix `m` (0 Q, 1 K,
// 2 V: rows first .. first + n - 1 of the stack, type `type` or type_alt
// where `alt`), NR at a time: dots, RoPE, stores.
CPU_INLINE void qkv_part(const State* s, X16 xg16, const __global float2* rope_cs, int type,
                         int type_alt, bool alt, Matrix m, int first, int n, int from0, int to,
                         ulong cache_off, int pos) {
  const int r_end = min(to, first + n) - first;  // in m's rows
  float dots[NR];
  for (int row0 = max(from0, first) - first; row0 < r_end; row0 += NR) {
    rows_dot_alt(type, type_alt, alt, m, N_EMBD, row0, r_end, s->xg, xg16, dots);
    for (int r = 0; r < NR && row0 + r < r_end; r += 2) {
      rope_store_pair(first + row0 + r, dots[r], dots[r + 1], N_EMBD, N_EMBD_KV, HEAD_DIM, N_ROT,
                      rope_cs, pos, s->q, s->k_cache, s->v_cache, cache_off);
    }
  }
}
#endif

#if GENERAL_GRAPH
// RoPE of a head's first N_ROT values v (in registers) by the angles of
// position table cs (N_ROT / 2 (cos, sin)): pairs (2j, 2j + 1), or with NEOX
// (j, j + N_ROT / 2).
inline void rope_head(float* v, const __global float2* cs) {
  for (int j = 0; j < N_ROT / 2; ++j) {
    const int a = NEOX ? j : 2 * j, b = NEOX ? j + N_ROT / 2 : 2 * j + 1;
    const float2 c = cs[j];
    const float va = v[a], vb = v[b];
    v[a] = va * c.x - vb * c.y;
    v[b] = va * c.y + vb * c.x;
  }
}

// P1 of the other graphs: claim u is head u of [Q; K; V] (N_HEAD q heads,
// then N_HEAD_KV k heads and v heads): its HEAD_DIM rows, NR at a time, into
// registers; + its biases (QKV_BIAS); a q or k head RMS-normed (QK_NORM) and
// turned by RoPE at pos (table rope), q times Q_MUL; q -> q, k and v -> the
// cache row at cache_off.
CPU_INLINE void qkv_heads(const Weights* w, const State* s, Grid* g, const __global ulong* lo,
                          X16 xg16, const __global float2* rope, ulong cache_off, int pos) {
  float hv[HEAD_DIM + NR];  // + NR: the last rows' dots past HEAD_DIM
  for (uint u; claim(g, N_HEAD + 2 * N_HEAD_KV, &u);) {
    const int kind = u < N_HEAD ? 0 : u < N_HEAD + N_HEAD_KV ? 1 : 2;  // q, k, v
    const int head = kind == 0 ? u : kind == 1 ? u - N_HEAD : u - N_HEAD - N_HEAD_KV;
#if QKV_STACKED
    const Matrix m = layer_matrix(w, lo, LO_Q_Q, LO_Q_S);
    const int first = u * HEAD_DIM;  // in [Q; K; V]
    for (int r = 0; r < HEAD_DIM; r += NR) {
      rows_dot_typed(WT_Q, m, N_EMBD, first + r, first + HEAD_DIM, s->xg, xg16, hv + r);
    }
#else
    const int slot = kind == 0 ? LO_Q_Q : kind == 1 ? LO_K_Q : LO_V_Q;  // its _S follows
    const Matrix m = layer_matrix(w, lo, slot, slot + 1);
    const int first = head * HEAD_DIM;  // in its matrix
    for (int r = 0; r < HEAD_DIM; r += NR) {
      if (kind == 0) {
        rows_dot_alt(WT_Q, WT_Q_ALT, USES_ALT(lo, Q), m, N_EMBD, first + r, first + HEAD_DIM, s->xg,
                     xg16, hv + r);
      } else if (kind == 1) {
        rows_dot_alt(WT_K, WT_K_ALT, USES_ALT(lo, K), m, N_EMBD, first + r, first + HEAD_DIM, s->xg,
                     xg16, hv + r);
      } else {
        rows_dot_alt(WT_V, WT_V_ALT, USES_ALT(lo, V), m, N_EMBD, first + r, first + HEAD_DIM, s->xg,
                     xg16, hv + r);
      }
    }
#endif
#if QKV_BIAS
    const __global float* bias = (const __global float*)(w->arena + lo[LO_QKV_BIAS]) + u * HEAD_DIM;
    for (int i = 0; i < HEAD_DIM; ++i) hv[i] += bias[i];
#endif
    if (kind < 2) {
#if QK_NORM
      head_norm(hv, (const __global float*)(w->arena + lo[kind == 0 ? LO_Q_NORM : LO_K_NORM]),
                HEAD_DIM);
#endif
      rope_head(hv, rope + (size_t)pos * (N_ROT / 2));
    }
    if (kind == 0) {
      for (int i = 0; i < HEAD_DIM; ++i) s->q[head * HEAD_DIM + i] = hv[i] * Q_MUL;
    } else {
      __global float* dst = (kind == 1 ? s->k_cache : s->v_cache) + cache_off + head * HEAD_DIM;
      for (int i = 0; i < HEAD_DIM; ++i) dst[i] = hv[i];
    }
  }
}
#endif

// P1: q; k; v = Wqkv (x * attn_norm / rms(x)), x the stage's residual, RoPE
// (table rope), k and v -> the cache row at cache_off. Llama's graph: claims
// are chunks of [Q; K; V]'s rows in pairs; with Q, K and V not stacked (each
// its own matrix and type in the arena), a chunk's rows are taken matrix by
// matrix (chunks and matrices start at even rows, so the RoPE pairs stay
// whole). Other graphs: claims are heads (qkv_heads).
CPU_INLINE void qkv_rope_append(const Weights* w, const State* s, Grid* g, const __global ulong* lo,
                                const __global float* x, const __global float2* rope,
                                ulong cache_off, int pos) {
  norm_into(x, (const __global float*)(w->arena + lo[LO_ATTN_NORM]), s->xg);
  const X16 xg16 = stage_x16(s, s->xg, N_EMBD, ROLE_X16(Q) || ROLE_X16(K) || ROLE_X16(V));
#if GENERAL_GRAPH
  qkv_heads(w, s, g, lo, xg16, rope, cache_off, pos);
#else
  const int chunk = chunk_rows(N_QKV, g->n_groups);
#if QKV_STACKED
  const Matrix wqkv = layer_matrix(w, lo, LO_Q_Q, LO_Q_S);
  float dots[NR];
  for (uint c; claim(g, n_chunks(N_QKV, chunk), &c);) {
    for (int row0 = c * chunk; row0 < min(N_QKV, (int)(c + 1) * chunk); row0 += NR) {
      rows_dot_typed(WT_Q, wqkv, N_EMBD, row0, N_QKV, s->xg, xg16, dots);
      for (int r = 0; r < NR && row0 + r < N_QKV; r += 2) {
        rope_store_pair(row0 + r, dots[r], dots[r + 1], N_EMBD, N_EMBD_KV, HEAD_DIM, N_ROT, rope,
                        pos, s->q, s->k_cache, s->v_cache, cache_off);
      }
    }
  }
#else
  const Matrix wq = layer_matrix(w, lo, LO_Q_Q, LO_Q_S);
  const Matrix wk = layer_matrix(w, lo, LO_K_Q, LO_K_S);
  const Matrix wv = layer_matrix(w, lo, LO_V_Q, LO_V_S);
  const bool alt_q = USES_ALT(lo, Q), alt_k = USES_ALT(lo, K), alt_v = USES_ALT(lo, V);
  for (uint c; claim(g, n_chunks(N_QKV, chunk), &c);) {
    const int from0 = c * chunk, to = min(N_QKV, (int)(c + 1) * chunk);
    qkv_part(s, xg16, rope, WT_Q, WT_Q_ALT, alt_q, wq, 0, N_EMBD, from0, to, cache_off, pos);
    qkv_part(s, xg16, rope, WT_K, WT_K_ALT, alt_k, wk, N_EMBD, N_EMBD_KV, from0, to, cache_off,
             pos);
    qkv_part(s, xg16, rope, WT_V, WT_V_ALT, alt_v, wv, N_EMBD + N_EMBD_KV, N_EMBD_KV, from0, to,
             cache_off, pos);
  }
#endif
#endif
}

// P2: attention over window kw. A claim is a (KV head, split): the query
// heads that share the KV head run one after another over the same K and V
// rows, which the first of them brought into this core's caches. Head sizes
// that are not a multiple of 8: a whole head per claim.
CPU_INLINE void attention(const State* s, Grid* g, KvWindow kw, int n_split) {
#if HEAD_DIM % 8 == 0
  for (uint u; claim(g, N_HEAD_KV * n_split, &u);) {
    const int kvh = u / n_split, sp = u % n_split;
    for (int i = 0; i < N_HEAD / N_HEAD_KV; ++i) {
      attend_split8(kvh * (N_HEAD / N_HEAD_KV) + i, sp, n_split, kw, s->q, s->k_cache, s->v_cache,
                    s->scores, s->att, s->att_part, s->att_count);
    }
  }
#else
  for (uint hd; claim(g, N_HEAD, &hd);) {
    attend_head(hd, s->q, s->k_cache, s->v_cache, kw.off, kw.n, kw.wrap_at, kw.ring, N_HEAD,
                N_HEAD_KV, HEAD_DIM, s->scores, N_CTX, s->att);
  }
#endif
}

// P3 and P5: out += W in (out = W in where !add), W (N_EMBD x n_in) of type
// `type` (type_alt where `alt`): Wo att, Wd h; `in` made 16-bit first where
// `x16` (a literal).
CPU_INLINE void matvec_residual(const State* s, Grid* g, int type, int type_alt, bool alt,
                                Matrix m, int n_in, const __global float* in, const bool x16,
                                __global float* out, const bool add) {
  const X16 in16 = stage_x16(s, in, n_in, x16);
  const int chunk = chunk_rows(N_EMBD, g->n_groups);
  float dots[NR];
  for (uint c; claim(g, n_chunks(N_EMBD, chunk), &c);) {
    for (int row0 = c * chunk; row0 < min(N_EMBD, (int)(c + 1) * chunk); row0 += NR) {
      rows_dot_alt(type, type_alt, alt, m, n_in, row0, N_EMBD, in, in16, dots);
      for (int r = 0; r < NR && row0 + r < N_EMBD; ++r) {
        out[row0 + r] = add ? out[row0 + r] + dots[r] : dots[r];
      }
    }
  }
}

// P4: h = silu(Wg x') * (Wu x') (FFN_GELU: gelu(Wg x') with tanh's form),
// x' = x * ffn_norm / rms(x), x the stage's residual.
CPU_INLINE void ffn_gate_up(const Weights* w, const State* s, Grid* g, const __global ulong* lo,
                            const __global float* x) {
  norm_into(x, (const __global float*)(w->arena + lo[LO_FFN_NORM]), s->xg);
  const X16 xg16 = stage_x16(s, s->xg, N_EMBD, ROLE_X16(FFN));
  const Matrix wg = layer_matrix(w, lo, LO_GATE_Q, LO_GATE_S);
  const Matrix wu = layer_matrix(w, lo, LO_UP_Q, LO_UP_S);
  const bool alt = USES_ALT(lo, FFN);
  const int chunk = chunk_rows(N_FF, g->n_groups);
  float gate[NR], up[NR];
  for (uint c; claim(g, n_chunks(N_FF, chunk), &c);) {
    for (int row0 = c * chunk; row0 < min(N_FF, (int)(c + 1) * chunk); row0 += NR) {
      rows_dot_alt(WT_FFN, WT_FFN_ALT, alt, wg, N_EMBD, row0, N_FF, s->xg, xg16, gate);
      rows_dot_alt(WT_FFN, WT_FFN_ALT, alt, wu, N_EMBD, row0, N_FF, s->xg, xg16, up);
      for (int r = 0; r < NR && row0 + r < N_FF; ++r) {
        const float gr = gate[r];
#if FFN_GELU
        s->h[row0 + r] = 0.5f * gr * (1.0f + tanh(0.7978845608f * (gr + 0.044715f * gr * gr * gr))) *
                         up[r];
#else
        s->h[row0 + r] = gr / (1.0f + exp(-gr)) * up[r];
#endif
      }
    }
  }
}

// The head: logits = Whead (x * output_norm / rms(x)), x the residual; this
// group's argmax candidate -> part_val, part_idx.
CPU_INLINE void head_logits(const Weights* w, const State* s, Grid* g, const __global float* x) {
  norm_into(x, (const __global float*)(w->arena + w->out_norm), s->xg);
  const X16 xg16 = stage_x16(s, s->xg, N_EMBD, X16_TYPE(WT_HEAD));
  const Matrix wh = {w->arena + w->head_q, (const __global ushort*)(w->arena + w->head_s)};
  const int chunk = chunk_rows(N_VOCAB, g->n_groups);
  float best = 0.0f;
  int best_i = -1;
  float dots[NR];
  for (uint c; claim(g, n_chunks(N_VOCAB, chunk), &c);) {
    for (int row0 = c * chunk; row0 < min(N_VOCAB, (int)(c + 1) * chunk); row0 += NR) {
      rows_dot_typed(WT_HEAD, wh, N_EMBD, row0, N_VOCAB, s->xg, xg16, dots);
      for (int r = 0; r < NR && row0 + r < N_VOCAB; ++r) {
        s->logits[row0 + r] = dots[r];
        if (beats(dots[r], row0 + r, best, best_i)) {
          best = dots[r];
          best_i = row0 + r;
        }
      }
    }
  }
  s->part_val[g->group] = best;
  s->part_idx[g->group] = best_i;
}

// Group 0, after the head's barrier: the best of the groups' candidates
// into ids[0] (-2 if a barrier gave up), and the claim counter back to 0
// for the next launch (every claim of this one is made).
CPU_INLINE void pick_token(const State* s, Grid* g, __global int* ids) {
  float best = 0.0f;
  int best_i = -1;
  for (int gi = 0; gi < g->n_groups; ++gi) {
    if (beats(s->part_val[gi], s->part_idx[gi], best, best_i)) {
      best = s->part_val[gi];
      best_i = s->part_idx[gi];
    }
  }
  ids[0] = *g->abort_flag ? -2 : (best_i < 0 ? 0 : best_i);
  *g->work = 0;
}

// ---- the token ----------------------------------------------------------------

__kernel __attribute__((reqd_work_group_size(CPU_WG, 1, 1))) void decode_token(
    const __global uchar* arena, const __global ulong* layer_off, ulong embd_q, ulong embd_s,
    ulong head_q, ulong head_s, ulong out_norm, const __global float2* rope_cs,
    const __global float2* rope_cs_swa, __global float* k_cache, __global float* v_cache,
    __global float* x, __global float* q, __global float* att, __global float* h,
    __global float* logits, __global float* part_val, __global int* part_idx, __global int* ids,
    int token_index, int pos, volatile __global uint* bar, uint bar_base,
    volatile __global uint* abort_flag, __global ulong* trace, volatile __global uint* work,
    __global float* scores, __global float* xn, ulong spin_ticks, __global float* att_part,
    volatile __global uint* att_count, __global float* o) {
  if (get_local_id(0) != 0) return;
  const int group = get_group_id(0);
  const int n_groups = get_num_groups(0);
  if (*abort_flag) {  // an earlier token gave up: this path is being abandoned
    if (group == 0) ids[0] = -2;
    return;
  }
  Grid g = {group, n_groups, bar, bar_base, 0, abort_flag, spin_ticks, trace, work, 0};
  const Weights w = {arena, layer_off, embd_q, embd_s, head_q, head_s, out_norm, rope_cs,
                     rope_cs_swa};
  __global float* xg = xn + (size_t)group * XN_STRIDE;
  __global uchar* xq = (__global uchar*)(xg + XG_FLOATS);
  const State s = {x,        q,        k_cache, v_cache,  att,       h,  logits, part_val,
                   part_idx, scores,   att_part, att_count, xg,      xq, o,      xg + XR_AT};
  if (trace && group == 0) trace[0] = __builtin_ia32_rdtsc();

  if (group == 0) embed(&w, x, ids[token_index]);
  grid_sync(&g);

  const int n_pos = pos + 1;
  ulong cache_base = 0;  // this layer's K / V rows (engine/cl/decode_state.h)
  for (int il = 0; il < N_LAYER; ++il) {
    const __global ulong* lo = layer_off + il * LO_N;
#if WINDOW > 0
    const bool swa = ((uint)lo[LO_ALT] & LAYER_SWA) != 0;
    const int ring = swa ? KV_RING : N_CTX;
    const int first = swa ? max(0, n_pos - WINDOW) : 0;
    const __global float2* rope = swa ? rope_cs_swa : rope_cs;
#else
    const int ring = N_CTX;
    const int first = 0;
    const __global float2* rope = rope_cs;
#endif
#if POST_NORMS
    const __global float* post_attn = (const __global float*)(arena + lo[LO_POST_ATTN]);
    const __global float* post_ffn_before =
        il > 0 ? (const __global float*)(arena + lo[LO_POST_FFN - LO_N]) : 0;
#else
    const __global float* post_attn = 0;
    const __global float* post_ffn_before = 0;
#endif

    // P1: q, k, v = Wqkv rmsnorm(x); RoPE; k, v -> cache
    qkv_rope_append(&w, &s, &g, lo, stage_residual(&s, post_ffn_before), rope,
                    cache_base + (ulong)(pos % ring) * N_EMBD_KV, pos);
    grid_sync(&g);
    // P2: att = softmax(q K^T / sqrt(HEAD_DIM)) V over the window's keys.
    // At least two splits from two keys on: the claims are KV heads (3 for
    // SmolLM2), which alone would not spread evenly over the cores.
    const int row0 = first % ring;
    const KvWindow kw = {cache_base + (ulong)row0 * N_EMBD_KV, n_pos - first, ring - row0, ring};
    attention(&s, &g, kw,
              clamp((kw.n + ATT_SPLIT_POS - 1) / ATT_SPLIT_POS, min(2, kw.n), ATT_SPLIT_MAX));
    grid_sync(&g);
    // P3: x += Wo att (POST_NORMS: o = Wo att)
    matvec_residual(&s, &g, WT_WO, WT_WO_ALT, USES_ALT(lo, WO),
                    layer_matrix(&w, lo, LO_WO_Q, LO_WO_S), N_EMBD_Q, att, ROLE_X16(WO),
                    POST_NORMS ? o : x, !POST_NORMS);
    grid_sync(&g);
    // P4: h = silu(Wg rmsnorm(x)) * (Wu rmsnorm(x))
    ffn_gate_up(&w, &s, &g, lo, stage_residual(&s, post_attn));
    grid_sync(&g);
    // P5: x += Wd h (POST_NORMS: o = Wd h)
    matvec_residual(&s, &g, WT_DOWN, WT_DOWN_ALT, USES_ALT(lo, DOWN),
                    layer_matrix(&w, lo, LO_DOWN_Q, LO_DOWN_S), N_FF, h, ROLE_X16(DOWN),
                    POST_NORMS ? o : x, !POST_NORMS);
    grid_sync(&g);
    cache_base += (ulong)ring * N_EMBD_KV;
  }

  // The head: logits = Whead rmsnorm(x), each group's argmax candidate; then
  // group 0 picks the token.
#if POST_NORMS
  const __global float* post_ffn_last =
      (const __global float*)(arena + layer_off[(N_LAYER - 1) * LO_N + LO_POST_FFN]);
#else
  const __global float* post_ffn_last = 0;
#endif
  head_logits(&w, &s, &g, stage_residual(&s, post_ffn_last));
  grid_sync(&g);
  if (group == 0) pick_token(&s, &g, ids);
}

// Start-up check that all n_groups work-groups run at once and that data
// written before a barrier is seen after it: errors[0] counts mismatches.
// Same arguments as decode_persistent.cl's, and the timeout.
__kernel __attribute__((reqd_work_group_size(CPU_WG, 1, 1))) void grid_barrier_selftest(
    volatile __global uint* counter, uint bar_base, int rounds, volatile __global int* data,
    volatile __global uint* errors, volatile __global uint* abort_flag, ulong spin_ticks) {
  if (get_local_id(0) != 0) return;
  const int g = get_group_id(0);
  const int n = get_num_groups(0);
  for (int r = 0; r < rounds; ++r) {
    data[(r & 1) * n + g] = r * n + g;
    if (!cpu_grid_sync(counter, bar_base + (uint)(r + 1) * (uint)n, abort_flag, spin_ticks)) {
      return;
    }
    const int other = (g + 1 + r) % n;
    if (data[(r & 1) * n + other] != r * n + other) atomic_inc(errors);
  }
}
