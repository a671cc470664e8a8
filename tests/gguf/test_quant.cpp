// fp16 conversion and the Q4_0 / Q4_1 / Q8_0 block codecs.
//
// References written here, independent of engine/gguf/quant.cpp:
//  - ref_half_value(): a half's value from its fields in double arithmetic.
//  - RefHalfRounder: float -> half by searching the sorted table of all
//    finite halves for the nearest one (ties to the even bit pattern, values
//    from 65520 up go to infinity, as IEEE 754 round-to-nearest-even does).
//  - blocks written out byte by byte from GGML's block definitions, and a
//    plain decoder for the shared model's tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

// ---- independent fp16 references ---------------------------------------------------

double ref_half_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(double(1024 + m), e - 25);
}

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

class RefHalfRounder {
 public:
  RefHalfRounder() {
    for (uint32_t h = 0; h <= 0x7bff; ++h) values_.push_back(ref_half_value(uint16_t(h)));
    values_.push_back(65536.0);  // 0x7c00: where rounding past 65504 lands (inf)
  }
  // Expected fp32_to_fp16(f) for non-NaN f.
  uint16_t operator()(float f) const {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(double(f));
    if (a >= 65536.0) return sign | 0x7c00;
    // lo: the largest half <= a; hi = lo + 1.
    const auto it = std::upper_bound(values_.begin(), values_.end(), a);
    const uint16_t lo = uint16_t(it - values_.begin() - 1);
    const uint16_t hi = uint16_t(lo + 1);
    if (values_[lo] == a) return sign | lo;
    const double mid = (values_[lo] + values_[hi]) / 2;  // exact: both are halves
    uint16_t r;
    if (a < mid) {
      r = lo;
    } else if (a > mid) {
      r = hi;
    } else {
      r = (lo & 1) ? hi : lo;
    }
    return sign | r;
  }
  double value(uint16_t h) const { return values_[h]; }

 private:
  std::vector<double> values_;
};

const RefHalfRounder& ref_rounder() {
  static const RefHalfRounder r;
  return r;
}

float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

// ---- fp16 -----------------------------------------------------------------------

TEST(Fp16, DecodesEveryHalfLikeTheReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = fp16_to_fp32(uint16_t(h));
    const double want = ref_half_value(uint16_t(h));
    if (is_half_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(double(got), want) << std::hex << h;
    }
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
  }
}

TEST(Fp16, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = fp32_to_fp16(fp16_to_fp32(uint16_t(h)));
    if (is_half_nan(uint16_t(h))) {
      ASSERT_TRUE(is_half_nan(back)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Fp16, HandPickedRoundings) {
  struct Case {
    float f;
    uint16_t h;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.1f, 0x2e66},                        // 0.0999755859375
      {1.0f / 3.0f, 0x3555},                 // 0.333251953125
      {1.0f + 0x1p-11f, 0x3c00},             // tie between 0x3c00 and 0x3c01: even
      {1.0f + 3 * 0x1p-11f, 0x3c02},         // tie between 0x3c01 and 0x3c02: even
      {1.0f + 0x1p-11f + 0x1p-23f, 0x3c01},  // just past the tie
      {65504.0f, 0x7bff},                    // largest finite half
      {65519.99609375f, 0x7bff},             // the float just below 65520
      {65520.0f, 0x7c00},                    // tie between 65504 and 65536: rounds to inf
      {65536.0f, 0x7c00},
      {1e10f, 0x7c00},
      {-1e10f, 0xfc00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-14f, 0x0400},             // smallest normal
      {0x1p-14f - 0x1p-25f, 0x0400},  // tie between 0x03ff and 0x0400: even
      {0x1p-14f - 0x1p-24f, 0x03ff},  // largest subnormal
      {0x1p-24f, 0x0001},             // smallest subnormal
      {0x1p-25f, 0x0000},             // tie between 0 and 0x0001: even (zero)
      {0x1p-25f + 0x1p-48f, 0x0001},  // just past the tie
      {-0x1p-25f, 0x8000},
      {3 * 0x1p-25f, 0x0002},  // tie between 0x0001 and 0x0002: even
      {5 * 0x1p-25f, 0x0002},  // tie between 0x0002 and 0x0003: even
      {1e-8f, 0x0000},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp32_to_fp16(c.f), c.h) << c.f;
    EXPECT_EQ(ref_rounder()(c.f), c.h) << "reference disagrees on " << c.f;
  }
  for (float nan :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        bits_to_float(0x7f800001u), bits_to_float(0xffbfffffu)}) {
    const uint16_t h = fp32_to_fp16(nan);
    EXPECT_TRUE(is_half_nan(h)) << std::hex << h;
    EXPECT_EQ((h & 0x8000) != 0, std::signbit(nan));
  }
}

