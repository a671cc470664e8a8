// kernels/quant_blocks.cl's QT_QB / QT_SB (payload and record bytes per block
// of 32, which every kernel's addressing uses) against the host's
// device_q_bytes / device_s_bytes (engine/cl/block_layout.h, which lays the
// blocks out), for every supported quantized type: the two tables are written
// in two languages and must not drift apart. Also the types that change on
// their way to a device: Q5_0 as Q8_0 on CPU devices (the same values), Q4_K
// and Q5_K as Q4_1 and Q5_1 (the same codes, scales rounded once to fp16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cl/block_layout.h"
#include "engine/cl/programs.h"
#include "engine/cl/weights.h"
#include "engine/gguf/kquant_scales.h"
#include "engine/gguf/quant.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

constexpr const char* k_probe = R"(
__kernel void block_bytes(__global const int* types, __global int* out) {
  const int i = get_global_id(0);
  out[2 * i] = QT_QB(types[i]);
  out[2 * i + 1] = QT_SB(types[i]);
}
)";

TEST(ClBlockLayout, KernelBlockBytesMatchTheHostLayout) {
  std::vector<int32_t> types;
  for (GgmlType t : ggml_supported_types()) {
    if (ggml_is_quantized(t)) types.push_back(int32_t(t));
  }
  ASSERT_GE(types.size(), 12u);
  const ClRuntime& rt = test::cl_test_runtime();
  const ClProgram program =
      rt.build_program("block_layout_probe", kernel_source("quant_blocks") + k_probe, "");
  const ClKernel k = rt.create_kernel(program, "block_bytes");
  const ClMem types_dev = test::cl_buffer(types);
  const ClMem out = rt.alloc(types.size() * 2 * 4);
  test::cl_poison(out, types.size() * 2);
  set_args(k, types_dev, out);
  test::cl_run(k, types.size(), 0);
  const auto got = test::cl_read<int32_t>(out, types.size() * 2);
  for (size_t i = 0; i < types.size(); ++i) {
    const auto t = GgmlType(types[i]);
    SCOPED_TRACE(ggml_type_name(t));
    EXPECT_EQ(got[2 * i], device_q_bytes(t));
    EXPECT_EQ(got[2 * i + 1], device_s_bytes(t));
  }
}

TEST(ClBlockLayout, DeviceTypesChangeOnlyQ4_KQ5_KAndQ5_0OnCpuDevices) {
  for (GgmlType t : ggml_supported_types()) {
    SCOPED_TRACE(ggml_type_name(t));
    const GgmlType legacy = t == GgmlType::Q4_K   ? GgmlType::Q4_1
                            : t == GgmlType::Q5_K ? GgmlType::Q5_1
                                                  : t;
    EXPECT_EQ(device_type(t, false), legacy);
    EXPECT_EQ(device_type(t, true), t == GgmlType::Q5_0 ? GgmlType::Q8_0 : legacy);
  }
}

// Random K-quant super-blocks (every byte random, so every 6-bit scale and
// minimum and every code occurs; d and dmin from a list with subnormal, zero,
// negative and large values): each value of the Q4_1 / Q5_1 blocks is within
// 2^-11 of the float scale times the code plus 2^-11 of the minimum (one
// rounding each); a group's scale that rounds to a subnormal is exact.
TEST(ClBlockLayout, KQuantAsLegacyRoundsEachGroupScaleOnce) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    SCOPED_TRACE(ggml_type_name(t));
    const bool q5 = t == GgmlType::Q5_K;
    const size_t n_super = 96, block = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    std::mt19937 rng(11);
    std::vector<uint8_t> raw(n_super * block);
    for (uint8_t& b : raw) b = uint8_t(rng());
    const uint16_t ds[] = {0x3c00, 0xbc00, 0x0001, 0x0000, 0x03ff, 0x2e66, 0x1400, 0x5800};
    for (size_t i = 0; i < n_super; ++i) {
      std::memcpy(&raw[i * block], &ds[i % 8], 2);
      std::memcpy(&raw[i * block + 2], &ds[(i / 8 + 3 * i) % 8], 2);
    }
    const std::vector<uint8_t> legacy = k_quant_as_legacy(t, raw.data(), n_super);
    const GgmlType lt = q5 ? GgmlType::Q5_1 : GgmlType::Q4_1;
    ASSERT_EQ(legacy.size(), n_super * 8 * size_t(ggml_block_bytes(lt)));
    const uint64_t n = n_super * 256;
    const std::vector<float> want = dequantize_matrix(t, raw, n, 1);
    const std::vector<float> got = dequantize_matrix(lt, legacy, n, 1);
    int rounded = 0;
    for (size_t i = 0; i < n_super; ++i) {
      uint16_t hd, hdmin;
      std::memcpy(&hd, &raw[i * block], 2);
      std::memcpy(&hdmin, &raw[i * block + 2], 2);
      const uint8_t* scales = &raw[i * block + 4];
      for (int g = 0; g < 8; ++g) {
        int sc, m;
        k4_scale_min(scales, g, &sc, &m);
        const double s = double(fp16_to_fp32(hd)) * sc, mn = double(fp16_to_fp32(hdmin)) * m;
        const double tol = std::ldexp(1.0, -11) * (std::abs(s) * (q5 ? 31 : 15) + std::abs(mn));
        for (int l = 0; l < 32; ++l) {
          const size_t v = i * 256 + size_t(g) * 32 + size_t(l);
          ASSERT_LE(std::abs(double(got[v]) - double(want[v])), tol) << "value " << v;
          rounded += got[v] != want[v];
        }
      }
    }
    EXPECT_GT(rounded, 0);  // the list's 0x2e66 scales do not fit fp16 exactly
  }
}

