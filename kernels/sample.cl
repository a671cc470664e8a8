// The sampling chain on the device, from the logits of one position to the
// chosen id, computing what the CPU sampler (engine/chat/sampler.cpp) computes
// bit for bit, so that the same seed draws the same ids on both:
//   repeat / frequency / presence penalties over the last n_recent ids ->
//   top-k -> softmax at the temperature -> top-p -> min-p -> draw.
// One launch (sample_chain) in two stages:
//   every work-group g applies the penalties to the ids of its chunk of the
//   vocabulary (in place, in `logits`), then selects the chunk's top_k
//   candidates and writes them, highest first, to part[g * K_MAX ..] with
//   their number in part_n[g];
//   the last group to finish (an atomic count) merges the groups' lists into
//   the top_k of all, highest first, runs softmax, top-p, min-p and the draw,
//   and writes the id to ids[0] (the next decode step's input) and to
//   history[pos + 1] (the recent ids the next step's penalties read).
//
// Order: a candidate is the 64-bit composite (key(logit) << 32) | (~id),
// where key() maps the float's bits to an unsigned integer in the same order
// (-0 as +0). Larger composite = better; equal logits: the lower id first,
// as the CPU's stable sort orders them. NaN is never a candidate. The
// composites are unique, so "the k largest" is one set.
//
// A group's selection (group_top): each work-item takes the largest
// composite of its ids (it reads float4s); the k-th largest of these maxima
// (of sets of work-items' maxima where k is small: kth_of_maxima), T, has at
// least k composites at or above it (one in each of k sets), and usually few
// more, so the work-items gather those into local memory (an atomic count on
// one word, a few dozen increments) and each one's rank among them (a count
// of the larger ones) places the k largest in order. No histogram: logits
// share a few exponents, and atomics on those few bins serialised the
// earlier radix select. Where more than RANK_MAX reach T (large k,
// adversarial layouts, and work-groups of 1, where T is 1 unless k is 1) the radix
// select (select_top: 8 bits a pass from the top, a 256-bin local histogram,
// until the k-th largest's bin holds exactly the ones still needed) finds
// them instead. The merge (final_stage) loads the first top_k places of every
// list into local memory and selects from them the same way; more than
// MERGE_MAX / 2 places (top_k above 64 with 16 groups) or RANK_MAX at the
// threshold take the radix select over the lists. The probabilities' running sum is computed once,
// in the CPU's order, and top-p and the draw search it.
//
// Exactness: float steps of the CPU (the penalties) are done in double and
// rounded to float, which gives the correctly rounded float result (a double
// has more than 2 x 24 + 2 bits), even where a device's float division is
// not correctly rounded; double steps (softmax sums, top-p mass, the draw)
// are done in double, sequentially in the CPU's order; exp() is
// sampler_exp(), the same polynomial the CPU uses (no library exp, whose
// last bit differs between implementations). Needs cl_khr_fp64 and a build
// without fast-math flags; FP_CONTRACT is off so no a * b + c becomes an fma.
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
// Candidates held in local memory: the merge's lists (MERGE_MAX / 2) and
// those at a threshold (at most RANK_MAX: ranking m of them counts m * m
// pairs; more take the radix select); at least K_MAX (select_top writes up
// to K_MAX there).
#define MERGE_MAX 2048
#define RANK_MAX 512
#define RECENT_MAX 1024  // the penalties' window, at most (device_samplable())

#if SAMPLE_WG == 1
#define LOCAL_INC(p) ((*(p))++)
#else
#define LOCAL_INC(p) atomic_inc(p)
#endif

