// The one-launch persistent decode kernels (engine/cl/persistent_decode.*): on a
// device where one is eligible (NVIDIA's OpenCL, run with
// CLCHAT_TEST_DEVICE=gpu: kernels/decode_persistent.cl; a CPU device of an
// x86-64 host, PoCL here: decode_persistent_cpu.cl), the logits of every
// position against the CPU reference for every weight type, tied and untied,
// over 300 positions (the NVIDIA kernel's warps take rounds of 4, then of 8
// positions, then its heads split); head sizes 32 to 256 in work-groups of
// 512 and 256; the ids staying the same when debug mode switches to the
// multi-kernel plan and back, through lookahead interruptions and with
// profiling; and, on CPU devices, more work-groups than worker threads
// failing the start-up barrier test (a timeout) so the plan is used. On other
// devices the path is not used and these tests skip, saying so; the
// multi-kernel plan is covered by test_cl_forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cl/forward.h"
#include "engine/cpu/forward.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

bool device_is_cpu() { return test::cl_test_runtime().device().is_cpu; }

// Where create() takes the path (given the device's default tuning).
bool persistent_expected() {
  const bool nvidia =
      test::cl_test_runtime().device().platform_name.find("NVIDIA") != std::string::npos;
#if defined(__x86_64__)
  return nvidia || device_is_cpu();
#else
  return nvidia;
#endif
}
constexpr const char* k_not_here = "no persistent decode kernel for this device";

struct PersistentCase {
  GgmlType layer_type, embd_type;
  bool tied;
};

void PrintTo(const PersistentCase& c, std::ostream* os) {
  *os << ggml_type_name(c.layer_type) << "/" << ggml_type_name(c.embd_type)
      << (c.tied ? " tied" : " untied");
}

// 128 embd, 2 layers, 4 heads, 2 KV heads (head size 32), FFN 256, vocab 512.
SyntheticSpec spec_for(const PersistentCase& c) {
  SyntheticSpec s;
  s.name = "test-persistent";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.n_ctx = 300;
  s.layer_type = c.layer_type;
  s.embd_type = c.embd_type;
  s.tied = c.tied;
  s.seed = 77 + uint64_t(c.layer_type) * 10 + uint64_t(c.embd_type) + (c.tied ? 0 : 100);
  return s;
}

// Options of n_ctx positions with the test device's tuning, `tune` applied.
ClForwardOptions options(int n_ctx, const std::function<void(DecodeTuning&)>& tune = {}) {
  ClForwardOptions o;
  o.n_ctx = n_ctx;
  o.tuning = Tuning::for_device(test::cl_test_runtime().device());
  if (tune) tune(o.tuning->decode);
  return o;
}

// Logits of the persistent path at every position 0..299 against the CPU
// reference. `reshape` may change spec_for's shape, `tune` the tuning.
void expect_logits_match_cpu(const PersistentCase& c, int token_step,
                             const std::function<void(SyntheticSpec&)>& reshape = {},
                             const std::function<void(DecodeTuning&)>& tune = {}) {
  SyntheticSpec spec = spec_for(c);
  if (reshape) reshape(spec);
  const std::string path = write_synthetic_model_tmp(spec);
  const Model model = load_model(path);
  const int n_ctx = 300;
  CpuForward cpu(model, n_ctx);
  ClForward cl(model, test::cl_test_runtime(), options(n_ctx, tune));
  ASSERT_TRUE(cl.persistent_decode()) << "see the log for why the path was not taken";
  for (int pos = 0; pos < n_ctx; ++pos) {
    const int32_t token = int32_t((1 + token_step * pos) % model.config.n_vocab);
    const std::vector<float> ref = cpu.forward(token, pos);
    const auto got = cl.decode_logits(token, pos);
    EXPECT_LE(test::relative_error(std::vector<float>(got.begin(), got.end()), ref), 1e-3)
        << "position " << pos;
  }
  EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped on the way (see the log)";
  std::filesystem::remove(path);
}

class PersistentDecodeTypes : public testing::TestWithParam<PersistentCase> {};

TEST_P(PersistentDecodeTypes, LogitsMatchCpuAtEveryPosition) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  expect_logits_match_cpu(GetParam(), 7919);
}

// Both kernels split a head's positions over work-groups (NVIDIA: past
// ATT_SPLIT_POS = 128 positions, so the test above sees 1-3 splits) or
// claims (CPU: 2 splits, or one per 64 positions: 2-5 above); at 8
// positions per split every position from 16 on uses 2..16 splits.
TEST(PersistentDecode, AttentionSplitOverWorkGroupsMatchesCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  expect_logits_match_cpu({GgmlType::Q4_0, GgmlType::Q8_0, true}, 104729, {},
                          [](DecodeTuning& t) { t.att_split_pos = 8; });
}

