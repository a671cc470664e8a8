// One decode token in ONE launch on CPU devices (PoCL on x86-64), built
// after kernels/persistent_layout.cl, cpu_dot.cl and attention_cpu.cl.
//
// Why: PoCL's worker threads sleep between commands, and waking one costs
// 20-35 us per launch on the 2-core VM we measured (a 30-launch chain of
// matvecs ran at 11 G weights/s, the same rows as one launch at 19.4). The
// multi-kernel plan's 122 launches per token thus cost ~4 ms of a ~17 ms
// token. Here one work-group per core (n_groups = compute units) stays in
// the kernel for the whole token and the groups meet at spin barriers
// (~0.1 us each) between the stages that read each other's results:
//   embed                     x = embedding row of ids[token_index]
//   per layer il:
//   P1  q; k; v = Wqkv (x * attn_norm * rms), RoPE, k and v -> cache at pos
//   P2  attention of each head over cache positions 0..pos -> att, a claim
//       per (KV head, range of positions), partials merged per head
//   P3  x += Wo att
//   P4  h = silu(Wg x') * (Wu x'), x' = x * ffn_norm * rms
//   P5  x += Wd h
//   head: logits = Whead (x * output_norm * rms), each group's argmax
//   candidate -> barrier -> group 0 writes the token to ids[0] (NaN never
//   wins, ties go to the lowest id).
// 5 barriers per layer + 2.
//
// Work split: each stage's rows ((KV head, split) pairs in P2) are claimed
// in chunks from a shared counter (CHUNKS_PER_GROUP chunks per group, so
// each chunk is a long run of rows), so a core that runs slower (another process, a noisy VM)
// takes fewer chunks instead of holding the others at the barrier. Every
// group makes exactly one failing claim per stage, so stage s's claims start
// at the sum over earlier stages of (chunks + n_groups), known to all groups
// without further communication; group 0 resets the counter at the end.
// Results do not depend on which group computes a row (same code, same order
// of operations per row). A normed stage's input x * g / rms(x) is made
// once per stage by each group into its own slot of xn. Rows are computed
// by cpu_dot.cl's rows_dot (with its software prefetch); attention by
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
// Work-groups have 2 work-items of which only the first works: the size is
// a compile-time constant for PoCL, and newer PoCL schedulers weigh a
// group's cost by log2 of its size, which is 0 for a single work-item.

#if !defined(__x86_64__)
#error "decode_persistent_cpu.cl needs an x86-64 device (rdtsc, pause)"
#endif

#define CPU_WG 2
// Rows per claim: n_rows split into CHUNKS_PER_GROUP chunks per group, a
// multiple of NR rows each (1 to 8 measured alike within the VM's noise,
// 16 slower; 64-row chunks, the first version, were slower too).
#ifndef CHUNKS_PER_GROUP
#define CHUNKS_PER_GROUP 2
#endif
#define CHUNK_ROWS(n)                                                              \
  ((((n) + n_groups * CHUNKS_PER_GROUP - 1) / (n_groups * CHUNKS_PER_GROUP) + NR - 1) / NR * \
   NR)
#define N_CHUNKS(n, c) (((n) + (c)-1) / (c))
// Floats per group in xn: N_EMBD rounded up to 32 (128-byte aligned slots).
#define XN_STRIDE ((N_EMBD + 31) / 32 * 32)

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

// The next chunk of the current stage, counted from 0 (>= the stage's
// chunk count: none left).
inline uint claim(volatile __global uint* work, uint stage_base) {
  return atomic_inc(work) - stage_base;
}

// ---- small helpers --------------------------------------------------------------

// xg = x * g / rms(x) over N_EMBD values: the input of a normed stage, made
// once per stage by each group into its own slot (multiplying by g inside
// the row loop cost 27% of a matvec's speed).
inline void norm_into(const __global float* x, const __global float* g, __global float* xg) {
  const float scale = rms_scale(x, N_EMBD, RMS_EPS);
  for (int i = 0; i < N_EMBD; ++i) xg[i] = x[i] * scale * g[i];
}

// Attention splits: a head's positions go to several claims (2, or one per
// ATT_SPLIT_POS positions, up to ATT_SPLIT_MAX), so the cores share the
// work evenly; each claim leaves its partial
// (max, sum, unnormalised sum of V) in att_part and counts itself done in
// att_count[head]; the head's last claim merges them into att.
#ifndef ATT_SPLIT_POS
#define ATT_SPLIT_POS 64
#endif

