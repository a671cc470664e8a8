// Two-stage argmax for CPU devices (PoCL): same kernels, arguments, launch
// geometry and result as kernels/argmax.cl (NaN never wins, +inf wins, ties
// go to the lowest index, all-NaN gives 0; index -1 marks an empty chunk).
//
// Algorithm: PoCL runs a work-group's items one after another on one core,
// so the tree reduction over local memory of argmax.cl only adds barriers.
// Here work-item 0 of each group scans its contiguous chunk in index order,
// keeping the first strictly larger value (which gives the lowest index on
// ties), and argmax_final scans the partial results in group order. The
// program is built without -cl-fast-relaxed-math: isnan must stay.

#ifndef ARGMAX_WG
#define ARGMAX_WG 64
#endif

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_partial(
    const __global float* x, int n, int chunk, __global float* part_val, __global int* part_idx) {
  if (get_local_id(0) != 0) return;
  const int begin = get_group_id(0) * chunk;
  const int end = min(n, begin + chunk);
  float bv = 0.0f;
  int bi = -1;
  for (int i = begin; i < end; ++i) {
    const float v = x[i];
    if (!isnan(v) && (bi < 0 || v > bv)) {
      bv = v;
      bi = i;
    }
  }
  part_val[get_group_id(0)] = bv;
  part_idx[get_group_id(0)] = bi;
}

// Chunks are in index order and hold no NaN: the first strictly larger
// candidate wins, as in one scan over all values.
__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1))) void argmax_final(
    const __global float* part_val, const __global int* part_idx, int n_parts,
    __global int* out) {
  if (get_local_id(0) != 0) return;
  float bv = 0.0f;
  int bi = -1;
  for (int p = 0; p < n_parts; ++p) {
    if (part_idx[p] >= 0 && (bi < 0 || part_val[p] > bv)) {
      bv = part_val[p];
      bi = part_idx[p];
    }
  }
  out[0] = bi < 0 ? 0 : bi;
}
