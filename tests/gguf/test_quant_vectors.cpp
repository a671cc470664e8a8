// dequantize_row() for every stored GGML type, bit for bit against llama.cpp's
// reference dequantizers as the PyPI package gguf 0.19.0 implements them
// (gguf.quants.dequantize, numpy float32).
//
// The expected values are data, never computed here: tests/data/quant_vectors/
// <type>.bin holds random raw blocks (every payload byte value, all-0x00 and
// all-0xFF payloads, fp16 scales from +-0 and subnormals to +-65504, a few
// inf/NaN scales) and the package's output for them; tests/gguf/
// make_quant_vectors.py wrote them and says how to run it again. Every value is
// compared as a uint32 bit pattern, except where the package produced a NaN
// from arithmetic on an inf/NaN scale: there clchat must give a NaN too, but its
// payload is the hardware's (0 * inf is 0xFFC00000 on x86, 0x7FC00000 on Arm).
// F16 and BF16 are bit conversions, so their NaNs are compared bit for bit.
// A missing or malformed file fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/quant.h"

namespace clchat {
namespace {

// The types with a vector file: all stored types but F32.
constexpr GgmlType k_vector_types[] = {
    GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,   GgmlType::Q4_1,  GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,   GgmlType::Q3_K,  GgmlType::Q4_K,
    GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

// One vector file: its blocks and what the package made of them.
struct QuantVector {
  uint32_t type_id = 0;
  uint64_t n_values = 0;
  std::vector<uint8_t> raw;   // (n_values / block size, block bytes)
  std::vector<float> values;  // (n_values,)
};

uint32_t read_u32(const std::vector<char>& bytes, size_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

// Header: "CLQV", version 1, type id, n_values, n_raw_bytes (u32 LE each),
// then the raw bytes, then n_values float32. Fails the test (fatally) on any
// mismatch; call through ASSERT_NO_FATAL_FAILURE.
void load_vector(const std::filesystem::path& path, QuantVector* out) {
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing vector file " << path
                  << " (tests/gguf/make_quant_vectors.py writes it)";
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  constexpr size_t header_bytes = 20;
  ASSERT_GE(bytes.size(), header_bytes) << path;
  ASSERT_EQ(std::string(bytes.data(), 4), "CLQV") << path;
  ASSERT_EQ(read_u32(bytes, 4), 1u) << path << ": version";
  out->type_id = read_u32(bytes, 8);
  out->n_values = read_u32(bytes, 12);
  const uint64_t n_raw = read_u32(bytes, 16);
  ASSERT_EQ(bytes.size(), header_bytes + n_raw + 4 * out->n_values) << path << ": size";
  out->raw.assign(bytes.begin() + header_bytes, bytes.begin() + header_bytes + n_raw);
  out->values.resize(out->n_values);
  std::memcpy(out->values.data(), bytes.data() + header_bytes + n_raw, 4 * out->n_values);
}

std::filesystem::path vector_path(GgmlType type) {
  std::string stem = ggml_type_name(type);
  for (char& c : stem) c = char(std::tolower(static_cast<unsigned char>(c)));
  return std::filesystem::path(CLCHAT_SOURCE_DIR) / "tests/data/quant_vectors" / (stem + ".bin");
}

// Byte offsets of a block's fp16 scale fields: d, then m or dmin if any.
std::vector<size_t> scale_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return {offsetof(BlockQ4_0, d)};
    case GgmlType::Q4_1:
      return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case GgmlType::Q5_0:
      return {offsetof(BlockQ5_0, d)};
    case GgmlType::Q5_1:
      return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case GgmlType::Q8_0:
      return {offsetof(BlockQ8_0, d)};
    case GgmlType::Q2_K:
      return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case GgmlType::Q3_K:
      return {offsetof(BlockQ3_K, d)};
    case GgmlType::Q4_K:
      return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case GgmlType::Q5_K:
      return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case GgmlType::Q6_K:
      return {offsetof(BlockQ6_K, d)};
    case GgmlType::IQ4_NL:
      return {offsetof(BlockIQ4_NL, d)};
    case GgmlType::IQ4_XS:
      return {offsetof(BlockIQ4_XS, d)};
    default:
      return {};
  }
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The file is worth comparing against: random payloads covering every byte
// value, the extreme scales in every scale field, mostly non-zero and mostly
// finite values.
void expect_coverage(GgmlType type, const QuantVector& v) {
  size_t nonzero = 0, nan = 0;
  for (float x : v.values) {
    nonzero += x != 0.0f;
    nan += std::isnan(x);
  }
  EXPECT_GT(nonzero, v.n_values / 2) << "mostly zeros";
  EXPECT_LT(nan, v.n_values / 5) << "mostly NaN";

  if (!ggml_is_quantized(type)) {
    std::set<uint16_t> halves;
    for (size_t i = 0; i + 1 < v.raw.size(); i += 2) halves.insert(load_u16(&v.raw[i]));
    const bool f16 = type == GgmlType::F16;
    for (uint16_t h : {0x0000, 0x8000, 0x0001, 0x8001, f16 ? 0x7c00 : 0x7f80, f16 ? 0xfc00 : 0xff80,
                       f16 ? 0x7e00 : 0x7fc0, f16 ? 0x7c01 : 0x7f81}) {
      EXPECT_TRUE(halves.count(h)) << "no 16-bit pattern 0x" << std::hex << h;
    }
    return;
  }
  const size_t block_bytes = size_t(ggml_block_bytes(type));
  const std::vector<size_t> offsets = scale_offsets(type);
  ASSERT_FALSE(offsets.empty());
  std::vector<std::set<uint16_t>> scales(offsets.size());
  std::set<uint8_t> payload;
  for (size_t b = 0; b < v.raw.size(); b += block_bytes) {
    for (size_t j = 0; j < block_bytes; ++j) {
      bool is_scale = false;
      for (size_t off : offsets) is_scale |= j == off || j == off + 1;
      if (!is_scale) payload.insert(v.raw[b + j]);
    }
    for (size_t f = 0; f < offsets.size(); ++f) scales[f].insert(load_u16(&v.raw[b + offsets[f]]));
  }
  EXPECT_EQ(payload.size(), 256u) << "not every payload byte value occurs";
  for (size_t f = 0; f < offsets.size(); ++f) {
    SCOPED_TRACE(f == 0 ? "d" : "m/dmin");
    // 0, -0, 65504, -65504, smallest subnormal, largest subnormal, smallest normal.
    for (uint16_t h : {0x0000, 0x8000, 0x7bff, 0xfbff, 0x0001, 0x03ff, 0x0400}) {
      EXPECT_TRUE(scales[f].count(h)) << "no scale 0x" << std::hex << h;
    }
  }
}

class QuantVectors : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantVectors, DequantizeMatchesGgufPackageBitForBit) {
  const GgmlType type = GetParam();
  QuantVector v;
  ASSERT_NO_FATAL_FAILURE(load_vector(vector_path(type), &v));
  ASSERT_EQ(v.type_id, uint32_t(type)) << "file holds another type";
  const auto row_bytes = ggml_row_bytes(type, v.n_values);
  ASSERT_TRUE(row_bytes.has_value()) << v.n_values << " values is not whole blocks";
  ASSERT_EQ(v.raw.size(), *row_bytes);
  ASSERT_GT(v.n_values, 1000u);
  expect_coverage(type, v);

