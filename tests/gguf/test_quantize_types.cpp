// Quantizers of every GGML type clchat supports, checked through clchat's
// dequantizers (dequantize.cpp, tested against the gguf package's values):
// error bounds on random rows, edge rows, re-quantizing the decoded values,
// and the use of the K-quants' quantized group scales. Expected values come
// from the bounds below and from hand-written bit patterns (BF16), never from
// the code under test.
//
// Error bound per type: a b-bit uniform quantizer spread over a group's range
// has RMS error step / sqrt(12) with step = range / (2^b - 1), and a uniform
// signal over that range has RMS range / sqrt(12): a relative RMS error of
// 1 / (2^b - 1). The bound allows 1.5 times that for the fp16 and 4/6/8-bit
// scale rounding and for Gaussian rows (wider tails), so Q2_K (b = 2) may
// reach 0.5 and Q6_K 0.024. IQ4_NL/IQ4_XS count as 4 bits. F16 and BF16 are
// bounded element-wise by half an ulp: 2^-11 and 2^-8 relative.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/quant.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

int code_bits(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
      return 2;
    case GgmlType::Q3_K:
      return 3;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q4_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return 4;
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K:
      return 5;
    case GgmlType::Q6_K:
      return 6;
    case GgmlType::Q8_0:
      return 8;
    case GgmlType::F16:
      return 11;  // significand bits
    case GgmlType::BF16:
      return 8;
    case GgmlType::F32:
      return 24;
  }
  return 0;
}

// Relative RMS error allowed for random rows (see the file comment).
double error_bound(GgmlType t) {
  if (!ggml_is_quantized(t)) return std::ldexp(1.0, -code_bits(t));
  return 1.5 / (std::ldexp(1.0, code_bits(t)) - 1.0);
}

// Quantizes rows of n values twice, into buffers poisoned with 0x00 and 0xff:
// both must come out equal (every byte written). Returns the bytes.
std::vector<uint8_t> quantize_checked(GgmlType type, const std::vector<float>& x, uint64_t n) {
  const uint64_t row_bytes = *ggml_row_bytes(type, n);
  const uint64_t rows = x.size() / n;
  std::vector<uint8_t> a(rows * row_bytes, 0x00), b(rows * row_bytes, 0xff);
  for (uint64_t r = 0; r < rows; ++r) {
    quantize_row(type, x.data() + r * n, a.data() + r * row_bytes, n);
    quantize_row(type, x.data() + r * n, b.data() + r * row_bytes, n);
  }
  EXPECT_EQ(a, b) << ggml_type_name(type) << ": some bytes were left unwritten";
  return a;
}

// Decodes into a NaN-poisoned buffer; every value must be written and finite.
std::vector<float> dequantize_checked(GgmlType type, const std::vector<uint8_t>& q, uint64_t n,
                                      uint64_t rows) {
  const uint64_t row_bytes = *ggml_row_bytes(type, n);
  std::vector<float> y(rows * n, std::numeric_limits<float>::quiet_NaN());
  for (uint64_t r = 0; r < rows; ++r) dequantize_row(type, q.data() + r * row_bytes, &y[r * n], n);
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      ADD_FAILURE() << ggml_type_name(type) << ": value " << i << " is " << y[i];
      break;
    }
  }
  return y;
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x, uint64_t n) {
  return dequantize_checked(type, quantize_checked(type, x, n), n, x.size() / n);
}

std::vector<float> gaussian_floats(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class QuantizeType : public ::testing::TestWithParam<GgmlType> {};

constexpr uint64_t k_row = 1024;  // four super-blocks, 32 blocks of 32

TEST_P(QuantizeType, RandomRowsStayWithinTheBound) {
  const GgmlType t = GetParam();
  const double bound = error_bound(t);
  struct Input {
    const char* what;
    std::vector<float> x;
  };
  const Input inputs[] = {
      {"uniform [-1, 1)", test::random_floats(64 * k_row, 11)},
      {"gaussian sigma 0.02", gaussian_floats(64 * k_row, 12, 0.02f)},
      {"uniform [0, 3)", test::random_floats(16 * k_row, 13, 0.0f, 3.0f)},
  };
  for (const auto& in : inputs) {
    SCOPED_TRACE(in.what);
    const std::vector<float> y = round_trip(t, in.x, k_row);
    const double err = test::relative_error(y, in.x);
    EXPECT_LE(err, bound) << ggml_type_name(t);
    if (t == GgmlType::F32) {
      EXPECT_EQ(y, in.x);
    }
    if (!ggml_is_quantized(t)) {  // element-wise: half an ulp (F16: subnormals have 2^-24 ulps)
      const double slack = t == GgmlType::F16 ? std::ldexp(1.0, -25) : 0.0;
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LE(std::fabs(y[i] - in.x[i]), bound * std::fabs(in.x[i]) + slack) << i;
      }
    }
  }
}

