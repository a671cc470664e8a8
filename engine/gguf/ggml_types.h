// GGML tensor types clchat supports and their block layouts (GGUF, little
// endian). Legacy types store rows in blocks of 32 values, K-quants and
// IQ4_XS in super-blocks of 256 (GGML's QK_K); fp16 fields are IEEE halves.
//   Q4_0:  d; qs[16]                       x = (q - 8) d
//   Q4_1:  d, m; qs[16]                    x = q d + m
//   Q5_0:  d; qh[4]; qs[16]                x = (q - 16) d, q = nibble | bit << 4
//   Q5_1:  d, m; qh[4]; qs[16]             x = q d + m
//   Q8_0:  d; int8 qs[32]                  x = q d
//   IQ4_NL: d; qs[16]                      x = d kvalues[q]
// Nibble byte j holds value j in its low half and value j + 16 in its high
// half; bit j of qh (a little-endian uint32) is the fifth bit of value j.
//   Q2_K:  scales[16]; qs[64]; d, dmin     16 groups of 16, 4-bit scale and min
//   Q3_K:  hmask[32]; qs[64]; scales[12]; d   16 groups of 16, 6-bit scales
//   Q4_K:  d, dmin; scales[12]; qs[128]    8 groups of 32, 6-bit scale and min
//   Q5_K:  d, dmin; scales[12]; qh[32]; qs[128]
//   Q6_K:  ql[128]; qh[64]; int8 scales[16]; d
//   IQ4_XS: d; scales_h; scales_l[4]; qs[128]  8 groups of 32, 6-bit scales
// engine/gguf/dequantize.cpp spells out each formula.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace clchat {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
};

// Every supported type, in GGML's id order.
std::span<const GgmlType> ggml_supported_types();
// Their names, comma separated: "F32, F16, Q4_0, ...".
const std::string& ggml_supported_type_names();

constexpr int k_quant_block = 32;   // values per block of the legacy types
constexpr int k_super_block = 256;  // values per super-block (K-quants, IQ4_XS)

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per 16 values
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 6-bit scales, offset 32
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_XS) == 136);

// IQ4_NL's and IQ4_XS's 16 code values (GGML's kvalues_iq4nl).
inline constexpr int8_t k_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Known type from its GGUF id, or nullopt for any other id.
std::optional<GgmlType> ggml_type_from_id(uint32_t id);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // "q4_k", "F16", ...
const char* ggml_type_name(GgmlType type);                           // "Q4_K", "F16", ...
// GGML's name for an id, including types clchat does not support ("IQ2_XXS").
const char* ggml_type_name_for_id(uint32_t id);

int ggml_block_size(GgmlType type);     // values per block (1 for F32/F16/BF16)
int ggml_block_bytes(GgmlType type);    // bytes per block
bool ggml_is_quantized(GgmlType type);  // not F32, F16 or BF16
// Bytes of one row of n values; nullopt when n is not a whole number of blocks.
std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n);

}  // namespace clchat