TEST(Fp16, EveryMidpointAndItsNeighboursRoundLikeTheReference) {
  const RefHalfRounder& ref = ref_rounder();
  int checked = 0;
  for (uint32_t lo = 0; lo < 0x7c00; ++lo) {
    const float mid = float((ref.value(uint16_t(lo)) + ref.value(uint16_t(lo + 1))) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      for (float s : {f, -f}) {
        ASSERT_EQ(fp32_to_fp16(s), ref(s))
            << s << " (" << std::hex << std::bit_cast<uint32_t>(s) << ")";
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 0x7c00 * 6);
}

TEST(Fp16, RandomFloatsRoundLikeTheReference) {
  const RefHalfRounder& ref = ref_rounder();
  std::mt19937 rng(1234);
  // Uniform bit patterns (every exponent), uniform values in the half range,
  // and log-uniform magnitudes around the subnormal and overflow edges.
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> log2mag(-30.0f, 17.0f);
  for (int i = 0; i < 300000; ++i) {
    float f;
    switch (i % 3) {
      case 0:
        f = bits_to_float(uint32_t(rng()));
        break;
      case 1:
        f = wide(rng);
        break;
      default:
        f = std::exp2(log2mag(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
        break;
    }
    if (std::isnan(f)) {
      ASSERT_TRUE(is_half_nan(fp32_to_fp16(f)));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), ref(f))
        << f << " (" << std::hex << std::bit_cast<uint32_t>(f) << ")";
  }
}

// ---- type table ------------------------------------------------------------------------

TEST(GgmlTypes, IdsNamesAndSizes) {
  EXPECT_EQ(ggml_type_from_id(0), GgmlType::F32);
  EXPECT_EQ(ggml_type_from_id(1), GgmlType::F16);
  EXPECT_EQ(ggml_type_from_id(2), GgmlType::Q4_0);
  EXPECT_EQ(ggml_type_from_id(3), GgmlType::Q4_1);
  EXPECT_EQ(ggml_type_from_id(8), GgmlType::Q8_0);
  EXPECT_EQ(ggml_type_from_id(6), GgmlType::Q5_0);
  EXPECT_EQ(ggml_type_from_id(12), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_id(23), GgmlType::IQ4_XS);
  EXPECT_EQ(ggml_type_from_id(30), GgmlType::BF16);
  for (uint32_t id : {4u, 5u, 9u, 15u, 16u, 29u, 31u, 1000u})
    EXPECT_EQ(ggml_type_from_id(id), std::nullopt);
  EXPECT_STREQ(ggml_type_name_for_id(12), "Q4_K");
  EXPECT_STREQ(ggml_type_name_for_id(6), "Q5_0");
  EXPECT_STREQ(ggml_type_name_for_id(14), "Q6_K");
  EXPECT_STREQ(ggml_type_name_for_id(30), "BF16");
  EXPECT_STREQ(ggml_type_name_for_id(31), "unknown");
  EXPECT_STREQ(ggml_type_name(GgmlType::Q4_1), "Q4_1");
  EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(ggml_type_from_name("F16"), GgmlType::F16);
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("iq4_xs"), GgmlType::IQ4_XS);
  EXPECT_EQ(ggml_type_from_name("q8_k"), std::nullopt);
  // Row sizes by hand: QK = 32 values per block; 18, 20, 34 bytes per block.
  EXPECT_EQ(ggml_row_bytes(GgmlType::F32, 7), 28u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::F16, 7), 14u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 64), 36u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_1, 96), 60u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 576), 612u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 172), std::nullopt);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 16), std::nullopt);
  // Super-blocks of 256: Q4_K 144 bytes, Q6_K 210; 576 values are not whole ones.
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 512), 288u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 1536), 1260u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 576), std::nullopt);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q5_0, 64), 44u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::F32, uint64_t(1) << 62), std::nullopt);  // overflows
}

