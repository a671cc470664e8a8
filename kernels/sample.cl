// The sampling chain on the device, from the logits of one position to the
// chosen id, computing what the CPU sampler (engine/chat/sampler.cpp) computes
// bit for bit, so that the same seed draws the same ids on both:
//   repeat / frequency / presence penalties over the last n_recent ids ->
//   top-k -> softmax at the temperature -> top-p -> min-p -> draw.
// One launch (sample_chain) in two stages:
//   every work-group g applies the penalties to the ids of its chunk of the
//   vocabulary (in place, in `logits`), then selects the chunk's top_k
//   candidates and writes them, unordered, to part[g * K_MAX ..] with their
//   number in part_n[g];
//   the last group to finish (an atomic count) selects the top_k of all the
//   groups' candidates, sorts them, runs softmax, top-p, min-p and the draw,
//   and writes the id to ids[0] (the next decode step's input) and to
//   history[pos + 1] (the recent ids the next step's penalties read).
//
// Order: a candidate is the 64-bit composite (key(logit) << 32) | (~id),
// where key() maps the float's bits to an unsigned integer in the same order
// (-0 as +0). Larger composite = better; equal logits: the lower id first,
// as the CPU's stable sort orders them. NaN is never a candidate. The
// composites are unique, so "the k largest" is one set: in work-groups of
// many items a radix select (8 bits a pass from the top, a 256-bin local
// histogram) narrows the k-th largest until its bin holds exactly the ones
// still needed (typically after 2 or 3 passes), and a last pass gathers
// everything at or above it; a work-group of one item (CPU devices) keeps
// a min-heap of the k largest in one pass.
//
// Exactness: float steps of the CPU (the penalties) are done in double and
// rounded to float, which gives the correctly rounded float result (a double
// has more than 2 x 24 + 2 bits), even where a device's float division is
// not correctly rounded; double steps (softmax sums, top-p mass, the draw)
// are done in double, sequentially in the CPU's order; exp() is
// sampler_exp(), the same polynomial the CPU uses (no library exp, whose
// last bit differs between implementations). Needs cl_khr_fp64; every double
// step goes through d_add, d_sub, d_mul or d_div (below), which keep one
// rounding each also in decode_persistent.cl's fast-math build.
//
// The random number: splitmix64 (Steele, Lea, Flood 2014, "Fast splittable
// pseudorandom number generators") as a counter-based hash: the draw-th
// output of the generator seeded with `seed` is mix(seed + (draw + 1) *
// 0x9E3779B97F4A7C15); its top 53 bits give a double in [0, 1).
//
// ids[0] < 0 on entry (the persistent kernel's barrier gave up) is left as it
// is, so the host still sees the failure.

#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#ifndef SAMPLE_WG
#define SAMPLE_WG 256  // work-items per group (1 on CPU devices: no atomics)
#endif
#ifndef K_MAX
#define K_MAX 256  // largest top_k; each group keeps at most this many
#endif

#if SAMPLE_WG == 1
#define LOCAL_INC(p) ((*(p))++)
#else
#define LOCAL_INC(p) atomic_inc(p)
#endif