  std::vector<float> got(v.n_values);
  dequantize_row(type, v.raw.data(), got.data(), v.n_values);

  const int block = ggml_block_size(type);
  size_t mismatches = 0, nan_only = 0;
  for (uint64_t i = 0; i < v.n_values; ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(v.values[i]);
    const uint32_t have = std::bit_cast<uint32_t>(got[i]);
    bool ok = want == have;
    if (!ok && ggml_is_quantized(type) && std::isnan(v.values[i])) {
      ok = std::isnan(got[i]);  // an arithmetic NaN's payload is the hardware's
      nan_only += ok;
    }
    if (!ok && ++mismatches <= 8) {
      ADD_FAILURE() << "value " << i << " (block " << i / uint64_t(block) << ", index "
                    << i % uint64_t(block) << "): clchat " << got[i] << " (0x" << std::hex << have
                    << "), gguf " << v.values[i] << " (0x" << want << ")";
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << v.n_values << " values";
  RecordProperty("nan_compared_as_nan", int(nan_only));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantVectors, ::testing::ValuesIn(k_vector_types),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return std::string(ggml_type_name(info.param));
                         });

// Every type clchat stores, except F32 (a copy), is in the list above.
TEST(QuantVectorsCover, EveryStoredType) {
  for (GgmlType type : ggml_supported_types()) {
    if (type == GgmlType::F32) continue;
    EXPECT_NE(std::find(std::begin(k_vector_types), std::end(k_vector_types), type),
              std::end(k_vector_types))
        << ggml_type_name(type) << " has no vector file";
  }
}

}  // namespace
}  // namespace clchat