// ---- hand-written blocks ------------------------------------------------------------------

struct HandBlock {
  const char* what;
  GgmlType type;
  std::vector<float> x;        // 32 inputs
  std::vector<uint8_t> bytes;  // the block GGML's reference quantizer writes
  std::vector<float> decoded;  // what the block decodes to
};

// Nibble byte j holds value j (low) and value j + 16 (high).
std::vector<uint8_t> nibbles(const std::vector<int>& q) {
  std::vector<uint8_t> out(16);
  for (int j = 0; j < 16; ++j) out[size_t(j)] = uint8_t(q[size_t(j)] | (q[size_t(j) + 16] << 4));
  return out;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<HandBlock> hand_blocks() {
  std::vector<HandBlock> blocks;
  {
    // Q8_0: amax 63.5 -> d = 0.5 (0x3800), q = x / d.
    HandBlock b{"q8_0 exact", GgmlType::Q8_0, {}, {0x00, 0x38, 0x81}, {}};
    b.x.push_back(-63.5f);
    for (int j = 1; j < 32; ++j) b.x.push_back(float(j - 16) * 0.5f);
    for (uint8_t q = 0xf1; q != 0x00; ++q) b.bytes.push_back(q);  // -15 .. -1
    for (uint8_t q = 0x00; q <= 0x0f; ++q) b.bytes.push_back(q);  // 0 .. 15
    b.decoded = b.x;
    blocks.push_back(b);
  }
  {
    // Q8_0: amax 127 -> d = 1; roundf rounds halves away from zero.
    HandBlock b{"q8_0 rounding", GgmlType::Q8_0, {}, {}, {}};
    b.x = {127, 2.5f, -2.5f, 0.4f, -0.6f, 3.49f, -126.5f, 0.5f, -0.5f, 1.5f};
    b.x.resize(32, 0.0f);
    b.bytes = {0x00, 0x3c, 0x7f, 0x03, 0xfd, 0x00, 0xff, 0x03, 0x81, 0x01, 0xff, 0x02};
    b.bytes.resize(34, 0x00);
    b.decoded = {127, 3, -3, 0, -1, 3, -127, 1, -1, 2};
    b.decoded.resize(32, 0.0f);
    blocks.push_back(b);
  }
  {
    HandBlock b{"q8_0 zeros", GgmlType::Q8_0, std::vector<float>(32, 0.0f),
                std::vector<uint8_t>(34, 0x00), std::vector<float>(32, 0.0f)};
    blocks.push_back(b);
  }
  {
    // Q4_0: the largest magnitude is -8 -> d = -8 / -8 = 1; q = int(x + 8.5).
    HandBlock b{"q4_0 exact", GgmlType::Q4_0, {}, {0x00, 0x3c}, {}};
    for (int j = 0; j < 16; ++j) b.x.push_back(float(j - 8));
    for (int j = 0; j < 16; ++j) b.x.push_back(float(7 - j));
    b.bytes = cat(b.bytes, {0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b,
                            0x3c, 0x2d, 0x1e, 0x0f});
    b.decoded = b.x;
    blocks.push_back(b);
  }
  {
    // Q4_0: max = +16 (first of |16| and |-16|) -> d = -2 (0xc000), id = -0.5,
    // q = min(15, int(x * id + 8.5)); -16 -> 16.5 is clamped to 15.
    HandBlock b{"q4_0 negative scale and clamp", GgmlType::Q4_0, {}, {0x00, 0xc0}, {}};
    b.x = {16, -16, 1, 3, -1, 2.9f, -3.1f};
    b.x.resize(16, 0.0f);
    b.x.push_back(6);
    b.x.push_back(-6);
    b.x.resize(32, 0.0f);
    std::vector<int> q = {0, 15, 8, 7, 9, 7, 10};
    q.resize(16, 8);
    q.push_back(5);
    q.push_back(11);
    q.resize(32, 8);
    b.bytes = cat(b.bytes, nibbles(q));
    for (int v : q) b.decoded.push_back(float(v - 8) * -2.0f);
    blocks.push_back(b);
  }
  {
    // All zero: d = 0 / -8 = -0.0, stored as 0x8000 (as GGML does); id = 0,
    // so q = int(8.5) = 8 everywhere.
    HandBlock b{"q4_0 zeros", GgmlType::Q4_0, std::vector<float>(32, 0.0f), {0x00, 0x80}, {}};
    b.bytes.resize(18, 0x88);
    b.decoded.assign(32, 0.0f);
    blocks.push_back(b);
  }
  {
    // Q4_1: min -1, max 14 -> d = 1 (0x3c00), m = -1 (0xbc00), q = int(x - m + 0.5).
    HandBlock b{"q4_1 exact", GgmlType::Q4_1, {}, {0x00, 0x3c, 0x00, 0xbc}, {}};
    for (int j = 0; j < 16; ++j) b.x.push_back(float(j - 1));
    for (int j = 0; j < 16; ++j) b.x.push_back(float(14 - j));
    b.bytes = cat(b.bytes, {0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b,
                            0x3c, 0x2d, 0x1e, 0x0f});
    b.decoded = b.x;
    blocks.push_back(b);
  }
  {
    // Q4_1: min 0, max 1 -> d = 1/15 rounds to half 0x2c44 = 0.066650390625.
    HandBlock b{"q4_1 inexact scale", GgmlType::Q4_1, {}, {0x44, 0x2c, 0x00, 0x00}, {}};
    std::vector<int> q;
    for (int j = 0; j < 16; ++j) q.push_back(j);
    for (int j = 0; j < 16; ++j) q.push_back(15 - j);
    for (int k : q) b.x.push_back(float(k) / 15.0f);
    b.bytes = cat(b.bytes, nibbles(q));
    for (int k : q) b.decoded.push_back(float(k) * 0.066650390625f);
    blocks.push_back(b);
  }
  {
    // Constant block: d = 0, m = 3 (0x4200), q = int(0 + 0.5) = 0.
    HandBlock b{"q4_1 constant",
                GgmlType::Q4_1,
                std::vector<float>(32, 3.0f),
                {0x00, 0x00, 0x00, 0x42},
                std::vector<float>(32, 3.0f)};
    b.bytes.resize(20, 0x00);
    blocks.push_back(b);
  }
  return blocks;
}

TEST(QuantBlocks, QuantizeWritesTheHandComputedBytes) {
  for (const HandBlock& b : hand_blocks()) {
    SCOPED_TRACE(b.what);
    ASSERT_EQ(b.x.size(), 32u);
    ASSERT_EQ(b.bytes.size(), size_t(ggml_block_bytes(b.type)));
    std::vector<uint8_t> out(b.bytes.size(), 0xAA);
    quantize_row(b.type, b.x.data(), out.data(), 32);
    EXPECT_EQ(out, b.bytes);
  }
}

TEST(QuantBlocks, DequantizeGivesTheHandComputedValues) {
  for (const HandBlock& b : hand_blocks()) {
    SCOPED_TRACE(b.what);
    ASSERT_EQ(b.decoded.size(), 32u);
    std::vector<float> out(32, -999.0f);
    dequantize_row(b.type, b.bytes.data(), out.data(), 32);
    EXPECT_EQ(out, b.decoded);
  }
}

TEST(QuantBlocks, DequantizeHandWrittenBytes) {
  // Q8_0 with d = 0x3555 (0.333251953125) and the extreme int8 values.
  std::vector<uint8_t> q8 = {0x55, 0x35, 0x01, 0xff, 0x7f, 0x80, 0x00};
  q8.resize(34, 0x02);
  std::vector<float> want = {0.333251953125f, -0.333251953125f, 42.322998046875f, -42.65625f, 0.0f};
  want.resize(32, 0.66650390625f);
  std::vector<float> out(32);
  dequantize_row(GgmlType::Q8_0, q8.data(), out.data(), 32);
  EXPECT_EQ(out, want);

  // Q4_1 with d = 0.5 (0x3800), m = -4 (0xc400); byte 0x71: value 0 has q = 1,
  // value 16 has q = 7.
  std::vector<uint8_t> q41 = {0x00, 0x38, 0x00, 0xc4, 0x71};
  q41.resize(20, 0xf0);  // q = 0 (low), 15 (high)
  dequantize_row(GgmlType::Q4_1, q41.data(), out.data(), 32);
  EXPECT_EQ(out[0], -3.5f);
  EXPECT_EQ(out[16], -0.5f);
  for (int j = 1; j < 16; ++j) EXPECT_EQ(out[size_t(j)], -4.0f);
  for (int j = 17; j < 32; ++j) EXPECT_EQ(out[size_t(j)], 3.5f);

  // Two Q4_0 blocks in a row: the second block's scale applies to its values only.
  std::vector<uint8_t> q40 = {0x00, 0x3c};  // d = 1
  q40.resize(18, 0x9f);                     // low 15 -> 7, high 9 -> 1
  q40.insert(q40.end(), {0x00, 0x40});      // d = 2
  q40.resize(36, 0x08);                     // low 8 -> 0, high 0 -> -16
  std::vector<float> out2(64);
  dequantize_row(GgmlType::Q4_0, q40.data(), out2.data(), 64);
  EXPECT_EQ(out2[0], 7.0f);
  EXPECT_EQ(out2[31], 1.0f);
  EXPECT_EQ(out2[32], 0.0f);
  EXPECT_EQ(out2[63], -16.0f);
}

// ---- error bounds on random data ------------------------------------------------------------

// Largest error of storing a positive value as a half (relative or, for
// subnormal halves, absolute).
double half_rounding_error(double v) { return std::max(std::fabs(v) * 0x1p-11, 0x1p-25); }

struct BoundCase {
  GgmlType type;
  float lo, hi;
};

TEST(QuantErrorBounds, PerBlockErrorStaysWithinHalfAStep) {
  const BoundCase cases[] = {{GgmlType::Q8_0, -1, 1},         {GgmlType::Q8_0, -1e-3f, 1e-3f},
                             {GgmlType::Q8_0, -500, 20},      {GgmlType::Q4_0, -1, 1},
                             {GgmlType::Q4_0, -1e-3f, 1e-3f}, {GgmlType::Q4_0, 3, 40},
                             {GgmlType::Q4_1, -1, 1},         {GgmlType::Q4_1, -1e-3f, 1e-3f},
                             {GgmlType::Q4_1, 3, 40},         {GgmlType::Q4_1, -300, -200}};
  uint32_t seed = 7;
  for (const BoundCase& c : cases) {
    SCOPED_TRACE(std::string(ggml_type_name(c.type)) + " in [" + std::to_string(c.lo) + ", " +
                 std::to_string(c.hi) + ")");
    const uint64_t n = 32 * 64;
    const std::vector<float> x = test::random_floats(n, seed++, c.lo, c.hi);
    const std::vector<uint8_t> q = quantize_matrix(c.type, x, n);
    ASSERT_EQ(q.size(), 64u * uint64_t(ggml_block_bytes(c.type)));
    const std::vector<float> y = dequantize_matrix(c.type, q, n, 1);
    for (uint64_t blk = 0; blk < 64; ++blk) {
      const float* xb = x.data() + blk * 32;
      const float* yb = y.data() + blk * 32;
      double amax = 0, vmax = -INFINITY, vmin = INFINITY, signed_max = 0;
      for (int j = 0; j < 32; ++j) {
        if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), signed_max = xb[j];
        vmax = std::max(vmax, double(xb[j]));
        vmin = std::min(vmin, double(xb[j]));
      }
      const double slack = 1e-6 * std::max(amax, 1e-30);
      for (int j = 0; j < 32; ++j) {
        const double err = std::fabs(double(xb[j]) - double(yb[j]));
        double bound;
        switch (c.type) {
          case GgmlType::Q8_0: {
            const double d = amax / 127;
            bound = d / 2 + 127 * half_rounding_error(d);
            break;
          }
          case GgmlType::Q4_0: {
            const double d = signed_max / -8;  // |d| = amax / 8
            // Values on the far side of the extreme past 7.5 steps are clamped to 7 steps.
            const bool clamped = double(xb[j]) / d > 7.5;
            bound = std::fabs(d) * (clamped ? 1.0 : 0.5) + 8 * half_rounding_error(d);
            break;
          }
          default: {
            const double d = (vmax - vmin) / 15;
            bound = d / 2 + 15 * half_rounding_error(d) + half_rounding_error(vmin);
            break;
          }
        }
        ASSERT_LE(err, bound + slack)
            << "block " << blk << " value " << j << " x=" << xb[j] << " y=" << yb[j];
      }
    }
    // Overall relative error of uniform data: about step / sqrt(12) / rms.
    const double limit = c.type == GgmlType::Q8_0 ? 0.01 : 0.1;
    if (c.lo < 0 && c.hi > 0) {
      EXPECT_LT(test::relative_error(y, x), limit);
    }
  }
}

