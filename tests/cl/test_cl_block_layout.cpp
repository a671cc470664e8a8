// kernels/quant_blocks.cl's QT_QB / QT_SB (payload and record bytes per block
// of 32, which every kernel's addressing uses) against the host's
// device_q_bytes / device_s_bytes (engine/cl/block_layout.h, which lays the
// blocks out), for every supported quantized type: the two tables are written
// in two languages and must not drift apart. Also the one type that changes on
// its way to a device (Q5_0 as Q8_0 on CPU devices): the same values.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cl/block_layout.h"
#include "engine/cl/programs.h"
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

TEST(ClBlockLayout, DeviceTypeWidensOnlyQ5_0OnCpuDevices) {
  for (GgmlType t : ggml_supported_types()) {
    SCOPED_TRACE(ggml_type_name(t));
    EXPECT_EQ(device_type(t, false), t);
    EXPECT_EQ(device_type(t, true), t == GgmlType::Q5_0 ? GgmlType::Q8_0 : t);
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