// Decoding, then quantizing again, lands close to the decoded values (for
// most types exactly on them): the decoded grid is one the quantizer finds.
TEST_P(QuantizeType, DecodedValuesQuantizeToThemselves) {
  const GgmlType t = GetParam();
  for (const auto& x : {test::random_floats(32 * k_row, 21), gaussian_floats(32 * k_row, 22, 1)}) {
    const std::vector<float> y = round_trip(t, x, k_row);
    const std::vector<float> y2 = round_trip(t, y, k_row);
    EXPECT_LE(test::relative_error(y2, y), error_bound(t) / 2) << ggml_type_name(t);
  }
}

TEST_P(QuantizeType, ZeroRowsDecodeToZero) {
  const GgmlType t = GetParam();
  const std::vector<float> x(4 * k_row, 0.0f);
  for (const float y : round_trip(t, x, k_row)) ASSERT_EQ(y, 0.0f) << ggml_type_name(t);
}

TEST_P(QuantizeType, ConstantRowsDecodeCloseToTheConstant) {
  const GgmlType t = GetParam();
  for (const float c : {1.0f, -0.75f, 3.0e-3f, 42.0f}) {
    const std::vector<float> x(2 * k_row, c);
    const std::vector<float> y = round_trip(t, x, k_row);
    // One level sits on (or within fp16 and scale rounding of) the constant.
    EXPECT_LE(test::relative_error(y, x), std::min(error_bound(t), 0.02))
        << ggml_type_name(t) << " c = " << c;
  }
}

TEST_P(QuantizeType, NegativeOnlyRowsStayWithinTheBound) {
  const GgmlType t = GetParam();
  const std::vector<float> x = test::random_floats(16 * k_row, 31, -2.0f, -0.5f);
  EXPECT_LE(test::relative_error(round_trip(t, x, k_row), x), error_bound(t)) << ggml_type_name(t);
}

// One value 1000 times the rest: it keeps its value (it sets its block's
// scale), the rest of its block turns coarse, other blocks are untouched.
TEST_P(QuantizeType, OneHugeOutlierKeepsItsValueAndOtherBlocksTheirBound) {
  const GgmlType t = GetParam();
  std::vector<float> x = test::random_floats(4 * k_row, 41);
  x[77] = 1000.0f;
  x[k_row + 300] = -1000.0f;
  const std::vector<float> y = round_trip(t, x, k_row);
  EXPECT_NEAR(y[77], 1000.0f, 1000.0f * 0.005f) << ggml_type_name(t);
  EXPECT_NEAR(y[k_row + 300], -1000.0f, 1000.0f * 0.005f) << ggml_type_name(t);
  const std::vector<float> rest_x(x.begin() + 2 * k_row, x.end());
  const std::vector<float> rest_y(y.begin() + 2 * k_row, y.end());
  EXPECT_LE(test::relative_error(rest_y, rest_x), error_bound(t)) << ggml_type_name(t);
}

// Groups of 32 whose amplitudes halve from one to the next (1 .. 1/128)
// within each super-block: those down to 1/8 of the largest keep (within a
// quarter) the type's bound, which needs the group scales quantized against
// the block's scale with care (and the smaller ones are merely finite).
TEST_P(QuantizeType, GroupsEightTimesSmallerKeepTheirAccuracy) {
  const GgmlType t = GetParam();
  std::vector<float> x = test::random_floats(16 * k_row, 51);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.0f, -int(i / 32 % 8));
  const std::vector<float> y = round_trip(t, x, k_row);
  for (size_t g = 0; g < x.size() / 32; ++g) {
    if (g % 8 > 3) continue;
    const std::vector<float> gx(x.begin() + long(32 * g), x.begin() + long(32 * g + 32));
    const std::vector<float> gy(y.begin() + long(32 * g), y.begin() + long(32 * g + 32));
    ASSERT_LE(test::relative_error(gy, gx), 1.25 * error_bound(t))
        << ggml_type_name(t) << " group " << g;
  }
}