TEST(QuantErrorBounds, Q8_0StaysInsideInt8AndF16IsElementwise) {
  const std::vector<float> x = test::random_floats(32 * 16, 99, -10.0f, 10.0f);
  const std::vector<uint8_t> q = quantize_matrix(GgmlType::Q8_0, x, 32 * 16);
  for (size_t blk = 0; blk < 16; ++blk) {
    bool has_127 = false;
    for (size_t j = 0; j < 32; ++j) {
      const int8_t v = int8_t(q[blk * 34 + 2 + j]);
      EXPECT_NE(v, -128);
      has_127 |= v == 127 || v == -127;
    }
    EXPECT_TRUE(has_127) << "the extreme value maps to +-127";
  }
  const std::vector<uint8_t> h = quantize_matrix(GgmlType::F16, x, 8);
  ASSERT_EQ(h.size(), x.size() * 2);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(uint16_t(h[2 * i] | h[2 * i + 1] << 8), ref_rounder()(x[i]));
  }
  const std::vector<uint8_t> f = quantize_matrix(GgmlType::F32, x, 32);
  EXPECT_EQ(std::memcmp(f.data(), x.data(), f.size()), 0);
  EXPECT_EQ(dequantize_matrix(GgmlType::F32, f, 32, 16), x);
}