// Two work-groups: every stage gives a warp (NVIDIA) several rows, past the
// one it loads while waiting at the barrier, and a head one attention split
// (up to 300 positions: rounds of 8 per warp, each warp's online softmax
// over several rounds). FFN 1152 = 36
// blocks of 32, so a lane holds two blocks of each down-projection row; 2
// heads of 64 sharing one KV head.
TEST(PersistentDecode, FewWorkGroupsAndLongRowsMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  for (const GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0}) {
    SCOPED_TRACE(ggml_type_name(t));
    expect_logits_match_cpu(
        {t, GgmlType::Q8_0, true}, 7919,
        [](SyntheticSpec& s) {
          s.n_ff = 1152;
          s.n_head = 2;
          s.n_head_kv = 1;
        },
        [](DecodeTuning& d) { d.persist_groups = 2; });
  }
}

// Heads of 128 and 256 (NVIDIA: 4 or 8 dimensions per lane, 4, 2 or 1
// merge parts per dimension), in work-groups of 512 and of 256 (the CPU
// kernel ignores the work-group size).
TEST(PersistentDecode, LargeHeadsInBothWorkGroupSizesMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  for (const int pwg : {512, 256}) {
    for (const int n_head : {2, 1}) {
      SCOPED_TRACE("work-group " + std::to_string(pwg) + ", head size " +
                   std::to_string(256 / n_head));
      expect_logits_match_cpu(
          {GgmlType::Q4_0, GgmlType::Q8_0, true}, 7919,
          [n_head](SyntheticSpec& s) {
            s.n_embd = 256;
            s.n_head = n_head;
            s.n_head_kv = 1;
          },
          [pwg](DecodeTuning& d) { d.persist_wg_size = pwg; });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PersistentDecodeTypes,
                         testing::Values(PersistentCase{GgmlType::Q4_0, GgmlType::Q8_0, true},
                                         PersistentCase{GgmlType::Q4_1, GgmlType::Q8_0, true},
                                         PersistentCase{GgmlType::Q4_1, GgmlType::Q4_1, false},
                                         PersistentCase{GgmlType::Q8_0, GgmlType::F16, false},
                                         PersistentCase{GgmlType::F16, GgmlType::F16, true},
                                         PersistentCase{GgmlType::F32, GgmlType::Q4_0, false}));

// Greedy decoding with the device feeding itself, switching to the multi-kernel
// plan (debug mode) every few tokens: the ids must equal a run without the
// persistent path.
TEST(PersistentDecode, SwitchingPathsKeepsTheGreedyIds) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const std::string path =
      write_synthetic_model_tmp(spec_for({GgmlType::Q4_0, GgmlType::Q8_0, true}));
  const Model model = load_model(path);
  auto greedy = [&](bool switching) {
    ClForward cl(model, test::cl_test_runtime(), options(64));
    if (!switching) cl.set_debug(true);  // debug mode always takes the plan
    std::vector<int32_t> ids{1};
    for (int pos = 0; pos < 60; ++pos) {
      if (switching) cl.set_debug(pos % 7 == 3);
      ids.push_back(cl.decode_argmax(ids.back(), pos));
    }
    if (switching) {
      EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped (see the log)";
    }
    return ids;
  };
  EXPECT_EQ(greedy(true), greedy(false));
  std::filesystem::remove(path);
}

// Greedy decoding enqueues the next steps before the host asks for them
// (lookahead). Feeding a token other than the device's choice, asking for the
// logits, or a prefill in the middle must drop those steps and give the ids a
// plan-only run gives.
TEST(PersistentDecode, LookaheadKeepsIdsThroughInterruptions) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const std::string path =
      write_synthetic_model_tmp(spec_for({GgmlType::Q4_1, GgmlType::Q8_0, true}));
  const Model model = load_model(path);
  const int n_vocab = model.config.n_vocab;
  auto run = [&](bool plan_only) {
    ClForward cl(model, test::cl_test_runtime(), options(96));
    cl.set_debug(plan_only);  // debug mode always takes the plan
    std::vector<int32_t> ids{1};
    int pos = 0;
    while (pos < 90) {
      if (pos == 20) {
        ids.push_back(cl.decode_argmax((ids.back() + 5) % n_vocab, pos++));  // not the greedy id
      } else if (pos == 40) {
        const auto logits = cl.decode_logits(ids.back(), pos++);
        ids.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      } else if (pos == 60) {
        const std::vector<int32_t> turn{ids.back(), 7, 11, 13};
        ids.push_back(cl.prefill(turn, pos));
        pos += int(turn.size());
      } else if (pos == 70) {
        cl.settle();
        ids.push_back(cl.decode_argmax(ids.back(), pos++));
      } else {
        ids.push_back(cl.decode_argmax(ids.back(), pos++));
      }
    }
    if (!plan_only) {
      EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped (see the log)";
    }
    return ids;
  };
  EXPECT_EQ(run(false), run(true));
  std::filesystem::remove(path);
}