TEST_P(QuantizeType, RejectsPartialBlocks) {
  const GgmlType t = GetParam();
  const int block = ggml_block_size(t);
  if (block == 1) GTEST_SKIP() << "any length is whole";
  std::vector<float> x(size_t(block) * 2, 1.0f);
  std::vector<uint8_t> out(*ggml_row_bytes(t, uint64_t(block) * 2));
  EXPECT_THROW(quantize_row(t, x.data(), out.data(), uint64_t(block) + 16), std::invalid_argument);
  EXPECT_THROW(quantize_matrix(t, x, uint64_t(block) / 2), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantizeType, ::testing::ValuesIn(ggml_supported_types()),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

// ---- the quantized group scales use their whole code range --------------------------
//
// The group with the largest scale must get the top scale code, or the one
// below it when that codes its values better (a super-block scale chosen too
// large would waste bits on every group). The bytes are read here straight
// from the block layouts in ggml_types.h.

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

// Largest |group scale code| of each super-block of a row of k_row values.
std::vector<int> top_scale_codes(GgmlType t, const std::vector<uint8_t>& q) {
  std::vector<int> top;
  const int bytes = ggml_block_bytes(t);
  for (size_t off = 0; off + size_t(bytes) <= q.size(); off += size_t(bytes)) {
    const uint8_t* b = q.data() + off;
    int m = 0;
    for (int g = 0; g < 16; ++g) {
      int code = 0;
      switch (t) {
        case GgmlType::Q2_K:  // scales[16] first: low nibble scale
          code = b[g] & 15;
          break;
        case GgmlType::Q3_K: {  // hmask[32], qs[64], scales[12]
          const uint8_t* s = b + 96;
          const int low = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
          code = (low | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
          break;
        }
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: {  // d, dmin, scales[12]: 6-bit scales of 8 groups
          if (g >= 8) break;
          const uint8_t* s = b + 4;
          code = g < 4 ? s[g] & 63 : (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
          break;
        }
        case GgmlType::Q6_K:  // ql[128], qh[64], int8 scales[16]
          code = int8_t(b[192 + g]);
          break;
        case GgmlType::IQ4_XS:  // d, scales_h, scales_l[4]
          if (g >= 8) break;
          code =
              (((b[4 + g / 2] >> (4 * (g % 2))) & 15) | ((le16(b + 2) >> (2 * g)) & 3) << 4) - 32;
          break;
        default:
          break;
      }
      m = std::max(m, std::abs(code));
    }
    top.push_back(m);
  }
  return top;
}

TEST(QuantizeKQuants, TheLargestGroupScaleTakesTheTopCode) {
  const std::vector<float> x = test::random_floats(8 * k_row, 61);
  struct Case {
    GgmlType type;
    int top_lo, top_hi;  // allowed |code| of the largest group scale
  };
  // Signed scales may land on the negative end (-32, -128) instead of +31, +127.
  for (const Case c : {Case{GgmlType::Q2_K, 14, 15}, Case{GgmlType::Q3_K, 30, 32},
                       Case{GgmlType::Q4_K, 62, 63}, Case{GgmlType::Q5_K, 62, 63},
                       Case{GgmlType::Q6_K, 126, 128}, Case{GgmlType::IQ4_XS, 30, 32}}) {
    SCOPED_TRACE(ggml_type_name(c.type));
    const std::vector<uint8_t> q = quantize_matrix(c.type, x, k_row);
    for (const int top : top_scale_codes(c.type, q)) {
      ASSERT_GE(top, c.top_lo);
      ASSERT_LE(top, c.top_hi);
    }
  }
}

// ---- BF16 by hand ---------------------------------------------------------------

TEST(QuantizeBf16, RoundsToNearestEvenAndKeepsNaN) {
  struct Case {
    uint32_t f;
    uint16_t h;
  };
  const Case cases[] = {
      {0x3f800000, 0x3f80},                        // 1
      {0xc0000000, 0xc000},                        // -2
      {0x00000000, 0x0000}, {0x80000000, 0x8000},  // signed zeros
      {0x3f808000, 0x3f80},                        // tie between 0x3f80 and 0x3f81: even
      {0x3f818000, 0x3f82},                        // tie between 0x3f81 and 0x3f82: even
      {0x3f808001, 0x3f81},                        // just above the tie
      {0x3f807fff, 0x3f80},                        // just below it
      {0x7f7fffff, 0x7f80},                        // largest float rounds up to inf
      {0x7f7f7fff, 0x7f7f},                        // ... but not just below the tie
      {0x7f800000, 0x7f80}, {0xff800000, 0xff80},  // infinities
      {0x00000001, 0x0000},                        // smallest subnormal rounds to zero
      {0x00018000, 0x0002},                        // subnormal tie: even
  };
  for (const Case c : cases) {
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(c.f)), c.h) << std::hex << c.f;
  }
  for (const uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7f80ffffu, 0x7fff0000u}) {
    const uint16_t h = fp32_to_bf16(std::bit_cast<float>(nan));
    EXPECT_EQ(h & 0x7f80, 0x7f80) << std::hex << nan;
    EXPECT_NE(h & 0x007f, 0) << std::hex << nan << " became inf";
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // quantize_row writes the same halves, and they decode to their upper bits.
  const float x[4] = {1.0f, std::bit_cast<float>(0x3f818000u), -0.0f,
                      std::bit_cast<float>(0x7f61b1e6u)};  // about 3e38
  uint8_t out[8];
  quantize_row(GgmlType::BF16, x, out, 4);
  float y[4];
  dequantize_row(GgmlType::BF16, out, y, 4);
  EXPECT_EQ(le16(out + 2), 0x3f82);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[0]), 0x3f800000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[1]), 0x3f820000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[2]), 0x80000000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[3]), 0x7f620000u);  // 0xb1e6 rounds up
}

}  // namespace
}  // namespace clchat