TEST(QuantMatrix, RejectsShapesThatDoNotFit) {
  const std::vector<float> x(96, 1.0f);
  EXPECT_THROW(quantize_matrix(GgmlType::Q4_0, x, 48), std::invalid_argument);  // not 32k
  EXPECT_THROW(quantize_matrix(GgmlType::Q8_0, x, 64), std::invalid_argument);  // 96 % 64
  EXPECT_THROW(quantize_matrix(GgmlType::F32, x, 0), std::invalid_argument);
  const std::vector<uint8_t> q(34 * 2);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, q, 32, 3), std::invalid_argument);
  EXPECT_THROW(dequantize_matrix(GgmlType::Q8_0, q, 33, 1), std::invalid_argument);
  EXPECT_EQ(dequantize_matrix(GgmlType::Q8_0, q, 64, 1).size(), 64u);
}

// Matrices of 2^20 values or more are quantized on several threads (rows in
// contiguous ranges): the bytes equal quantize_row's, row by row.
TEST(QuantMatrix, ThreadedMatricesEqualRowByRowQuantization) {
  const uint64_t n = 256, rows = 4099;
  std::vector<float> x(n * rows);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = float(int32_t(state >> 8) - (1 << 23)) / float(1 << 23);
  }
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K}) {
    SCOPED_TRACE(ggml_type_name(t));
    const std::vector<uint8_t> got = quantize_matrix(t, x, n);
    const uint64_t row_bytes = *ggml_row_bytes(t, n);
    ASSERT_EQ(got.size(), rows * row_bytes);
    std::vector<uint8_t> want(row_bytes);
    for (uint64_t r = 0; r < rows; ++r) {
      quantize_row(t, x.data() + r * n, want.data(), n);
      ASSERT_EQ(std::memcmp(got.data() + r * row_bytes, want.data(), row_bytes), 0) << "row " << r;
    }
  }
}

