// GGML tensor types clchat supports and their block layouts.
//
// Quantized types store rows in blocks of 32 values (GGML's QK = 32):
//   Q4_0: fp16 scale d, 16 bytes of nibbles;        x = (q - 8) * d
//   Q4_1: fp16 scale d, fp16 min m, 16 nibble bytes; x = q * d + m
//   Q8_0: fp16 scale d, 32 int8;                     x = q * d
// Nibble byte j holds value j in its low half and value j + 16 in its high half.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace clchat {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
};

constexpr int k_quant_block = 32;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);

// Known type from its GGUF id, or nullopt for any other id.
std::optional<GgmlType> ggml_type_from_id(uint32_t id);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // "q4_0", "F16", ...
const char* ggml_type_name(GgmlType type);                           // "Q4_0", "F16", ...
// GGML's name for an id, including types clchat does not support ("Q4_K").
const char* ggml_type_name_for_id(uint32_t id);

int ggml_block_size(GgmlType type);   // values per block (1 for F32/F16)
int ggml_block_bytes(GgmlType type);  // bytes per block
// Bytes of one row of n values; nullopt when n is not a whole number of blocks.
std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n);

}  // namespace clchat