// The double steps, one rounding each. decode_persistent.cl takes these
// functions into its own build (the chain of a sampled token runs at the end
// of that kernel), which has -cl-fast-relaxed-math: there PTX instructions
// with an explicit rounding mode (SAMPLE_PTX_MATH), which no compiler fuses,
// reorders or replaces by a reciprocal; elsewhere plain operators in a
// strict build.
#if SAMPLE_PTX_MATH
inline double d_add(double a, double b) {
  double r;
  asm volatile("add.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
  return r;
}
inline double d_sub(double a, double b) {
  double r;
  asm volatile("sub.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
  return r;
}
inline double d_mul(double a, double b) {
  double r;
  asm volatile("mul.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
  return r;
}
inline double d_div(double a, double b) {
  double r;
  asm volatile("div.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
  return r;
}
#else
inline double d_add(double a, double b) { return a + b; }
inline double d_sub(double a, double b) { return a - b; }
inline double d_mul(double a, double b) { return a * b; }
inline double d_div(double a, double b) { return a / b; }
#endif

// NaN by its bits (a fast-math build may take isnan() as false).
inline bool nan_bits(float v) { return (as_uint(v) & 0x7FFFFFFFu) > 0x7F800000u; }

// The float's order as an unsigned integer (NaN excluded by the callers).
inline uint key_of(float v) {
  // -0 sorts as +0: they compare equal on the CPU (by the bits: a fast-math
  // build may drop a float test that only changes the sign of a zero).
  const uint bits = (as_uint(v) & 0x7FFFFFFFu) == 0 ? 0u : as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

inline float logit_of(uint key) {
  return as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

inline ulong composite(float v, int id) {
  return ((ulong)key_of(v) << 32) | (ulong)(0xFFFFFFFFu - (uint)id);
}

inline int id_of(ulong c) { return (int)(0xFFFFFFFFu - (uint)(c & 0xFFFFFFFFu)); }

// exp(d) for d <= 0, as engine/chat/sampler.cpp's sampler_exp (keep the two
// in step): 0 below -87 (float's smallest normal is e^-87.3), else 2^n * p(r)
// with n = round(d / ln 2), r = d - n ln 2 (Cody and Waite's two-part ln 2)
// and p the Taylor polynomial of degree 11.
inline double sampler_exp(double d) {
  if (!(d >= -87.0)) return 0.0;
  const double n = floor(d_add(d_mul(d, 0x1.71547652b82fep+0), 0.5));
  const double r = d_sub(d_sub(d, d_mul(n, 0x1.62e42fee00000p-1)), d_mul(n, 0x1.a39ef35793c76p-33));
  double p = 0x1.ae64567f544e4p-26;
  p = d_add(d_mul(p, r), 0x1.27e4fb7789f5cp-22);
  p = d_add(d_mul(p, r), 0x1.71de3a556c734p-19);
  p = d_add(d_mul(p, r), 0x1.a01a01a01a01ap-16);
  p = d_add(d_mul(p, r), 0x1.a01a01a01a01ap-13);
  p = d_add(d_mul(p, r), 0x1.6c16c16c16c17p-10);
  p = d_add(d_mul(p, r), 0x1.1111111111111p-7);
  p = d_add(d_mul(p, r), 0x1.5555555555555p-5);
  p = d_add(d_mul(p, r), 0x1.5555555555555p-3);
  p = d_add(d_mul(p, r), 0x1.0000000000000p-1);
  p = d_add(d_mul(p, r), 1.0);
  p = d_add(d_mul(p, r), 1.0);
  return d_mul(p, as_double((ulong)((long)n + 1023) << 52));
}

inline ulong splitmix64(ulong seed, ulong draw) {
  ulong z = seed + (draw + 1) * 0x9E3779B97F4A7C15UL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
  return z ^ (z >> 31);
}

// Entry j of the source a selection runs over: the chunk of logits starting
// at `base`, or (logits null) the groups' candidate lists.
inline ulong entry(const __global float* logits, int base, const __global ulong* part,
                   const __global int* part_n, int j, bool* ok) {
  if (logits) {
    const float v = logits[base + j];
    *ok = !nan_bits(v);
    return composite(v, base + j);
  }
  *ok = (j % K_MAX) < part_n[j / K_MAX];
  return part[j];
}

// Writes the k largest composites of the source's n entries (all of them
// when fewer are valid) to out, unordered; returns how many. Every
// work-item of the group must call it.
#if SAMPLE_WG == 1
// One work-item (CPU devices): one pass keeping the k largest so far as a
// min-heap in out, most entries rejected by one comparison with its root.
// (The radix passes below took ~0.3 ms a token at 49,152 ids on the 2-core
// VM, ~7% of a SmolLM2-135M token.)
int select_top(const __global float* logits, int base, const __global ulong* part,
               const __global int* part_n, int n, int k, __local uint* hist, __local ulong* out,
               __local ulong* s_prefix, __local int* s_state) {
  int m = 0;
  for (int j = 0; j < n; ++j) {
    bool ok;
    const ulong c = entry(logits, base, part, part_n, j, &ok);
    if (!ok) continue;
    int i;
    if (m < k) {  // sift up from the new leaf
      i = m++;
      while (i > 0 && out[(i - 1) / 2] > c) {
        out[i] = out[(i - 1) / 2];
        i = (i - 1) / 2;
      }
    } else if (c > out[0]) {  // replace the root, sift down
      i = 0;
      for (;;) {
        const int l = 2 * i + 1;
        if (l >= m) break;
        const int child = l + 1 < m && out[l + 1] < out[l] ? l + 1 : l;
        if (out[child] >= c) break;
        out[i] = out[child];
        i = child;
      }
    } else {
      continue;
    }
    out[i] = c;
  }
  return m;
}
#else
int select_top(const __global float* logits, int base, const __global ulong* part,
               const __global int* part_n, int n, int k, __local uint* hist, __local ulong* out,
               __local ulong* s_prefix, __local int* s_state) {
  const int lid = get_local_id(0);
  // s_state: [0] still needed, [1] done (1: bin found, 2: take every valid
  // entry), [2] entries gathered
  if (lid == 0) {
    *s_prefix = 0;
    s_state[0] = k;
    s_state[1] = 0;
    s_state[2] = 0;
  }
  int shift = 64;
  for (;;) {
    shift -= 8;
    for (int b = lid; b < 256; b += SAMPLE_WG) hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong prefix = *s_prefix;
    for (int j = lid; j < n; j += SAMPLE_WG) {
      bool ok;
      const ulong c = entry(logits, base, part, part_n, j, &ok);
      if (ok && (shift == 56 || (c >> (shift + 8)) == prefix)) {
        LOCAL_INC(&hist[(uint)(c >> shift) & 255u]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
      int need = s_state[0];
      int total = 0;
      if (shift == 56) {
        for (int b = 0; b < 256; ++b) total += hist[b];
      }
      if (shift == 56 && total <= need) {
        s_state[1] = 2;
      } else {
        int above = 0, b = 255;
        for (; b > 0 && above + (int)hist[b] < need; --b) above += hist[b];
        need -= above;
        *s_prefix = (prefix << 8) | (ulong)b;
        s_state[0] = need;
        s_state[1] = (int)hist[b] == need ? 1 : 0;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (s_state[1] != 0 || shift == 0) break;  // shift 0: one entry per bin (unique)
  }
  const bool all = s_state[1] == 2;
  const ulong prefix = *s_prefix;
  for (int j = lid; j < n; j += SAMPLE_WG) {
    bool ok;
    const ulong c = entry(logits, base, part, part_n, j, &ok);
    if (ok && (all || (c >> shift) >= prefix)) out[LOCAL_INC(&s_state[2])] = c;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int got = s_state[2];
  barrier(CLK_LOCAL_MEM_FENCE);  // s_state is reused by the caller's next call
  return got;
}
#endif

// Penalises, in logits, the ids of [begin, end) found among history[pos + 1
// - n_recent .. pos]: each distinct id once, as the CPU sampler does
// (apply_repeat_penalty, then apply_frequency_presence with its count).
void penalize(__global float* logits, int begin, int end, int mod, int residue, const __global int* history, int pos,
              int n_recent, float repeat_penalty, float frequency_penalty,
              float presence_penalty) {
  const bool repeat = repeat_penalty != 1.0f && repeat_penalty > 0.0f;
  const bool counted = frequency_penalty != 0.0f || presence_penalty != 0.0f;
  if (n_recent <= 0 || (!repeat && !counted)) return;
  const __global int* recent = history + (pos + 1 - n_recent);
  for (int j = get_local_id(0); j < n_recent; j += SAMPLE_WG) {
    const int id = recent[j];
    if (id < begin || id >= end || id % mod != residue) continue;
    bool seen = false;
    for (int m = 0; m < j && !seen; ++m) seen = recent[m] == id;
    if (seen) continue;  // its first occurrence does it
    int count = 1;
    for (int m = j + 1; m < n_recent; ++m) count += recent[m] == id;
    float l = logits[id];
    if (repeat) {
      l = l > 0.0f ? (float)d_div((double)l, (double)repeat_penalty)
                   : (float)d_mul((double)l, (double)repeat_penalty);
    }
    if (counted) {
      float t = (float)d_mul((double)count, (double)frequency_penalty);
      t = (float)d_add((double)t, (double)presence_penalty);
      l = (float)d_sub((double)l, (double)t);
    }
    logits[id] = l;
  }
}

// (rank_sort and draw_sorted, functions with barriers called from another,
// are always inlined: PoCL 3.1's work-group functions crashed otherwise.)

// The n candidates of `in` (unique composites) ranked: the k best to
// sorted[0 .. min(n, k)), highest first.
inline __attribute__((always_inline)) void rank_sort(const __local ulong* in, int n, int k, __local ulong* sorted) {
  for (int i = get_local_id(0); i < n; i += SAMPLE_WG) {
    const ulong c = in[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += in[j] > c;
    if (rank < k) sorted[rank] = c;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// From the n best candidates, sorted (highest first), to the id: softmax,
// top-p, min-p, the draw (or, greedy, the first); to ids[0] and
// history[pos + 1]. p: n floats of local scratch.
inline __attribute__((always_inline)) void draw_sorted(const __local ulong* sorted, int n, float temperature, float top_p, float min_p,
                 ulong seed, ulong draw, int pos, __global int* ids, __global int* history,
                 __local float* p, __local double* s_sum) {
  const int lid = get_local_id(0);
  const bool greedy = temperature <= 0.0f;
  if (!greedy && n > 0) {
    // softmax_candidates: the first is the largest; equal to it (+-inf
    // included) counts as exp(0).
    const double max_logit = (double)logit_of((uint)(sorted[0] >> 32));
    for (int i = lid; i < n; i += SAMPLE_WG) {
      const double l = (double)logit_of((uint)(sorted[i] >> 32));
      const double d = l == max_logit ? 0.0 : d_div(d_sub(l, max_logit), (double)temperature);
      p[i] = (float)sampler_exp(d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (!greedy && n > 0) {
    if (lid == 0) {  // in the CPU's order
      double sum = 0;
      for (int i = 0; i < n; ++i) sum = d_add(sum, (double)p[i]);
      *s_sum = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const double sum = *s_sum;
    for (int i = lid; i < n; i += SAMPLE_WG) p[i] = (float)d_div((double)p[i], sum);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  // Work-item 0 draws.
  if (lid == 0 && ids[0] >= 0) {  // ids[0] < 0: the decode step failed, keep its mark
    int pick = 0;
    if (n > 0 && greedy) pick = id_of(sorted[0]);
    if (n > 0 && !greedy) {
      int kept = n;
      if (top_p < 1.0f) {  // top_p_filter
        double mass = 0;
        for (int i = 0; i < n; ++i) {
          mass = d_add(mass, (double)p[i]);
          if (mass >= (double)top_p) {
            kept = i + 1;
            break;
          }
        }
      }
      if (min_p > 0.0f) {  // min_p_filter
        const double bar = d_mul((double)min_p, (double)p[0]);
        int keep = 1;
        while (keep < kept && (double)p[keep] >= bar) ++keep;
        kept = keep;
      }
      double mass = 0;
      for (int i = 0; i < kept; ++i) mass = d_add(mass, (double)p[i]);
      const double r = d_mul(d_mul((double)(splitmix64(seed, draw) >> 11), 0x1.0p-53), mass);
      double acc = 0;
      pick = id_of(sorted[kept - 1]);
      for (int i = 0; i < kept; ++i) {
        acc = d_add(acc, (double)p[i]);
        if (r < acc) {
          pick = id_of(sorted[i]);
          break;
        }
      }
    }
    ids[0] = pick;
    history[pos + 1] = pick;
  }
}

#ifndef SAMPLE_FUNCTIONS_ONLY
// The groups' candidates to the id: top_k of all of them, sorted, then
// draw_sorted (sample_chain's last group).
void final_stage(const __global ulong* part, const __global int* part_n, int n_groups, int top_k,
                 float temperature, float top_p, float min_p, ulong seed, ulong draw, int pos,
                 __global int* ids, __global int* history, __local uint* hist, __local ulong* out,
                 __local ulong* sorted, __local float* p, __local double* s_sum,
                 __local ulong* s_prefix, __local int* s_state) {
  const int n = select_top(0, 0, part, part_n, n_groups * K_MAX, top_k, hist, out, s_prefix,
                           s_state);
  rank_sort(out, n, n, sorted);
  draw_sorted(sorted, n, temperature, top_p, min_p, seed, draw, pos, ids, history, p, s_sum);
}

// One launch: every group penalises and selects from its chunk of the
// vocabulary (part[g * K_MAX ..], part_n[g]); the last group to finish runs
// final_stage: done[0] counts the groups that finished over all launches
// (wrapping), done_base is its value when this launch began (the host counts
// n_groups a launch, as the persistent kernel's barrier counts arrivals). No group waits for another, so any number of groups may run
// at a time.
__kernel __attribute__((reqd_work_group_size(SAMPLE_WG, 1, 1))) void sample_chain(
    __global float* logits, int n_vocab, int chunk, __global int* history, int pos, int n_recent,
    float repeat_penalty, float frequency_penalty, float presence_penalty, int top_k,
    float temperature, float top_p, float min_p, ulong seed, ulong draw, __global ulong* part,
    __global int* part_n, __global uint* done, uint done_base, __global int* ids) {
  __local uint hist[256];
  __local ulong out[K_MAX];
  __local ulong sorted[K_MAX];
  __local float p[K_MAX];
  __local double s_sum;
  __local ulong s_prefix;
  __local int s_state[4];
  __local int s_last;
  const int g = get_group_id(0);
  const int lid = get_local_id(0);
  const int n_groups = get_num_groups(0);
  const int begin = min(n_vocab, g * chunk);
  const int end = min(n_vocab, begin + chunk);
  penalize(logits, begin, end, 1, 0, history, pos, n_recent, repeat_penalty, frequency_penalty,
           presence_penalty);
  barrier(CLK_GLOBAL_MEM_FENCE);  // the group reads back what it penalised
  const int n = select_top(logits, begin, 0, 0, end - begin, top_k, hist, out, &s_prefix, s_state);
  for (int i = lid; i < n; i += SAMPLE_WG) part[g * K_MAX + i] = out[i];
  if (lid == 0) part_n[g] = n;
  mem_fence(CLK_GLOBAL_MEM_FENCE);  // the candidates are out before the count below
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (lid == 0) s_last = atomic_inc(done) == done_base + (uint)(n_groups - 1);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (s_last) {  // the same in the whole group: its barriers are all reached
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    final_stage(part, part_n, n_groups, top_k, temperature, top_p, min_p, seed, draw, pos, ids,
                history, hist, out, sorted, p, &s_sum, &s_prefix, s_state);
  }
}
#endif

// decode_persistent.cl's code after this file keeps its build's contraction.
#pragma OPENCL FP_CONTRACT DEFAULT
