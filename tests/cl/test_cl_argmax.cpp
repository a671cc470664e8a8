// kernels/argmax.cl and, on a CPU device, argmax_cpu.cl (argmax_partial +
// argmax_final) on the CPU OpenCL device (PoCL) against cpu::argmax: NaN never
// wins, +inf does, ties go to the lowest index, an all-NaN input gives 0. Vocabulary sizes 1 ..
// 49153 (around the work-group sizes, and the models' 512, 32000 and 49152), with work-groups of 64
// and 256 items and 1, 7, 256 and the engine's number of partial groups (more groups than values
// leaves some chunks empty). For the crafted inputs whose answer is known (max last, all NaN, ...)
// the test first checks cpu::argmax itself against that answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

struct Input {
  std::string name;
  std::vector<float> x;
  int known = -1;  // the answer when it is known independently; -1: not given
};

// The crafted inputs for a vector of n values.
std::vector<Input> inputs(int n) {
  const size_t un = size_t(n);
  const auto random = [&](uint32_t seed) { return test::random_floats(un, seed); };
  std::vector<Input> in;
  in.push_back({"random", random(1)});
  in.push_back({"random_large_magnitude", test::random_floats(un, 2, -1e30f, 1e30f)});
  in.push_back({"all_equal", std::vector<float>(un, 0.5f), 0});
  {
    auto x = random(3);
    x[0] = 2.0f;
    in.push_back({"max_first", x, 0});
  }
  {
    auto x = random(4);
    x[un - 1] = 2.0f;
    in.push_back({"max_last", x, n - 1});
  }
  {
    auto x = random(5);
    x[0] = k_nan;
    in.push_back({"nan_first", x});
  }
  {
    auto x = random(6);
    x[un - 1] = k_nan;
    in.push_back({"nan_last", x});
  }
  {  // NaN at every third index, the largest value between them
    auto x = random(7);
    for (size_t i = 0; i < un; i += 3) x[i] = k_nan;
    in.push_back({"nan_every_third", x});
    if (n >= 3) {
      x[un / 3 * 3 - 2] = 3.0f;
      in.push_back({"nan_around_max", x, n / 3 * 3 - 2});
    }
  }
  in.push_back({"all_nan", std::vector<float>(un, k_nan), 0});
  {
    auto x = random(8);
    x[un * 2 / 3] = k_inf;
    x[un / 3] = std::numeric_limits<float>::max();
    in.push_back({"pos_inf_wins", x, int(un * 2 / 3)});  // n == 1: both at 0
  }
  {
    auto x = random(9);
    x[un - 1] = k_inf;
    x[un / 2] = k_inf;
    in.push_back({"two_pos_inf_lowest_wins", x, n / 2});
  }
  in.push_back({"neg_inf_only", std::vector<float>(un, -k_inf), 0});
  {
    std::vector<float> x(un, -k_inf);
    x[0] = k_nan;
    in.push_back({"nan_then_neg_inf", x, n >= 2 ? 1 : 0});
  }
  {  // three equal maxima, in different partial groups for large n
    auto x = test::random_floats(un, 10, -1.0f, 0.0f);
    for (size_t i : {un - 1, un / 2 + 1, un / 3}) x[std::min(i, un - 1)] = 1.0f;
    in.push_back({"ties_lowest_wins", x, n >= 4 ? n / 3 : -1});
  }
  {  // equal maxima at the start of every 64-value block
    auto x = test::random_floats(un, 11, -1.0f, 0.0f);
    for (size_t i = 0; i < un; i += 64) x[i] = 0.25f;
    in.push_back({"ties_every_block", x, 0});
  }
  return in;
}

// (work-group size, partial groups) pairs for n values.
std::vector<std::pair<int, int>> configs(int n) {
  std::vector<std::pair<int, int>> c;
  for (int wg : {64, 256}) {
    const int engine_groups = std::clamp(n / (wg * 4), 1, 256);  // ClForward::build_plan
    for (int groups : {engine_groups, 1, 7, 256}) {
      if (std::find(c.begin(), c.end(), std::make_pair(wg, groups)) == c.end()) {
        c.emplace_back(wg, groups);
      }
    }
  }
  return c;
}

// Both stages, as the engine enqueues them; returns out[0] and checks that
// nothing else in the output was written.
int32_t device_argmax(const std::vector<float>& x, const KernelTuning& variant, int wg,
                      int groups) {
  KernelTuning t = variant;
  t.argmax_wg = wg;
  ClPrograms& programs = test::cl_programs(t);
  const ClKernel partial = programs.argmax_kernel("argmax_partial");
  const ClKernel final_stage = programs.argmax_kernel("argmax_final");
  const ClMem x_dev = test::cl_buffer(x);
  const ClMem part_val = test::cl_buffer(std::vector<float>(size_t(groups), k_nan));
  const ClMem part_idx = test::cl_buffer(std::vector<int32_t>(size_t(groups), -7));
  const ClMem out = test::cl_buffer(std::vector<int32_t>(4, -7));
  const int n = int(x.size());
  const int chunk = (n + groups - 1) / groups;
  set_args(partial, x_dev, cl_int(n), cl_int(chunk), part_val, part_idx);
  test::cl_run(partial, size_t(groups) * size_t(wg), size_t(wg));
  set_args(final_stage, part_val, part_idx, cl_int(groups), out);
  test::cl_run(final_stage, size_t(wg), size_t(wg));
  const auto got = test::cl_read<int32_t>(out, 4);
  EXPECT_EQ(got[1], -7);
  EXPECT_EQ(got[2], -7);
  EXPECT_EQ(got[3], -7);
  return got[0];
}

class ClArgmax : public testing::TestWithParam<int> {};

TEST_P(ClArgmax, MatchesCpuArgmaxOnEdgeCases) {
  const int n = GetParam();
  for (const Input& in : inputs(n)) {
    SCOPED_TRACE(in.name);
    const int32_t expected = cpu::argmax(in.x);
    if (in.known >= 0) {
      ASSERT_EQ(expected, in.known) << "cpu::argmax disagrees with the case";
    }
    for (const KernelTuning& variant : test::kernel_variants()) {
      for (const auto& [wg, groups] : configs(n)) {
        EXPECT_EQ(device_argmax(in.x, variant, wg, groups), expected)
            << "work-group " << wg << ", " << groups << " partial groups, "
            << test::describe(variant);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ClArgmax,
                         testing::Values(1, 2, 31, 255, 256, 257, 1000, 32000, 49152, 49153),
                         [](const testing::TestParamInfo<int>& info) {
                           // Appending, not "n" + to_string(): GCC 12 at -O3 reports a
                           // false -Wrestrict for the latter.
                           std::string name = "n";
                           name += std::to_string(info.param);
                           return name;
                         });

}  // namespace
}  // namespace clchat