// ---- real tensors ---------------------------------------------------------------------------

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

// A plain decoder straight from the block definitions.
std::vector<float> ref_decode_rows(const GgufTensor& t, uint64_t first_row, uint64_t n_rows) {
  const uint64_t n = t.dims[0];
  std::vector<float> out;
  for (uint64_t r = first_row; r < first_row + n_rows; ++r) {
    switch (t.type) {
      case GgmlType::F32: {
        const uint8_t* p = t.data + r * n * 4;
        for (uint64_t i = 0; i < n; ++i) {
          const uint32_t b = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 |
                             uint32_t(p[4 * i + 2]) << 16 | uint32_t(p[4 * i + 3]) << 24;
          out.push_back(bits_to_float(b));
        }
        break;
      }
      case GgmlType::F16: {
        const uint8_t* p = t.data + r * n * 2;
        for (uint64_t i = 0; i < n; ++i) out.push_back(float(ref_half_value(le16(p + 2 * i))));
        break;
      }
      case GgmlType::Q8_0: {
        const uint8_t* p = t.data + r * (n / 32) * 34;
        for (uint64_t b = 0; b < n / 32; ++b, p += 34) {
          const float d = float(ref_half_value(le16(p)));
          for (int j = 0; j < 32; ++j) out.push_back(float(int8_t(p[2 + j])) * d);
        }
        break;
      }
      case GgmlType::Q4_1:
      case GgmlType::Q4_0: {
        const bool q41 = t.type == GgmlType::Q4_1;
        const int block = q41 ? 20 : 18;
        const uint8_t* p = t.data + r * (n / 32) * uint64_t(block);
        for (uint64_t b = 0; b < n / 32; ++b, p += block) {
          const float d = float(ref_half_value(le16(p)));
          const float m = q41 ? float(ref_half_value(le16(p + 2))) : 0.0f;
          const uint8_t* qs = p + (q41 ? 4 : 2);
          float vals[32];
          for (int j = 0; j < 16; ++j) {
            const int lo = qs[j] & 0xf, hi = qs[j] >> 4;
            vals[j] = q41 ? float(lo) * d + m : float(lo - 8) * d;
            vals[j + 16] = q41 ? float(hi) * d + m : float(hi - 8) * d;
          }
          out.insert(out.end(), vals, vals + 32);
        }
        break;
      }
      default:  // the other types: tests/gguf/test_quant_vectors.cpp (the gguf package's values)
        ADD_FAILURE() << "no plain decoder for " << ggml_type_name(t.type);
        return out;
    }
  }
  return out;
}