// The float's order as an unsigned integer (NaN excluded by the callers).
inline uint key_of(float v) {
  if (v == 0.0f) v = 0.0f;  // -0 sorts as +0: they compare equal on the CPU
  const uint bits = as_uint(v);
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
  const double n = floor(d * 0x1.71547652b82fep+0 + 0.5);
  const double r = (d - n * 0x1.62e42fee00000p-1) - n * 0x1.a39ef35793c76p-33;
  double p = 0x1.ae64567f544e4p-26;
  p = p * r + 0x1.27e4fb7789f5cp-22;
  p = p * r + 0x1.71de3a556c734p-19;
  p = p * r + 0x1.a01a01a01a01ap-16;
  p = p * r + 0x1.a01a01a01a01ap-13;
  p = p * r + 0x1.6c16c16c16c17p-10;
  p = p * r + 0x1.1111111111111p-7;
  p = p * r + 0x1.5555555555555p-5;
  p = p * r + 0x1.5555555555555p-3;
  p = p * r + 0x1.0000000000000p-1;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * as_double((ulong)((long)n + 1023) << 52);
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
    *ok = !isnan(v);
    return composite(v, base + j);
  }
  *ok = (j % K_MAX) < part_n[j / K_MAX];
  return part[j];
}

// Writes the k largest composites of the source's n entries (all of them
// when fewer are valid) to out, unordered; returns how many. Every
// work-item of the group must call it.
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

// Penalises, in logits, the ids of [begin, end) found among history[pos + 1
// - n_recent .. pos]: each distinct id once, as the CPU sampler does
// (apply_repeat_penalty, then apply_frequency_presence with its count). The
// window (at most RECENT_MAX ids) is read into `recent` first.
// Returns whether it ran (the same in the whole group).
bool penalize(__global float* logits, int begin, int end, const __global int* history, int pos,
              int n_recent, float repeat_penalty, float frequency_penalty, float presence_penalty,
              __local int* recent) {
  const bool repeat = repeat_penalty != 1.0f && repeat_penalty > 0.0f;
  const bool counted = frequency_penalty != 0.0f || presence_penalty != 0.0f;
  if (n_recent <= 0 || (!repeat && !counted)) return false;
  n_recent = min(n_recent, RECENT_MAX);
  const __global int* window = history + (pos + 1 - n_recent);
  for (int j = get_local_id(0); j < n_recent; j += SAMPLE_WG) recent[j] = window[j];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int j = get_local_id(0); j < n_recent; j += SAMPLE_WG) {
    const int id = recent[j];
    if (id < begin || id >= end) continue;
    bool seen = false;
    for (int m = 0; m < j && !seen; ++m) seen = recent[m] == id;
    if (seen) continue;  // its first occurrence does it
    int count = 1;
    for (int m = j + 1; m < n_recent; ++m) count += recent[m] == id;
    float l = logits[id];
    if (repeat) {
      l = l > 0.0f ? (float)((double)l / (double)repeat_penalty)
                   : (float)((double)l * (double)repeat_penalty);
    }
    if (counted) {
      float t = (float)((double)count * (double)frequency_penalty);
      t = (float)((double)t + (double)presence_penalty);
      l = (float)((double)l - (double)t);
    }
    logits[id] = l;
  }
  return true;
}

