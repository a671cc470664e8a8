// Two-stage argmax over n floats, identical to a CPU scan: NaN never wins,
// +inf wins, ties resolve to the lowest index, and an all-NaN input gives 0.
//   Stage 1 (argmax_partial): work-group g scans its contiguous chunk and
//   writes its best (value, index) pair; index -1 means "no candidate".
//   Stage 2 (argmax_final): one work-group reduces the pairs and writes the
//   winning index to out[0] (the next step's token buffer).

#ifndef ARGMAX_WG
#define ARGMAX_WG 256
#endif

// Is (v, i) better than (bv, bi)? Candidates never hold NaN.
inline bool better(float v, int i, float bv, int bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

inline void reduce_pairs(__local float* val, __local int* idx) {
  const int lid = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ARGMAX_WG / 2; s > 0; s >>= 1) {
    if (lid < s && better(val[lid + s], idx[lid + s], val[lid], idx[lid])) {
      val[lid] = val[lid + s];
      idx[lid] = idx[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_partial(
    const __global float* x, int n, int chunk, __global float* part_val, __global int* part_idx) {
  __local float val[ARGMAX_WG];
  __local int idx[ARGMAX_WG];
  const int lid = get_local_id(0);
  const int begin = get_group_id(0) * chunk;
  const int end = min(n, begin + chunk);
  float bv = 0.0f;
  int bi = -1;
  for (int i = begin + lid; i < end; i += ARGMAX_WG) {
    const float v = x[i];
    if (!isnan(v) && (bi < 0 || v > bv)) {  // strided scan: earlier i wins ties
      bv = v;
      bi = i;
    }
  }
  val[lid] = bv;
  idx[lid] = bi;
  reduce_pairs(val, idx);
  if (lid == 0) {
    part_val[get_group_id(0)] = val[0];
    part_idx[get_group_id(0)] = idx[0];
  }
}

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_final(
    const __global float* part_val, const __global int* part_idx, int n_parts,
    __global int* out) {
  __local float val[ARGMAX_WG];
  __local int idx[ARGMAX_WG];
  const int lid = get_local_id(0);
  float bv = 0.0f;
  int bi = -1;
  for (int p = lid; p < n_parts; p += ARGMAX_WG) {
    if (better(part_val[p], part_idx[p], bv, bi)) {
      bv = part_val[p];
      bi = part_idx[p];
    }
  }
  val[lid] = bv;
  idx[lid] = bi;
  reduce_pairs(val, idx);
  if (lid == 0) out[0] = idx[0] < 0 ? 0 : idx[0];
}