#if HEAD_DIM % 8 == 0
#define HD8 (HEAD_DIM / 8)
// Attention of query head hd over cache positions t0 .. t1 - 1 with 8-wide
// vectors, in three sweeps: scores and their max; exp (8 at a time) and
// their sum; the weighted sum of V in HD8 float8 registers. Leaves the
// running max in *m_out, the sum in *l_out and the unnormalised sum in acc.
inline void attend_range8(int hd, const __global float* q, const __global float* k_cache,
                          const __global float* v_cache, ulong layer_cache, int t0, int t1,
                          __global float* scores, float* m_out, float* l_out, float8* acc) {
  const int kvh = hd / (N_HEAD / N_HEAD_KV);
  const __global float* kh = k_cache + layer_cache + kvh * HEAD_DIM;
  const __global float* vh = v_cache + layer_cache + kvh * HEAD_DIM;
  __global float* s = scores + (size_t)hd * N_CTX;
  float8 qv[HD8];
  const float kq_scale = rsqrt((float)HEAD_DIM);
  for (int d = 0; d < HD8; ++d) qv[d] = vload8(d, q + hd * HEAD_DIM) * kq_scale;
  float m = -FLT_MAX;  // finite: built with -cl-fast-relaxed-math
  for (int t = t0; t < t1; ++t) {
    const __global float* k = kh + (size_t)t * N_EMBD_KV;
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
    const __global float* v = vh + (size_t)t * N_EMBD_KV;
    for (int d = 0; d < HD8; ++d) acc[d] = fma(p, vload8(d, v), acc[d]);
  }
  *m_out = m;
  *l_out = l;
}