// T for a work-item whose largest composite is `best` (0: none): the k-th
// largest of the maxima of `slots` sets of work-items (slots: the fewest of
// 64, 128, .. SAMPLE_WG that are at least k; fewer to count than one a
// work-item, a looser T), or 1 (every composite) where fewer than k sets
// hold one. At least k composites are at or above it. Every work-item of
// the group must call it.
ulong kth_of_maxima(ulong best, int k, __local ulong* tmax, __local ulong* s_t) {
  const int lid = get_local_id(0);
  int slots = min(SAMPLE_WG, 64);
  while (slots < k && slots < SAMPLE_WG) slots *= 2;
  tmax[lid] = best;
  if (lid == 0) *s_t = 1;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong mine = 0;
  if (lid < slots) {
    mine = tmax[lid];
    for (int t = lid + slots; t < SAMPLE_WG; t += slots) mine = max(mine, tmax[t]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < slots) tmax[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (mine != 0) {
    int rank = 0;
    for (int t = 0; t < slots; ++t) rank += tmax[t] > mine;
    if (rank == k - 1) *s_t = mine;  // one slot: the maxima are unique
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const ulong threshold = *s_t;
  barrier(CLK_LOCAL_MEM_FENCE);  // s_t may be written again by the caller
  return threshold;
}

inline void gather_one(ulong c, ulong threshold, __local ulong* dst, int cap,
                       __local int* s_count) {
  if (c >= threshold) {
    const int at = LOCAL_INC(s_count);
    if (at < cap) dst[at] = c;
  }
}

// Gathers into dst (at most cap) the composites of logits[base .. base + n)
// at or above the group's threshold (kth_of_maxima); returns how many there
// are (more than cap: dst holds only some). base is a multiple of 4.
int gather_logits(const __global float* logits, int base, int n, int k, __local ulong* tmax,
                  __local ulong* dst, int cap, __local ulong* s_t, __local int* s_count) {
  const int lid = get_local_id(0);
  const int n4 = n / 4;
  const __global float4* v4 = (const __global float4*)(logits + base);
  ulong best = 0;  // no composite is 0 (-inf's key is 0x007FFFFF)
  for (int j = lid; j < n4; j += SAMPLE_WG) {
    const float4 v = v4[j];
    const int id = base + 4 * j;
    if (!isnan(v.x)) best = max(best, composite(v.x, id));
    if (!isnan(v.y)) best = max(best, composite(v.y, id + 1));
    if (!isnan(v.z)) best = max(best, composite(v.z, id + 2));
    if (!isnan(v.w)) best = max(best, composite(v.w, id + 3));
  }
  for (int j = 4 * n4 + lid; j < n; j += SAMPLE_WG) {
    const float v = logits[base + j];
    if (!isnan(v)) best = max(best, composite(v, base + j));
  }
  if (lid == 0) *s_count = 0;
  const ulong threshold = kth_of_maxima(best, k, tmax, s_t);
  // Every composite passes: the radix select's.
  if (threshold == 1 && n > cap) return cap + 1;
  if (best >= threshold) {  // else none of this work-item's is
    for (int j = lid; j < n4; j += SAMPLE_WG) {
      const float4 v = v4[j];
      const int id = base + 4 * j;
      if (!isnan(v.x)) gather_one(composite(v.x, id), threshold, dst, cap, s_count);
      if (!isnan(v.y)) gather_one(composite(v.y, id + 1), threshold, dst, cap, s_count);
      if (!isnan(v.z)) gather_one(composite(v.z, id + 2), threshold, dst, cap, s_count);
      if (!isnan(v.w)) gather_one(composite(v.w, id + 3), threshold, dst, cap, s_count);
    }
    for (int j = 4 * n4 + lid; j < n; j += SAMPLE_WG) {
      const float v = logits[base + j];
      if (!isnan(v)) gather_one(composite(v, base + j), threshold, dst, cap, s_count);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int got = *s_count;
  barrier(CLK_LOCAL_MEM_FENCE);
  return got;
}

// The same over m composites in local memory.
int gather_local(const __local ulong* src, int m, int k, __local ulong* tmax, __local ulong* dst,
                 int cap, __local ulong* s_t, __local int* s_count) {
  const int lid = get_local_id(0);
  ulong best = 0;
  for (int j = lid; j < m; j += SAMPLE_WG) best = max(best, src[j]);
  if (lid == 0) *s_count = 0;
  const ulong threshold = kth_of_maxima(best, k, tmax, s_t);
  if (threshold == 1 && m > cap) return cap + 1;  // every one passes: the radix select's
  if (best >= threshold) {
    for (int j = lid; j < m; j += SAMPLE_WG) gather_one(src[j], threshold, dst, cap, s_count);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int got = *s_count;
  barrier(CLK_LOCAL_MEM_FENCE);
  return got;
}

// Places the k largest of the m candidates in cand at sorted[0 .. min(m,
// k)), highest first: each one's rank is the number of larger ones. Every
// work-item of the group must call it; the caller's barrier publishes sorted.
void rank_place(const __local ulong* cand, int m, int k, __local ulong* sorted) {
  for (int i = get_local_id(0); i < m; i += SAMPLE_WG) {
    const ulong c = cand[i];
    int rank = 0;
    for (int j = 0; j < m; ++j) rank += cand[j] > c;
    if (rank < k) sorted[rank] = c;
  }
}

// The chunk's k largest composites to sorted, highest first; returns how
// many. Every work-item of the group must call it.
int group_top(const __global float* logits, int base, int n, int k, __local ulong* tmax,
              __local ulong* buf, __local ulong* sorted, __local uint* hist,
              __local ulong* s_prefix, __local int* s_state) {
  int m = gather_logits(logits, base, n, k, tmax, buf, RANK_MAX, s_prefix, &s_state[3]);
  if (m > RANK_MAX) m = select_top(logits, base, 0, 0, n, k, hist, buf, s_prefix, s_state);
  rank_place(buf, m, k, sorted);
  barrier(CLK_LOCAL_MEM_FENCE);
  return min(m, k);
}

// The sum of p[0 .. n) in order, in double, and each running sum to
// mass[i] where `write`. The loads run 8 ahead of the additions (p and mass
// are both local: the compiler would not move a load of one above a store to
// the other).
double running_sum(const __local float* p, int n, bool write, __local double* mass) {
  double acc = 0;
  for (int i0 = 0; i0 < n; i0 += 8) {
    float q[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) q[u] = i0 + u < n ? p[i0 + u] : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      if (i0 + u < n) {
        acc += q[u];
        if (write) mass[i0 + u] = acc;
      }
    }
  }
  return acc;
}

// The first i < n with mass[i] >= x (strict: > x), mass non-decreasing;
// n - 1 where none is (the CPU's loops keep all then).
int first_reaching(const __local double* mass, int n, double x, bool strict) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (strict ? mass[mid] > x : mass[mid] >= x) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The groups' lists to the id: top_k of all of them, highest first, softmax,
// top-p, min-p, the draw (sample_chain's last group).
void final_stage(const __global ulong* part, const __global int* part_n, int n_groups, int top_k,
                 float temperature, float top_p, float min_p, ulong seed, ulong draw, int pos,
                 __global int* ids, __global int* history, __local uint* hist, __local ulong* buf,
                 __local ulong* tmax, __local ulong* sorted, __local float* p, __local double* mass,
                 __local double* s_sum, __local ulong* s_prefix, __local int* s_state) {
  const int lid = get_local_id(0);
  // The first top_k places of every list to buf, place by place (entry i of
  // list g at i * n_groups + g, 0 where a list is shorter: no composite), so
  // that a set of work-items holds different places of different lists (list
  // by list, with top_k 64 every set held one place of each list: a loose
  // threshold); their candidates at the threshold to the upper half.
  const int upper = MERGE_MAX / 2;
  const int m = n_groups * top_k;
  int n = -1;
  if (m <= upper) {
#pragma unroll 4
    for (int j = lid; j < m; j += SAMPLE_WG) {  // the loads issued together
      const int i = j / n_groups, g = j - i * n_groups;
      const ulong c = part[g * K_MAX + i];
      buf[j] = i < part_n[g] ? c : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int got = gather_local(buf, m, top_k, tmax, buf + upper, RANK_MAX, s_prefix, &s_state[3]);
    if (got <= RANK_MAX) {
      rank_place(buf + upper, got, top_k, sorted);
      n = min(got, top_k);
    }
  }
  if (n < 0) {  // the radix select over the lists
    n = select_top(0, 0, part, part_n, n_groups * K_MAX, top_k, hist, buf, s_prefix, s_state);
    rank_place(buf, n, top_k, sorted);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const bool greedy = temperature <= 0.0f;
  if (!greedy && n > 0) {
    // softmax_candidates: the first is the largest; equal to it (+-inf
    // included) counts as exp(0).
    const double max_logit = (double)logit_of((uint)(sorted[0] >> 32));
    for (int i = lid; i < n; i += SAMPLE_WG) {
      const double l = (double)logit_of((uint)(sorted[i] >> 32));
      const double d = l == max_logit ? 0.0 : (l - max_logit) / (double)temperature;
      p[i] = (float)sampler_exp(d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (!greedy && n > 0) {
    if (lid == 0) *s_sum = running_sum(p, n, false, mass);  // in the CPU's order
    barrier(CLK_LOCAL_MEM_FENCE);
    const double sum = *s_sum;
    for (int i = lid; i < n; i += SAMPLE_WG) p[i] = (float)(p[i] / sum);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid != 0) return;
  if (ids[0] < 0) return;  // the decode step failed: keep its mark
  int pick = 0;
  if (n > 0 && greedy) pick = id_of(sorted[0]);
  if (n > 0 && !greedy) {
    // mass[i]: the probabilities' running sum in the CPU's order, which its
    // top-p filter, kept mass and draw each add up again (the same roundings).
    running_sum(p, n, true, mass);
    int kept = n;
    // top_p_filter
    if (top_p < 1.0f) kept = 1 + first_reaching(mass, n, (double)top_p, false);
    if (min_p > 0.0f) {  // min_p_filter
      const double bar = (double)min_p * (double)p[0];
      int keep = 1;
      while (keep < kept && (double)p[keep] >= bar) ++keep;
      kept = keep;
    }
    const double r = (double)(splitmix64(seed, draw) >> 11) * 0x1.0p-53 * mass[kept - 1];
    pick = id_of(sorted[min(first_reaching(mass, kept, r, true), kept - 1)]);
  }
  ids[0] = pick;
  history[pos + 1] = pick;
}

// One launch: every group penalises and selects from its chunk of the
// vocabulary (part[g * K_MAX ..], part_n[g]); the last group to finish runs
// final_stage. done[0] counts the groups that finished; the last one sets it
// back to 0 (every other group has counted by then, and the next launch
// starts after this one ends: the engine's one in-order queue; a second or
// an out-of-order queue would break this), so a launch the host enqueued and
// that never ran leaves nothing behind; one that stops part-way (a device
// fault) would leave a count, as the host-counted base before it did. No
// group waits for another, so any number of groups may run at a time.
__kernel __attribute__((reqd_work_group_size(SAMPLE_WG, 1, 1))) void sample_chain(
    __global float* logits, int n_vocab, int chunk, __global int* history, int pos, int n_recent,
    float repeat_penalty, float frequency_penalty, float presence_penalty, int top_k,
    float temperature, float top_p, float min_p, ulong seed, ulong draw, __global ulong* part,
    __global int* part_n, __global uint* done, __global int* ids) {
  __local uint hist[256];
  __local ulong buf[MERGE_MAX];
  __local ulong tmax[SAMPLE_WG];
  __local ulong sorted[K_MAX];
  __local float p[K_MAX];
  __local double mass[K_MAX];
  __local int recent[RECENT_MAX];
  __local double s_sum;
  __local ulong s_prefix;
  __local int s_state[4];
  __local int s_last;
  const int g = get_group_id(0);
  const int lid = get_local_id(0);
  const int n_groups = get_num_groups(0);
  const int begin = min(n_vocab, g * chunk);
  const int end = min(n_vocab, begin + chunk);
  if (penalize(logits, begin, end, history, pos, n_recent, repeat_penalty, frequency_penalty,
               presence_penalty, recent)) {
    barrier(CLK_GLOBAL_MEM_FENCE);  // the group reads back what it penalised
  }
  const int n =
      group_top(logits, begin, end - begin, top_k, tmax, buf, sorted, hist, &s_prefix, s_state);
  for (int i = lid; i < n; i += SAMPLE_WG) part[g * K_MAX + i] = sorted[i];
  if (lid == 0) part_n[g] = n;
  mem_fence(CLK_GLOBAL_MEM_FENCE);  // the candidates are out before the count below
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (lid == 0) s_last = atomic_inc(done) == (uint)(n_groups - 1);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (s_last) {  // the same in the whole group: its barriers are all reached
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) done[0] = 0;
    final_stage(part, part_n, n_groups, top_k, temperature, top_p, min_p, seed, draw, pos, ids,
                history, hist, buf, tmax, sorted, p, mass, &s_sum, &s_prefix, s_state);
  }
}
