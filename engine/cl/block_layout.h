// How each GGML type's blocks sit in device memory (kernels/quant_blocks.cl
// reads them). Every quantized row is cut into blocks of 32 values, each with
// a payload of device_q_bytes(type) in one array (q) and a record of
// device_s_bytes(type) in another (s), both rows x blocks, row-major, so
// stacking matrices row-wise concatenates both arrays. Codes stay in their
// GGUF widths; K-quant super-blocks are split into their 32-value groups,
// each with its own scale record (float products that GGML computes at
// dequantization are exact in float32):
//   type    q (per 32)                          s (per 32)                     value
//   Q4_0    16 nibble bytes                     half d                          d (c - 8)
//   Q4_1    16 nibble bytes                     half d, m                       d c + m
//   Q5_0    16 nibble bytes                     half d, 0; uint qh              d (c - 16)
//   Q5_1    16 nibble bytes                     half d, m; uint qh              d c + m
//   Q8_0    32 int8                             half d                          d c
//   IQ4_NL  16 nibble bytes                     half d                          d kv[c]
//   IQ4_XS  16 nibble bytes                     float d (ls - 32)               s kv[c]
//   Q4_K    16 nibble bytes                     float d sc, dmin m              s c - m
//   Q5_K    16 nibble bytes                     float d sc, dmin m; uint qh, 0  s c - m
//   Q6_K    16 nibble bytes (low 4 bits)        float s0, s1; uint h0, h1       s (c - 32)
//   Q3_K    8 bytes of 2-bit codes              half d; char sc0, sc1; uint qh  d sc (c - 4)
//   Q2_K    8 bytes of 2-bit codes              half d, dmin; uchar sm0, sm1    d (sm & 15) c
//                                                                                 - dmin (sm >> 4)
// Nibble byte j holds value j (low half) and j + 16 (high half); bit j of qh
// is bit 4 of value j (Q3_K: bit 2); Q6_K's h0 / h1 hold the top two bits of
// values 0-15 / 16-31 at bits 2j, 2j + 1; 2-bit byte k holds values k, k + 8,
// k + 16, k + 24 at bits 0-1, 2-3, 4-5, 6-7. Values 0-15 and 16-31 of the
// 16-value K-quant groups take scale 0 and 1 (Q6_K s0, s1; Q3_K sc0, sc1;
// Q2_K sm0, sm1). F32, F16 and BF16 rows stay whole in q (s: 4 zero bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace clchat {

int device_q_bytes(GgmlType type);  // payload bytes per 32 values (F32/F16/BF16: per value)
int device_s_bytes(GgmlType type);  // record bytes per 32 values (0 for F32/F16/BF16)

// `rows` GGUF rows of n_in values (ggml_row_bytes each) -> q and s above.
void repack_rows(GgmlType type, const uint8_t* data, int n_in, int rows, std::vector<uint8_t>& q,
                 std::vector<uint8_t>& s);

// The type a GGUF type's matrices take on a device: their own, except
// - Q4_K and Q5_K, stored as Q4_1 and Q5_1 (k_quant_as_legacy: the same codes,
//   each 32-value group's float scale d sc and minimum dmin m rounded once to
//   fp16). Records of 4 and 8 bytes instead of 8 and 16: 20 and 24 bytes per
//   32 values on the device instead of 24 and 32 (18 and 22 in the file), read
//   by the Q4_1 / Q5_1 loops. The rounding (relative 2^-11 at most; a scale
//   that rounds to a subnormal is exact, as d is itself an fp16) is that of
//   the fp16 weights the tensor-core prefill already multiplies. A tensor
//   with a scale beyond the fp16 range keeps its own type and the float
//   records above (repack_for_device, engine/cl/weights.h). H200, 1B-shaped
//   Q4_K_M mix (2026-11-29): tg128 1,618 / 1,633 against 1,512 / 1,508,
//   pp512 60.6k / 60.7k against 58.5k / 58.7k; SmolLM2's Q4_K_M perplexity
//   18.9368, Gemma 3's 13.8278 (float64 references 18.9360, 13.8263).
// - Q5_0 on CPU devices, stored as Q8_0 (q5_0_as_q8_0: the same values). The
//   CPU kernels read 8 int8 codes with one widening load where Q5_0 needs the
//   nibbles split and the fifth bits or'ed in: on the 2-core EPYC (PoCL,
//   2026-11-27) SmolLM2-135M's Q4_K_M file, Q5_0 in 166 of its matrices,
//   decoded at a median 0.89x of the Q4_1 file's speed with them as Q8_0,
//   0.81x as Q5_0 (ten alternating rounds), for 34 bytes per 32 values on the
//   device instead of 24 (22 in the file).
GgmlType device_type(GgmlType type, bool cpu_device);

// n_blocks GGUF Q5_0 blocks -> as many GGUF Q8_0 blocks of the same values:
// the same d, the codes q - 16 (-16..15) as int8.
std::vector<uint8_t> q5_0_as_q8_0(const uint8_t* data, size_t n_blocks);

// n_super GGUF Q4_K (Q5_K) super-blocks -> 8 n_super GGUF Q4_1 (Q5_1) blocks
// of the same codes, d = fp16(d sc) and m = fp16(-dmin m) per 32-value group.
// Throws std::range_error where a scale exceeds the fp16 range (the caller
// then keeps the exact layout).
std::vector<uint8_t> k_quant_as_legacy(GgmlType type, const uint8_t* data, size_t n_super);

}  // namespace clchat
