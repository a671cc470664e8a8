// kernels/quant_blocks.cl's QT_QB / QT_SB (payload and record bytes per block
// of 32, which every kernel's addressing uses) against the host's
// device_q_bytes / device_s_bytes (engine/cl/block_layout.h, which lays the
// blocks out), for every supported quantized type: the two tables are written
// in two languages and must not drift apart.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cl/block_layout.h"
#include "engine/cl/programs.h"
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

}  // namespace
}  // namespace clchat