void expect_rows_decode_like_reference(const GgufFile& f, const std::string& name, GgmlType type,
                                       uint64_t first_row, uint64_t n_rows) {
  SCOPED_TRACE(name);
  const GgufTensor* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, type);
  ASSERT_LE(first_row + n_rows, t->n_rows());
  const uint64_t row_bytes = *ggml_row_bytes(t->type, t->dims[0]);
  const std::vector<float> got = dequantize_matrix(
      t->type, std::span<const uint8_t>(t->data + first_row * row_bytes, n_rows * row_bytes),
      t->dims[0], n_rows);
  const std::vector<float> want = ref_decode_rows(*t, first_row, n_rows);
  ASSERT_EQ(got.size(), want.size());
  size_t n_nonzero = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "value " << i;
    ASSERT_TRUE(std::isfinite(got[i])) << "value " << i;
    n_nonzero += got[i] != 0.0f;
  }
  EXPECT_GT(n_nonzero, got.size() / 2) << "real weights are mostly non-zero";
}

TEST(QuantRealTensors, SmolLM2DequantizesLikeThePlainDecoder) {
  const auto f = GgufFile::open(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
  expect_rows_decode_like_reference(*f, "token_embd.weight", GgmlType::Q8_0, 0, 256);
  expect_rows_decode_like_reference(*f, "token_embd.weight", GgmlType::Q8_0, 49152 - 64, 64);
  expect_rows_decode_like_reference(*f, "blk.0.attn_q.weight", GgmlType::Q4_1, 0, 576);
  expect_rows_decode_like_reference(*f, "blk.0.attn_k.weight", GgmlType::Q4_1, 0, 192);
  expect_rows_decode_like_reference(*f, "blk.29.ffn_down.weight", GgmlType::Q4_1, 500, 76);
  expect_rows_decode_like_reference(*f, "output_norm.weight", GgmlType::F32, 0, 1);
}

TEST(QuantRealTensors, SmallModelsDequantizeLikeThePlainDecoder) {
  const auto tiny = GgufFile::open(test::shared_file("models/llama-2-tiny-random.gguf"));
  expect_rows_decode_like_reference(*tiny, "token_embd.weight", GgmlType::F16, 0, 32000);
  expect_rows_decode_like_reference(*tiny, "blk.0.ffn_down.weight", GgmlType::F16, 0, 8);
  const auto stories = GgufFile::open(test::shared_file("models/stories260K.gguf"));
  expect_rows_decode_like_reference(*stories, "blk.0.ffn_down.weight", GgmlType::F32, 0, 64);
}

}  // namespace
}  // namespace clchat
