// Type table for the GGML tensor types clchat reads and writes.
#include "engine/gguf/ggml_types.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace clchat {

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  switch (id) {
    case 0:
      return GgmlType::F32;
    case 1:
      return GgmlType::F16;
    case 2:
      return GgmlType::Q4_0;
    case 3:
      return GgmlType::Q4_1;
    case 8:
      return GgmlType::Q8_0;
    default:
      return std::nullopt;
  }
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return char(std::toupper(c)); });
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    if (upper == ggml_type_name(t)) return t;
  }
  return std::nullopt;
}

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return "F32";
    case GgmlType::F16:
      return "F16";
    case GgmlType::Q4_0:
      return "Q4_0";
    case GgmlType::Q4_1:
      return "Q4_1";
    case GgmlType::Q8_0:
      return "Q8_0";
  }
  return "?";
}

const char* ggml_type_name_for_id(uint32_t id) {
  // GGML's numbering (ggml.h); ids 4 and 5 (Q4_2, Q4_3) were removed long ago.
  static const char* const names[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  return id < std::size(names) ? names[id] : "unknown";
}

int ggml_block_size(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
      return 1;
    default:
      return k_quant_block;
  }
}

int ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 4;
    case GgmlType::F16:
      return 2;
    case GgmlType::Q4_0:
      return sizeof(BlockQ4_0);
    case GgmlType::Q4_1:
      return sizeof(BlockQ4_1);
    case GgmlType::Q8_0:
      return sizeof(BlockQ8_0);
  }
  return 0;
}

std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n) {
  const uint64_t block = uint64_t(ggml_block_size(type));
  if (n % block != 0) return std::nullopt;
  const uint64_t blocks = n / block;
  const uint64_t bytes = uint64_t(ggml_block_bytes(type));
  if (blocks > UINT64_MAX / bytes) return std::nullopt;
  return blocks * bytes;
}

}  // namespace clchat