// The switches: persistent off keeps the plan for every step; lookahead off
// keeps the kernel, one step at a time. Both give the kernel's greedy ids.
TEST(PersistentDecode, SwitchesKeepTheGreedyIds) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const std::string path =
      write_synthetic_model_tmp(spec_for({GgmlType::Q8_0, GgmlType::Q8_0, true}));
  const Model model = load_model(path);
  auto greedy = [&](const std::function<void(DecodeTuning&)>& tune, bool want_kernel) {
    ClForward cl(model, test::cl_test_runtime(), options(64, tune));
    EXPECT_EQ(cl.persistent_decode(), want_kernel);
    EXPECT_EQ(cl.launches_per_token() == 1, want_kernel);
    std::vector<int32_t> ids{5};
    for (int pos = 0; pos < 40; ++pos) ids.push_back(cl.decode_argmax(ids.back(), pos));
    return ids;
  };
  const std::vector<int32_t> want = greedy({}, true);
  EXPECT_EQ(greedy([](DecodeTuning& d) { d.persistent = false; }, false), want);
  EXPECT_EQ(greedy([](DecodeTuning& d) { d.lookahead = false; }, true), want);
  std::filesystem::remove(path);
}

// Profiling on the persistent path reads the kernel's own clock: one launch,
// per-stage and per-layer times that add up, and the same ids as without it.
TEST(PersistentDecode, ProfilingTimesComeFromTheKernel) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const std::string path =
      write_synthetic_model_tmp(spec_for({GgmlType::Q4_0, GgmlType::Q8_0, true}));
  const Model model = load_model(path);
  ClRuntime rt(test::cl_test_runtime().device(), true);
  auto greedy = [&](bool profiling) {
    ClForward cl(model, rt, options(64));
    EXPECT_TRUE(cl.persistent_decode());
    EXPECT_EQ(cl.launches_per_token(), 1);
    std::vector<int32_t> ids{3};
    for (int pos = 0; pos < 24; ++pos) {
      cl.set_profiling(profiling && pos % 4 == 1);
      ids.push_back(cl.decode_argmax(ids.back(), pos));
      if (!profiling || pos % 4 != 1) continue;
      const ProfileReport& p = cl.profile();
      EXPECT_EQ(p.n_launches, 1);
      EXPECT_EQ(p.layer_us.size(), size_t(model.config.n_layer));
      double stages = 0, layers = 0;
      for (const auto& [name, us] : p.kernel_us) stages += us;
      for (double us : p.layer_us) {
        EXPECT_GT(us, 0.0);
        layers += us;
      }
      EXPECT_NEAR(stages, p.total_us, 1e-6 * p.total_us);
      EXPECT_GT(p.kernel_us.at("head"), 0.0);
      // The CPU kernel's embedding stage (with the wait for every work-group
      // to start) is its own entry, outside the layers.
      const double start = p.kernel_us.count("start") ? p.kernel_us.at("start") : 0.0;
      EXPECT_EQ(p.kernel_us.count("start"), device_is_cpu() ? 1u : 0u);
      EXPECT_NEAR(layers + p.kernel_us.at("head") + start, p.total_us, 1e-6 * p.total_us);
    }
    return ids;
  };
  EXPECT_EQ(greedy(true), greedy(false));
  std::filesystem::remove(path);
}

// More work-groups than can be resident: two per core on a CPU device (PoCL
// runs one per worker thread at a time), 16 per SM on NVIDIA (4096
// work-items; an SM holds at most 2048). The others never reach the
// start-up test's first barrier; the waiting groups give up after ~0.1 s
// and the forward pass keeps the multi-kernel plan, with the ids of a run
// that never tried.
TEST(PersistentDecode, GroupsThatCannotAllRunKeepThePlan) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const std::string path =
      write_synthetic_model_tmp(spec_for({GgmlType::Q4_0, GgmlType::Q8_0, true}));
  const Model model = load_model(path);
  auto greedy = [&](ClForward& cl) {
    std::vector<int32_t> ids{1};
    for (int pos = 0; pos < 20; ++pos) ids.push_back(cl.decode_argmax(ids.back(), pos));
    return ids;
  };
  ClForward fast(model, test::cl_test_runtime(), options(64));
  ASSERT_TRUE(fast.persistent_decode());
  const std::vector<int32_t> want = greedy(fast);
  {
    ClForward cl(model, test::cl_test_runtime(), options(64, [](DecodeTuning& d) {
                   d.persist_wgs_per_cu = device_is_cpu() ? 2 : 16;
                 }));
    EXPECT_FALSE(cl.persistent_decode());
    EXPECT_GT(cl.launches_per_token(), 1);
    EXPECT_EQ(greedy(cl), want);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace clchat
