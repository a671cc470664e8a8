// What the persistent decode kernels (decode_persistent.cl on NVIDIA,
// decode_persistent_cpu.cl on CPU devices) share, built before either: the
// weight arena's layout (engine/cl_persistent.cpp copies every weight buffer
// into one arena and passes, per layer il, the byte offsets
// layer_off[il * LO_N + LO_*]) and the argmax rule. No kernels here.

#define LO_QKV_Q 0
#define LO_QKV_S 1
#define LO_WO_Q 2
#define LO_WO_S 3
#define LO_GATE_Q 4
#define LO_GATE_S 5
#define LO_UP_Q 6
#define LO_UP_S 7
#define LO_DOWN_Q 8
#define LO_DOWN_S 9
#define LO_ATTN_NORM 10
#define LO_FFN_NORM 11
#define LO_N 12

#define N_EMBD_KV (N_HEAD_KV * HEAD_DIM)
#define N_QKV (N_EMBD + 2 * N_EMBD_KV)

inline bool is_nan_bits(float v) { return (as_uint(v) & 0x7fffffffu) > 0x7f800000u; }
// Does candidate (v, i) beat (bv, bi)? NaN never wins; ties go to the lower
// id (whatever order the candidates come in).
inline bool beats(float v, int i, float bv, int bi) {
  if (is_nan_bits(v) || i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}
