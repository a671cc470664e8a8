// What the persistent decode kernels (decode_persistent.cl on NVIDIA,
// decode_persistent_cpu.cl on CPU devices) share, built before either: the
// weight arena's layout (engine/cl/persistent_decode.cpp copies every weight buffer
// into one arena and passes, per layer il, the byte offsets
// layer_off[il * LO_N + LO_*]), the embedding lookup and the argmax rule.
// No kernels here.

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

// Attention split partials: per (head, split) ATT_PART floats of att_part
// (the unnormalised sum of V, then max and sum), at most ATT_SPLIT_MAX
// splits per head (the host passes k_att_split_max).
#ifndef ATT_SPLIT_MAX
#define ATT_SPLIT_MAX 16
#endif
#define ATT_PART (HEAD_DIM + 2)
#define N_QKV (N_EMBD + 2 * N_EMBD_KV)

inline bool is_nan_bits(float v) { return (as_uint(v) & 0x7fffffffu) > 0x7f800000u; }
// Does candidate (v, i) beat (bv, bi)? NaN never wins; ties go to the lower
// id (whatever order the candidates come in).
inline bool beats(float v, int i, float bv, int bi) {
  if (is_nan_bits(v) || i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

// Value i of row `row` of the embedding (type WT_EMBD).
inline float embd_value(const __global uchar* wq, const __global uchar* ws, int row, int i) {
#if WT_EMBD == 0 || WT_EMBD == 1 || WT_EMBD == 30
  return plain_value(WT_EMBD, wq, (size_t)row * N_EMBD + i);
#else
  const size_t blk = (size_t)row * (N_EMBD / 32) + i / 32;
  const int j = i % 32;
#if QT_GENERIC(WT_EMBD)
  float v[8];
  vstore8(block_values8(WT_EMBD, wq, ws, blk, j / 8), 0, v);
  return v[j % 8];
#elif WT_EMBD == 8
  const char c = ((const __global char*)wq)[blk * 32 + j];
  return vload_half(blk, (const __global half*)ws) * (float)c;
#else
  const uchar byte = wq[blk * 16 + j % 16];
  const float code = (float)(j < 16 ? (byte & 15) : (byte >> 4));
#if WT_EMBD == 2
  return vload_half(blk, (const __global half*)ws) * (code - 8.0f);
#else
  const float2 dm = vload_half2(blk, (const __global half*)ws);
  return dm.x * code + dm.y;
#endif
#endif
#endif
}