// Split sp of n_split of head hd; the head's last split to finish merges.
inline void attend_split8(int hd, int sp, int n_split, int n_pos, const __global float* q,
                          const __global float* k_cache, const __global float* v_cache,
                          ulong layer_cache, __global float* scores, __global float* att,
                          __global float* att_part, volatile __global uint* att_count) {
  const int span = (n_pos + n_split - 1) / n_split;
  const int t0 = sp * span, t1 = min(n_pos, t0 + span);
  float m, l;  // an empty range leaves m = -FLT_MAX, l = 0, acc = 0
  float8 acc[HD8];
  attend_range8(hd, q, k_cache, v_cache, layer_cache, t0, t1, scores, &m, &l, acc);
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

#define Q_OF(name) (arena + lo[LO_##name##_Q])
#define S_OF(name) ((const __global ushort*)(arena + lo[LO_##name##_S]))

// ---- the token ----------------------------------------------------------------

__kernel __attribute__((reqd_work_group_size(CPU_WG, 1, 1))) void decode_token(
    const __global uchar* arena, const __global ulong* layer_off, ulong embd_q, ulong embd_s,
    ulong head_q, ulong head_s, ulong out_norm, const __global float2* rope_cs,
    __global float* k_cache, __global float* v_cache, __global float* x, __global float* q,
    __global float* att, __global float* h, __global float* logits, __global float* part_val,
    __global int* part_idx, __global int* ids, int token_index, int pos,
    volatile __global uint* bar, uint bar_base, volatile __global uint* abort_flag,
    __global ulong* trace, volatile __global uint* work, __global float* scores,
    __global float* xn, ulong spin_ticks, __global float* att_part,
    volatile __global uint* att_count) {
  if (get_local_id(0) != 0) return;
  const int group = get_group_id(0);
  const int n_groups = get_num_groups(0);
  if (*abort_flag) {  // an earlier token gave up: this path is being abandoned
    if (group == 0) ids[0] = -2;
    return;
  }
  uint n_bar = 0;
  uint stage_base = 0;  // claims made in earlier stages
  __global float* xg = xn + (size_t)group * XN_STRIDE;  // this group's normed input
  // With a trace buffer, group 0 records the TSC after each barrier.
#define SYNC()                                                                 \
  do {                                                                         \
    cpu_grid_sync(bar, bar_base + (++n_bar) * (uint)n_groups, abort_flag, spin_ticks); \
    if (trace && group == 0) trace[n_bar] = __builtin_ia32_rdtsc();            \
  } while (0)
  // Rows [chunk * c, ...) of n_rows, in blocks of NR, for each claimed c.
#define FOR_CHUNK_ROWS(row0, n_rows, chunk)                                         \
  for (uint c_, n_c_ = N_CHUNKS(n_rows, chunk); (c_ = claim(work, stage_base)) < n_c_ ||    \
                                                 ((stage_base += n_c_ + n_groups), 0);) \
    for (int row0 = c_ * (chunk); row0 < min((int)(n_rows), (int)(c_ + 1) * (chunk)); row0 += NR)
  if (trace && group == 0) trace[0] = __builtin_ia32_rdtsc();

  const int token = ids[token_index];
  if (group == 0) {
    const int row = token >= 0 && token < N_VOCAB ? token : 0;
    for (int i = 0; i < N_EMBD; ++i) {
      x[i] = embd_value(arena + embd_q, arena + embd_s, row, i);
    }
  }
  SYNC();

  // At least two splits from two positions on: the claims are KV heads
  // (3 for SmolLM2), which alone would not spread evenly over the cores.
  const int n_split = clamp((pos + ATT_SPLIT_POS) / ATT_SPLIT_POS, min(2, pos + 1), ATT_SPLIT_MAX);
  for (int il = 0; il < N_LAYER; ++il) {
    const __global ulong* lo = layer_off + il * LO_N;
    const ulong layer_cache = (ulong)il * N_CTX * N_EMBD_KV;
    float dots[NR];

    // P1: norm, q/k/v rows in pairs, RoPE, KV append.
    norm_into(x, (const __global float*)(arena + lo[LO_ATTN_NORM]), xg);
    {
      FOR_CHUNK_ROWS(row0, N_QKV, CHUNK_ROWS(N_QKV)) {
        rows_dot(WT_QKV, Q_OF(QKV), S_OF(QKV), N_EMBD, row0, N_QKV, xg, 0, 0, dots);
        for (int r = 0; r < NR && row0 + r < N_QKV; r += 2) {
          rope_store_pair(row0 + r, dots[r], dots[r + 1], N_EMBD, N_EMBD_KV, HEAD_DIM, N_ROT,
                          rope_cs, pos, q, k_cache, v_cache,
                          layer_cache + (ulong)pos * N_EMBD_KV);
        }
      }
    }
    SYNC();

    // P2: attention, a (KV head, split) per claim: the query heads that
    // share the KV head run one after another over the same K and V rows,
    // which the first of them brought into this core's caches.
#if HEAD_DIM % 8 == 0
    for (uint n_c = N_HEAD_KV * n_split, u; (u = claim(work, stage_base)) < n_c ||
                                            ((stage_base += n_c + n_groups), 0);) {
      const int kvh = u / n_split, sp = u % n_split;
      for (int g = 0; g < N_HEAD / N_HEAD_KV; ++g) {
        attend_split8(kvh * (N_HEAD / N_HEAD_KV) + g, sp, n_split, pos + 1, q, k_cache, v_cache,
                      layer_cache, scores, att, att_part, att_count);
      }
    }
#else
    for (uint n_c = N_HEAD, hd; (hd = claim(work, stage_base)) < n_c ||
                                ((stage_base += n_c + n_groups), 0);) {
      attend_head(hd, q, k_cache, v_cache, layer_cache, pos + 1, N_HEAD, N_HEAD_KV, HEAD_DIM,
                  scores, N_CTX, att);
    }
#endif
    SYNC();

    // P3: x += Wo att.
    FOR_CHUNK_ROWS(row0, N_EMBD, CHUNK_ROWS(N_EMBD)) {
      rows_dot(WT_WO, Q_OF(WO), S_OF(WO), N_EMBD, row0, N_EMBD, att, 0, 0, dots);
      for (int r = 0; r < NR && row0 + r < N_EMBD; ++r) x[row0 + r] += dots[r];
    }
    SYNC();

    // P4: norm, gate and up, SwiGLU.
    norm_into(x, (const __global float*)(arena + lo[LO_FFN_NORM]), xg);
    {
      float up[NR];
      FOR_CHUNK_ROWS(row0, N_FF, CHUNK_ROWS(N_FF)) {
        rows_dot(WT_FFN, Q_OF(GATE), S_OF(GATE), N_EMBD, row0, N_FF, xg, 0, 0, dots);
        rows_dot(WT_FFN, Q_OF(UP), S_OF(UP), N_EMBD, row0, N_FF, xg, 0, 0, up);
        for (int r = 0; r < NR && row0 + r < N_FF; ++r) {
          h[row0 + r] = dots[r] / (1.0f + exp(-dots[r])) * up[r];
        }
      }
    }
    SYNC();

    // P5: x += Wd h.
    FOR_CHUNK_ROWS(row0, N_EMBD, CHUNK_ROWS(N_EMBD)) {
      rows_dot(WT_DOWN, Q_OF(DOWN), S_OF(DOWN), N_FF, row0, N_EMBD, h, 0, 0, dots);
      for (int r = 0; r < NR && row0 + r < N_EMBD; ++r) x[row0 + r] += dots[r];
    }
    SYNC();
  }

  // Head: final norm, logits, this group's argmax candidate.
  norm_into(x, (const __global float*)(arena + out_norm), xg);
  {
    float best = 0.0f;
    int best_i = -1;
    float dots[NR];
    FOR_CHUNK_ROWS(row0, N_VOCAB, CHUNK_ROWS(N_VOCAB)) {
      rows_dot(WT_HEAD, arena + head_q, (const __global ushort*)(arena + head_s), N_EMBD, row0,
               N_VOCAB, xg, 0, 0, dots);
      for (int r = 0; r < NR && row0 + r < N_VOCAB; ++r) {
        logits[row0 + r] = dots[r];
        if (beats(dots[r], row0 + r, best, best_i)) {
          best = dots[r];
          best_i = row0 + r;
        }
      }
    }
    part_val[group] = best;
    part_idx[group] = best_i;
  }
  SYNC();
  if (group == 0) {
    float best = 0.0f;
    int best_i = -1;
    for (int gi = 0; gi < n_groups; ++gi) {
      if (beats(part_val[gi], part_idx[gi], best, best_i)) {
        best = part_val[gi];
        best_i = part_idx[gi];
      }
    }
    ids[0] = *abort_flag ? -2 : (best_i < 0 ? 0 : best_i);
    *work = 0;  // every claim of this launch is made: the next starts from 0
  }
#undef SYNC
#undef FOR_CHUNK_ROWS
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