// A scale beyond fp16 (65504 x 63): k_quant_as_legacy refuses the block and
// repack_for_device keeps the matrix in its own type (float records), with
// the same values as the file; without it the matrix becomes Q4_1.
TEST(ClBlockLayout, ScalesBeyondFp16KeepTheExactLayout) {
  std::vector<BlockQ4_K> rows(4);  // 2 rows of 512
  std::mt19937 rng(5);
  for (BlockQ4_K& b : rows) {
    for (uint8_t& q : b.qs) q = uint8_t(rng());
    for (uint8_t& s : b.scales) s = uint8_t(rng());
    b.d = 0x2e66;
    b.dmin = 0x2400;
  }
  const auto* raw = reinterpret_cast<const uint8_t*>(rows.data());
  EXPECT_EQ(repack_for_device(GgmlType::Q4_K, raw, 512, 2, false).type, GgmlType::Q4_1);
  rows[3].d = 0x7bff;  // 65504
  rows[3].scales[0] = 63;
  EXPECT_THROW(k_quant_as_legacy(GgmlType::Q4_K, raw, 4), std::range_error);
  for (bool cpu : {false, true}) {
    const RepackedMatrix m = repack_for_device(GgmlType::Q4_K, raw, 512, 2, cpu);
    EXPECT_EQ(m.type, GgmlType::Q4_K);
    std::vector<uint8_t> q, s;
    repack_rows(GgmlType::Q4_K, raw, 512, 2, q, s);
    EXPECT_EQ(m.q, q);
    EXPECT_EQ(m.s, s);
  }
}

// Every code 0..31 in both halves of a block, both fifth-bit values, signed
// and unsigned scales, subnormal and zero d: the Q8_0 blocks dequantize to the
// Q5_0 blocks' values exactly.
TEST(ClBlockLayout, Q5_0AsQ8_0KeepsEveryValue) {
  const uint64_t n = 32 * 64;
  std::mt19937 rng(7);
  std::vector<uint8_t> q5(n / 32 * sizeof(BlockQ5_0));
  for (uint8_t& b : q5) b = uint8_t(rng());
  const uint16_t scales[] = {0x3c00, 0xbc00, 0x0001, 0x0000, 0x7bff, 0x2e66};
  for (size_t i = 0; i < n / 32; ++i) {
    std::memcpy(&q5[i * sizeof(BlockQ5_0)], &scales[i % 6], 2);
  }
  const std::vector<uint8_t> q8 = q5_0_as_q8_0(q5.data(), n / 32);
  ASSERT_EQ(q8.size(), n / 32 * sizeof(BlockQ8_0));
  const std::vector<float> want = dequantize_matrix(GgmlType::Q5_0, q5, n, 1);
  const std::vector<float> got = dequantize_matrix(GgmlType::Q8_0, q8, n, 1);
  int codes_seen[32] = {};
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], want[i]) << "value " << i;
    codes_seen[reinterpret_cast<const BlockQ8_0*>(&q8[i / 32 * sizeof(BlockQ8_0)])->qs[i % 32] +
               16]++;
  }
  for (int c = 0; c < 32; ++c) EXPECT_GT(codes_seen[c], 0) << "code " << c;
}

}  // namespace
}  // namespace clchat
