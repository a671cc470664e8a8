// Two-stage argmax for CPU devices (PoCL): same kernels, arguments, launch
// geometry and result as kernels/argmax.cl (NaN never wins, +inf wins, ties
// go to the lowest index, all-NaN gives 0; index -1 marks an empty chunk).
//
// Algorithm: PoCL runs a work-group's items one after another on one core,
// so the tree reduction over local memory of argmax.cl only adds barriers.
// Here work-item 0 of each group scans its contiguous chunk in index order,
// keeping the first strictly larger value (which gives the lowest index on
// ties), and argmax_final scans the partial results in group order. The
// program is built without -cl-fast-relaxed-math. argmax_merge is also the
// reduction of matvec_cpu.cl's matvec_argmax (the lm_head with the argmax
// folded in), which is built with this file.

#ifndef ARGMAX_WG
#define ARGMAX_WG 64
#endif

// Folds candidate (v, i) into the best so far (*bv, *bi) of a scan in index
// order: NaN and i < 0 (an empty chunk) never win, the first strictly larger
// value does (ties keep the lowest index); *bi < 0 means none yet. NaN is
// told from the bits, which -cl-fast-relaxed-math leaves alone (matvec_argmax
// is built with it: without, PoCL's lm_head took 3x longer).
inline void argmax_merge(float v, int i, float* bv, int* bi) {
  const bool nan = (as_uint(v) & 0x7fffffffu) > 0x7f800000u;
  if (i >= 0 && !nan && (*bi < 0 || v > *bv)) {
    *bv = v;
    *bi = i;
  }
}

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_partial(
    const __global float* x, int n, int chunk, __global float* part_val, __global int* part_idx) {
  if (get_local_id(0) != 0) return;
  const int begin = get_group_id(0) * chunk;
  const int end = min(n, begin + chunk);
  float bv = 0.0f;
  int bi = -1;
  for (int i = begin; i < end; ++i) argmax_merge(x[i], i, &bv, &bi);
  part_val[get_group_id(0)] = bv;
  part_idx[get_group_id(0)] = bi;
}

// Chunks are in index order and hold no NaN: the first strictly larger
// candidate wins, as in one scan over all values.
__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_final(
    const __global float* part_val, const __global int* part_idx, int n_parts, __global int* out) {
  if (get_local_id(0) != 0) return;
  float bv = 0.0f;
  int bi = -1;
  for (int p = 0; p < n_parts; ++p) argmax_merge(part_val[p], part_idx[p], &bv, &bi);
  out[0] = bi < 0 ? 0 : bi;
}
