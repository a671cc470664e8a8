// kernels/cpu_dot.cl's decode dot products on 16-bit activations (the CPU
// persistent decode kernel's rows_dot_x16, with x16_quantize making x's
// 16-bit form) for every block type they take: Q4_0, Q4_1, Q5_1, Q8_0 (and
// Q5_0, which CPU devices store as Q8_0), Q4_K, Q5_K (in their exact layout,
// which a model keeps only where a scale exceeds fp16; else Q4_1 / Q5_1) and
// Q6_K, on random weights, against float64 references:
//   - with the activations as test::sixteen_bit quantizes them (groups of
//     32, written from the rule): only float32 accumulation is left, <= 1e-5;
//   - with the float activations: <= 1e-3, the matvec tests' tolerance for
//     quantized weights.
// Row lengths with an odd number of blocks and row counts that are not a
// multiple of the rows per work-item; the device's NR, NR 2, and the portable
// code (-DCPU_PORTABLE=1, no x86 builtins). Outputs are poisoned with NaN, and
// the floats past the end must stay NaN. A test kernel here drives the two
// functions; skipped on devices without the CPU kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cl/block_layout.h"
#include "engine/cl/programs.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

// One work-item: x -> its 16-bit form in xq, then every row, NR at a time.
constexpr const char* k_test_kernel = R"CLC(
__kernel void x16_rows(const __global float* x, int n_in, int n_rows, __global uchar* xq,
                       const __global uchar* wq, const __global ushort* ws,
                       __global float* out) {
  const X16 x16 = x16_quantize(x, 0, 1.0f, n_in, xq);
  float dots[NR];
  for (int row0 = 0; row0 < n_rows; row0 += NR) {
    rows_dot_x16(WT, wq, ws, n_in, row0, n_rows, x16, dots);
    for (int r = 0; r < NR && row0 + r < n_rows; ++r) out[row0 + r] = dots[r];
  }
}
)CLC";

struct X16Case {
  GgmlType type;
  int n_in, rows;
};
void PrintTo(const X16Case& c, std::ostream* os) {
  *os << ggml_type_name(c.type) << " " << c.n_in << "x" << c.rows;
}

std::vector<X16Case> x16_cases() {
  std::vector<X16Case> cases;
  for (GgmlType t :
       {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
    cases.push_back({t, 576, 61});  // 18 blocks a row
    cases.push_back({t, 96, 7});    // 3 blocks: an odd count
  }
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    cases.push_back({t, 256, 9});
    cases.push_back({t, 1536, 30});
  }
  return cases;
}

// The test kernel for a device type and build variant, built once.
ClKernel x16_kernel(GgmlType device_type, int nr, bool portable) {
  static std::map<std::string, ClProgram> programs;
  const ClRuntime& rt = test::cl_test_runtime();
  const std::string defines = " -DWT=" + std::to_string(int(device_type)) +
                              " -DNR=" + std::to_string(nr) + (portable ? " -DCPU_PORTABLE=1" : "");
  auto& p = programs[defines];
  if (!p) {
    const KernelTuning device = KernelTuning::for_device(rt.device());
    p = rt.build_program("quant_blocks+cpu_dot+x16_rows",
                         kernel_source("quant_blocks+cpu_dot") + "\n" + k_test_kernel,
                         device.build_options + defines);
  }
  return rt.create_kernel(p, "x16_rows");
}

class ClCpuDotX16 : public testing::TestWithParam<X16Case> {};

TEST_P(ClCpuDotX16, RowDotsMatchReferences) {
  const KernelTuning device = KernelTuning::for_device(test::cl_test_runtime().device());
  if (!device.cpu_kernels) GTEST_SKIP() << "the CPU kernels run on CPU devices";
  const auto [type, n_in, rows] = GetParam();
  // The weights in the CPU device's layouts: Q5_0 as Q8_0 blocks, as a model
  // holds it; Q4_K and Q5_K in their own (exact) layout, which a model keeps
  // where a scale exceeds fp16 (engine/cl/weights.h: repack_for_device;
  // otherwise they are Q4_1 / Q5_1, cases of their own here).
  const GgmlType dev_type = type == GgmlType::Q5_0 ? device_type(type, true) : type;
  test::TestMatrix w = test::make_test_matrix(type, n_in, rows, 1234 + uint32_t(type));
  if (dev_type != type) {
    const std::vector<uint8_t> as_q8 = q5_0_as_q8_0(w.bytes.data(), w.bytes.size() / 22);
    w.dev =
        upload_matrix(test::cl_test_runtime(), repack_matrix(dev_type, as_q8.data(), n_in, rows));
  }
  // Activations with the spread of a hidden state: most small, a few large.
  std::vector<float> x = test::random_floats(size_t(n_in), 99);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 40.0f;
  const std::vector<double> want_q =
      test::matvec_f64(w.values, test::sixteen_bit(x, 32), n_in, rows);
  const std::vector<double> want_x = test::matvec_f64(w.values, x, n_in, rows);

  const ClMem xb = test::cl_buffer(x);
  const ClMem xq = test::cl_test_runtime().alloc(size_t(n_in) * 4 + 4096);
  const size_t n_out = size_t(rows) + 16;
  const ClMem out = test::cl_test_runtime().alloc(n_out * 4);
  for (const auto& [nr, portable] : std::vector<std::pair<int, bool>>{
           {device.cpu_nr, false}, {2, false}, {device.cpu_nr, true}}) {
    SCOPED_TRACE("NR " + std::to_string(nr) + (portable ? " portable" : ""));
    const ClKernel k = x16_kernel(dev_type, nr, portable);
    test::cl_poison(out, n_out);
    set_args(k, xb, cl_int(n_in), cl_int(rows), xq, w.dev.q, w.dev.s, out);
    test::cl_run(k, 1, 1);
    const std::vector<float> got = test::cl_read(out, n_out);
    const std::vector<float> got_rows(got.begin(), got.begin() + rows);
    EXPECT_LE(test::relative_error(got_rows, want_q), 1e-5);
    EXPECT_LE(test::relative_error(got_rows, want_x), 1e-3);
    EXPECT_EQ(test::count_overwritten(got, size_t(rows)), 0u) << "write past the end";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ClCpuDotX16, testing::ValuesIn(x16_cases()));

}  // namespace
}  // namespace clchat
