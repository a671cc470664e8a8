// Type table for the GGML tensor types clchat reads and writes.
#include "engine/gguf/ggml_types.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>

namespace clchat {

namespace {

struct TypeInfo {
  GgmlType type;
  const char* name;
  int block_size;
  int block_bytes;
};

constexpr TypeInfo k_types[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", k_quant_block, sizeof(BlockQ4_0)},
    {GgmlType::Q4_1, "Q4_1", k_quant_block, sizeof(BlockQ4_1)},
    {GgmlType::Q5_0, "Q5_0", k_quant_block, sizeof(BlockQ5_0)},
    {GgmlType::Q5_1, "Q5_1", k_quant_block, sizeof(BlockQ5_1)},
    {GgmlType::Q8_0, "Q8_0", k_quant_block, sizeof(BlockQ8_0)},
    {GgmlType::Q2_K, "Q2_K", k_super_block, sizeof(BlockQ2_K)},
    {GgmlType::Q3_K, "Q3_K", k_super_block, sizeof(BlockQ3_K)},
    {GgmlType::Q4_K, "Q4_K", k_super_block, sizeof(BlockQ4_K)},
    {GgmlType::Q5_K, "Q5_K", k_super_block, sizeof(BlockQ5_K)},
    {GgmlType::Q6_K, "Q6_K", k_super_block, sizeof(BlockQ6_K)},
    {GgmlType::IQ4_NL, "IQ4_NL", k_quant_block, sizeof(BlockIQ4_NL)},
    {GgmlType::IQ4_XS, "IQ4_XS", k_super_block, sizeof(BlockIQ4_XS)},
    {GgmlType::BF16, "BF16", 1, 2},
};

constexpr GgmlType k_type_list[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0,   GgmlType::Q4_1,   GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,   GgmlType::Q3_K,   GgmlType::Q4_K,
    GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::BF16,
};
static_assert(std::size(k_type_list) == std::size(k_types));

const TypeInfo* info_for(GgmlType type) {
  for (const TypeInfo& t : k_types) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

}  // namespace

std::span<const GgmlType> ggml_supported_types() { return k_type_list; }

const std::string& ggml_supported_type_names() {
  static const std::string names = [] {
    std::string s;
    for (GgmlType t : k_type_list) s += (s.empty() ? "" : ", ") + std::string(ggml_type_name(t));
    return s;
  }();
  return names;
}

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  for (const TypeInfo& t : k_types) {
    if (uint32_t(t.type) == id) return t.type;
  }
  return std::nullopt;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return char(std::toupper(c)); });
  for (const TypeInfo& t : k_types) {
    if (upper == t.name) return t.type;
  }
  return std::nullopt;
}

const char* ggml_type_name(GgmlType type) {
  const TypeInfo* t = info_for(type);
  return t ? t->name : "?";
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
  const TypeInfo* t = info_for(type);
  return t ? t->block_size : 1;
}

int ggml_block_bytes(GgmlType type) {
  const TypeInfo* t = info_for(type);
  return t ? t->block_bytes : 0;
}

bool ggml_is_quantized(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n) {
  const uint64_t block = uint64_t(ggml_block_size(type));
  if (n % block != 0) return std::nullopt;
  const uint64_t blocks = n / block;
  const uint64_t bytes = uint64_t(ggml_block_bytes(type));
  if (bytes == 0 || blocks > UINT64_MAX / bytes) return std::nullopt;
  return blocks * bytes;
}

}  // namespace clchat
