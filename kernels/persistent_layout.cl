// What the persistent decode kernels (decode_persistent.cl on NVIDIA,
// decode_persistent_cpu.cl on CPU devices) share, built before either: the
// weight arena's layout (engine/cl/weights.cpp copies every weight buffer
// into one arena and passes, per layer il, the byte offsets
// layer_off[il * LO_N + LO_*]), the layer weight types, the embedding lookup
// and the argmax rule. No kernels here.

// Q's payloads and scales (with Q, K, V of one type in a layer: the stacked
// [Q; K; V]'s, which LO_K_* and LO_V_* then point into), Wo, gate, up, down,
// the norms, K, V, and the layer's ALT word; then the optional F32 vectors
// of other architectures (0 where the model has none): [bq; bk; bv], the
// q and k head norms, the post-attention and post-FFN norms.
#define LO_Q_Q 0
#define LO_Q_S 1
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
#define LO_K_Q 12
#define LO_K_S 13
#define LO_V_Q 14
#define LO_V_S 15
#define LO_ALT 16
#define LO_QKV_BIAS 17
#define LO_Q_NORM 18
#define LO_K_NORM 19
#define LO_POST_ATTN 20
#define LO_POST_FFN 21
#define LO_N 22

// Layer weight types are compile-time, per role: WT_Q, WT_K, WT_V, WT_WO,
// WT_FFN (gate and up), WT_DOWN (GGML type ids), and each role may have a
// second type, WT_<role>_ALT, that the layers whose LO_ALT word has the
// role's ALT_* bit use (llama-quantize's mixes, e.g. Q4_K_M: V and down in
// Q8_0 / Q6_K in some layers, Q5_0 / Q4_K (Q4_1 on the device) in the
// others). The host passes ALT = the role's type when every layer shares
// it; USES_ALT is then a constant false and the ALT branches compile away.
// WT_QKV sets Q, K and V at once (tests/nvptx_check.sh).
#ifdef WT_QKV
#define WT_Q WT_QKV
#define WT_K WT_QKV
#define WT_V WT_QKV
#endif
#ifndef WT_Q_ALT
#define WT_Q_ALT WT_Q
#endif
#ifndef WT_K_ALT
#define WT_K_ALT WT_K
#endif
#ifndef WT_V_ALT
#define WT_V_ALT WT_V
#endif
#ifndef WT_WO_ALT
#define WT_WO_ALT WT_WO
#endif
#ifndef WT_FFN_ALT
#define WT_FFN_ALT WT_FFN
#endif
#ifndef WT_DOWN_ALT
#define WT_DOWN_ALT WT_DOWN
#endif
#define ALT_Q 1u
#define ALT_K 2u
#define ALT_V 4u
#define ALT_WO 8u
#define ALT_FFN 16u
#define ALT_DOWN 32u
// Not a role: the layer attends over the last WINDOW positions only (its
// RoPE table is rope_cs_swa).
#define LAYER_SWA 256u
// Does the layer whose offsets are at lo use role's ALT type? (The word is
// not read when the role has one type.)
#define USES_ALT(lo, role) (WT_##role##_ALT != WT_##role && ((uint)(lo)[LO_ALT] & ALT_##role) != 0)
// Q, K and V of one type in every layer: the host then stacks them in every
// layer, and P1 reads [Q; K; V] as one matrix (LO_Q_*).
#define QKV_STACKED \
  (WT_Q == WT_K && WT_K == WT_V && WT_Q_ALT == WT_Q && WT_K_ALT == WT_K && WT_V_ALT == WT_V)

// The graph options of models other than llama (decode_persistent.cl's
// head lists them), off unless the host defines them.
#ifndef NEOX
#define NEOX 0
#endif
#ifndef QKV_BIAS
#define QKV_BIAS 0
#endif
#ifndef QK_NORM
#define QK_NORM 0
#endif
#ifndef POST_NORMS
#define POST_NORMS 0
#endif
#ifndef FFN_GELU
#define FFN_GELU 0
#endif
#ifndef WINDOW
#define WINDOW 0
#endif
#ifndef KV_RING
#define KV_RING N_CTX
#endif
#ifndef Q_MUL
#define Q_MUL 1.0f
#endif
#define MAX2(a, b) ((a) > (b) ? (a) : (b))

#define N_EMBD_KV (N_HEAD_KV * HEAD_DIM)
// Query rows: N_HEAD * HEAD_DIM, which differs from N_EMBD where
// attention.key_length says so (Gemma 3: 4 x 256 against 640).
#ifndef N_EMBD_Q
#define N_EMBD_Q N_EMBD
#endif

// Attention split partials: per (head, split) ATT_PART floats of att_part
// (the unnormalised sum of V, then max and sum), at most ATT_SPLIT_MAX
// splits per head (the host passes k_att_split_max).
#ifndef ATT_SPLIT_MAX
#define ATT_SPLIT_MAX 16
#endif
#define ATT_PART (HEAD_DIM + 2)
#define N_QKV (N_EMBD_Q + 2 * N_EMBD_KV)

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
