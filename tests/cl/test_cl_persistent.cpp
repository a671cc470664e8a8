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
// failing the start-up barrier test (a timeout) so the plan is used; models
// whose layers differ in weight types (a second type per role, Q, K and V of
// different types, new types as in llama-quantize's Q4_K_M) taking the path
// and matching the reference, and those with three types in a role keeping
// the plan; llama-quantize's Q4_K_M of SmolLM2-135M against the float64
// reference's greedy ids on both paths; on NVIDIA, the other architectures'
// graphs (Qwen 2 and 3, Gemma 3). On other devices the path is not used
// and these tests skip, saying so; the multi-kernel plan is covered by
// test_cl_forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/sampler.h"
#include "engine/cl/forward.h"
#include "engine/cl/weights.h"
#include "engine/cpu/forward.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/quant.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"
#include "tests/cl/greedy_reference.h"
#include "tests/cl/sample_cases.h"
#include "tests/sampling_params.h"

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

// Logits of `model` at every position 0..n_ctx - 1 against the CPU reference,
// on the persistent path when `persistent` (asserted: one launch per token),
// else on the plan.
void expect_model_logits_match_cpu(const Model& model, int token_step, bool persistent = true,
                                   const std::function<void(DecodeTuning&)>& tune = {},
                                   int n_ctx = 300, int prefill_chunk = 512) {
  CpuForward cpu(model, n_ctx);
  ClForwardOptions o = options(n_ctx, tune);
  o.prefill_chunk = prefill_chunk;
  ClForward cl(model, test::cl_test_runtime(), o);
  ASSERT_EQ(cl.persistent_decode(), persistent) << "see the log for why (not) the path";
  ASSERT_EQ(cl.launches_per_token() == 1, persistent);
  for (int pos = 0; pos < n_ctx; ++pos) {
    const int32_t token = int32_t((1 + token_step * pos) % model.config.n_vocab);
    const std::vector<float> ref = cpu.forward(token, pos);
    const auto got = cl.decode_logits(token, pos);
    EXPECT_LE(test::relative_error(std::vector<float>(got.begin(), got.end()), ref), 1e-3)
        << "position " << pos;
  }
  EXPECT_EQ(cl.persistent_decode(), persistent) << "the path was dropped on the way (see the log)";
}

// Logits of the persistent path at every position 0..299 against the CPU
// reference. `reshape` may change spec_for's shape, `tune` the tuning.
void expect_logits_match_cpu(const PersistentCase& c, int token_step,
                             const std::function<void(SyntheticSpec&)>& reshape = {},
                             const std::function<void(DecodeTuning&)>& tune = {}) {
  SyntheticSpec spec = spec_for(c);
  if (reshape) reshape(spec);
  const std::string path = write_synthetic_model_tmp(spec);
  expect_model_logits_match_cpu(load_model(path), token_step, true, tune);
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
// (FFN 2304: three blocks a lane, so NVIDIA's held Q4_0, Q4_1 and Q8_0 rows
// keep their scales as loaded words, WORD_SCALES; 1152: two, floats.)
TEST(PersistentDecode, FewWorkGroupsAndLongRowsMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  for (const int n_ff : {1152, 2304}) {
    for (const GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
      if (n_ff == 1152 && t == GgmlType::Q4_0) continue;
      SCOPED_TRACE(std::string(ggml_type_name(t)) + ", FFN " + std::to_string(n_ff));
      expect_logits_match_cpu(
          {t, GgmlType::Q8_0, true}, 7919,
          [n_ff](SyntheticSpec& s) {
            s.n_ff = n_ff;
            s.n_head = 2;
            s.n_head_kv = 1;
          },
          [](DecodeTuning& d) { d.persist_groups = 2; });
    }
  }
}

// The NVIDIA kernel as the host builds it where a layer's weights exceed 16
// MiB (the 1B and 1.7B shapes): no L2 prefetch (L2_PREFETCH=0), on a small
// shape with two work-groups (several rows a warp in every stage). The CPU
// kernel has no such option.
TEST(PersistentDecode, WithoutL2PrefetchMatchesCpu) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  expect_logits_match_cpu({GgmlType::Q4_0, GgmlType::Q8_0, true}, 7919, {}, [](DecodeTuning& d) {
    d.persist_groups = 2;
    d.persist_defines = "-DL2_PREFETCH=0";
  });
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

// Other architectures' graphs (the persistent kernels' compile-time options;
// the CPU kernel's P1 takes whole heads): Qwen 2 (biases, NeoX), Qwen 3
// (head norms, NeoX), Phi-3 (NeoX, fused Q/K/V and gate-up tensors) and
// Gemma 3 (q wider than the embedding, head norms, post-norms, GELU, the
// embedding scale, a window of 160 positions on layers 0-4 of 6, so that
// over 300 positions the window's start moves and the heads split; with
// prefill chunks of 32 those layers keep rings of 192 rows, which positions
// 192-299 wrap), at head sizes 64 and 256 and as a Q4_K_M mix (V and down of
// two types by layer).
struct GraphCase {
  const char* name;
  const char* arch;
  int head_dim;
  int window;
  GgmlType layer_type;
  const char* mix = nullptr;
};
void PrintTo(const GraphCase& c, std::ostream* os) { *os << c.name; }

class PersistentDecodeGraphs : public testing::TestWithParam<GraphCase> {};

TEST_P(PersistentDecodeGraphs, LogitsMatchCpuAtEveryPosition) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const GraphCase& g = GetParam();
  SyntheticSpec s = spec_for({g.layer_type, GgmlType::Q8_0, true});
  s.name = std::string("test-persistent-") + g.name;
  s.arch = g.arch;
  s.head_dim = g.head_dim;
  s.sliding_window = g.window;
  s.n_layer = g.window > 0 ? 6 : 2;  // Gemma 3's pattern: layer 5 is global
  if (g.mix) s.mix = quant_mix_from_name(g.mix);
  const std::string path = write_synthetic_model_tmp(s);
  const Model model = load_model(path);
  EXPECT_EQ(model.config.arch, g.arch);
  EXPECT_FALSE(model.config.plain_llama());
  expect_model_logits_match_cpu(model, 7919, true, {}, 300, 32);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Families, PersistentDecodeGraphs,
    testing::Values(GraphCase{"qwen2", "qwen2", 0, 0, GgmlType::Q8_0},
                    GraphCase{"qwen3", "qwen3", 0, 0, GgmlType::Q5_1},
                    GraphCase{"phi3", "phi3", 0, 0, GgmlType::Q4_0},
                    GraphCase{"gemma3", "gemma3", 64, 160, GgmlType::Q5_0},
                    GraphCase{"gemma3_h256", "gemma3", 256, 160, GgmlType::Q4_0},
                    GraphCase{"gemma3_q4_k_m", "gemma3", 64, 160, GgmlType::Q5_0, "q4_k_m"}),
    [](const testing::TestParamInfo<GraphCase>& info) { return std::string(info.param.name); });

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
// plan-only run gives. On NVIDIA the host reads those ids from the kernel's
// copies at ids[n_ctx + pos % k_id_ring], on a queue of their own: a copy in
// the wrong slot gives the host another token's id.
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

// A synthetic model wide enough for the kernel's sampling chain (n_ff 1536:
// its local scratch), loaded; the file goes with it.
struct ChainModel {
  ChainModel(GgmlType layer_type, int n_vocab, int n_ctx) {
    SyntheticSpec spec = spec_for({layer_type, GgmlType::Q8_0, true});
    spec.n_ff = 1536;
    spec.n_vocab = n_vocab;
    spec.n_ctx = n_ctx;
    path = write_synthetic_model_tmp(spec);
    model = load_model(path);
  }
  ~ChainModel() { std::filesystem::remove(path); }
  std::string path;
  Model model;
};

// Tuning with the chain's candidate list capped at `cap` (SAMPLE_CAP; 0:
// the kernel's own capacity).
std::function<void(DecodeTuning&)> list_capacity(int cap) {
  return [cap](DecodeTuning& d) {
    if (cap > 0) d.persist_defines = "-DSAMPLE_CAP=" + std::to_string(cap);
  };
}

// The NVIDIA kernel's own sampling chain (decode_persistent.cl, after the
// head): at every position the id it draws is the CPU sampler's
// (engine/chat/sampler.h, the reference) on the same logits, read back from
// a greedy step of the same kernel at that position just before. Parameter
// sets: the chat's defaults, greedy with penalties, a hot top-k with a
// negative presence penalty (raising logits), and a top-k above the
// work-group count (the chain after the launch instead). `cap` lowers the
// candidate list's capacity (SAMPLE_CAP) so that its overflow path, the
// radix select over all logits, runs too. Greedy and sampled launches
// alternate, so the barrier counts of both must stay in step.
void expect_kernel_samples_as_cpu(int n_vocab, int cap) {
  const ChainModel m(GgmlType::Q4_0, n_vocab, 64);
  ClForward cl(m.model, test::cl_test_runtime(), options(64, list_capacity(cap)));
  ASSERT_TRUE(cl.persistent_decode()) << "see the log";
  struct Set {
    const char* name;
    SamplingParams p;
    bool in_kernel;
  };
  const std::vector<Set> sets = {
      {"chat_defaults",
       test::Sampling{.temperature = 0.8f,
                      .top_k = 40,
                      .top_p = 0.95f,
                      .min_p = 0.05f,
                      .repeat_penalty = 1.1f,
                      .repeat_last_n = 64,
                      .seed = 11}
           .params(),
       true},
      {"greedy_penalised",
       test::Sampling{.temperature = 0.0f, .repeat_penalty = 1.5f, .frequency_penalty = 0.4f}
           .params(),
       true},
      {"hot_negative_presence",
       test::Sampling{.temperature = 2.0f, .top_k = 24, .presence_penalty = -0.5f, .seed = 0xfeed}
           .params(),
       true},
      {"top_k_256", test::Sampling{.temperature = 1.0f, .top_k = 256, .seed = 5}.params(), false},
  };
  std::vector<float> scratch;
  for (const Set& set : sets) {
    if (set.in_kernel) {
      ASSERT_EQ(cl.sampled_launches_per_token(set.p), 1) << set.name;
    }
    const uint64_t sampled_before = cl.tokens_sampled_in_decode_kernel();
    std::vector<int32_t> context{3};
    for (int pos = 0; pos < 48; ++pos) {
      const int32_t token = context.back();
      const auto got_logits = cl.decode_logits(token, pos);
      const std::vector<float> logits(got_logits.begin(), got_logits.end());
      const uint64_t draw = uint64_t(pos) * 3 + 1;
      const int32_t want = sample_token(set.p, logits, context, draw, scratch);
      const int32_t got = cl.decode_sample(token, pos, set.p, draw, context);
      ASSERT_EQ(got, want) << set.name << ", position " << pos;
      context.push_back(got);
    }
    // Each step drew in the kernel (the steps queued ahead too), or none did.
    const uint64_t sampled = cl.tokens_sampled_in_decode_kernel() - sampled_before;
    if (set.in_kernel) {
      EXPECT_GE(sampled, 48u) << set.name;
    } else {
      EXPECT_EQ(sampled, 0u) << set.name;
    }
  }
  EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped (see the log)";
}

TEST(PersistentDecodeSampling, KernelChainMatchesTheCpuSampler) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  expect_kernel_samples_as_cpu(1000, 0);
  expect_kernel_samples_as_cpu(49152, 0);
}

TEST(PersistentDecodeSampling, OverfullCandidateListMatchesTheCpuSampler) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  expect_kernel_samples_as_cpu(4096, 8);
}

// The kernel's chain on logits of every hard kind (test_cl_sample's: ties,
// NaN, +-inf, all NaN, all -inf, signed zeros, stairs, one peak, the recent
// ids on top) with test_cl_sample's parameter sets, against the CPU
// sampler. Sets whose top-k exceeds the work-group count run the chain after
// the launch (test_cl_sample's) and are left out here. 100 ids leave
// work-groups without a row; `cap` 8 makes every list overflow into the
// radix select.
void expect_kernel_chain_on_hard_logits(int n_vocab, int cap) {
  const ChainModel m(GgmlType::Q8_0, n_vocab, 512);
  ClForward cl(m.model, test::cl_test_runtime(), options(512, list_capacity(cap)));
  ASSERT_TRUE(cl.persistent_decode()) << "see the log";
  const std::vector<std::string> kinds = {"random",  "recent_high", "ties",  "nan",
                                          "pos_inf", "neg_inf",     "zeros", "peaked",
                                          "all_nan", "all_neg_inf", "stairs"};
  std::vector<float> scratch;
  uint32_t seed = 1;
  int n_sets = 0;
  for (const test::Params& ps : test::param_sets()) {
    if (cl.sampled_launches_per_token(ps.p) != 1) continue;
    ++n_sets;
    for (const std::string& kind : kinds) {
      for (int d = 0; d < 2; ++d, ++seed) {
        std::vector<float> x = test::make_logits(kind, n_vocab, seed);
        const std::vector<int32_t> recent = test::make_recent(n_vocab, 40 + int(seed % 300), seed);
        if (kind == "recent_high") {
          for (int32_t id : recent) x[size_t(id)] = 20.0f + float(id % 5) * 0.05f;
        }
        const uint64_t draw = seed * 7u;
        const int32_t want = sample_token(ps.p, x, recent, draw, scratch);
        const int32_t got = cl.sample_in_decode_kernel(x, ps.p, draw, recent);
        ASSERT_EQ(got, want) << n_vocab << " ids, " << ps.name << ", logits " << kind << ", draw "
                             << draw;
      }
    }
  }
  EXPECT_GE(n_sets, 8) << "the parameter sets the kernel samples";
  // The decode steps after it still run (the barrier counts stayed in step).
  std::vector<int32_t> ids{1};
  for (int pos = 0; pos < 8; ++pos) ids.push_back(cl.decode_argmax(ids.back(), pos));
  EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped (see the log)";
}

TEST(PersistentDecodeSampling, KernelChainOnHardLogitsMatchesTheCpuSampler) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  for (int n_vocab : {100, 1000, 49152}) expect_kernel_chain_on_hard_logits(n_vocab, 0);
  expect_kernel_chain_on_hard_logits(1000, 8);
}

// The penalties' double steps stay exact in the kernel's fast-math build: a
// penalised logit l (l / 1.1 in double, rounded to float) tied with a
// competitor holding exactly that quotient, greedy, so the lower id must
// win; with the penalised id the lower one, then the higher one (a quotient
// off by one unit in either direction changes the pick in one of them).
TEST(PersistentDecodeSampling, PenaltyDivisionIsExact) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  const ChainModel m(GgmlType::Q8_0, 1000, 64);
  ClForward cl(m.model, test::cl_test_runtime(), options(64));
  const SamplingParams p =
      test::Sampling{.temperature = 0.0f, .repeat_penalty = 1.1f, .repeat_last_n = 8}.params();
  ASSERT_EQ(cl.sampled_launches_per_token(p), 1);
  const std::vector<float> l = test::random_floats(200, 31, 0.5f, 9.0f);
  std::vector<float> scratch;
  int n_checked = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const float quotient = float(double(l[i]) / double(1.1f));
    for (const bool penalised_lower : {true, false}) {
      const int32_t penalised = penalised_lower ? 100 : 700, other = penalised_lower ? 700 : 100;
      std::vector<float> x(1000, -10.0f);
      x[size_t(penalised)] = l[i];
      x[size_t(other)] = quotient;
      const std::vector<int32_t> recent{5, penalised, 9};
      ASSERT_EQ(sample_token(p, x, recent, 0, scratch), 100) << "the CPU's tie";
      ASSERT_EQ(cl.sample_in_decode_kernel(x, p, 0, recent), 100)
          << "l " << l[i] << ", penalised id " << penalised;
      ++n_checked;
    }
  }
  EXPECT_EQ(n_checked, 400);
}

// A sampled reply as the chat runs it: each step's id fed to the next, the
// steps enqueued ahead drawing the next numbers and the penalties reading the
// ids the kernel wrote to the history. The ids must be those of a run that
// samples each step on the host from the same kernel's logits.
TEST(PersistentDecodeSampling, LookaheadRepliesMatchTheHostSampler) {
  if (!persistent_expected() || device_is_cpu()) GTEST_SKIP() << "NVIDIA's kernel only";
  const ChainModel m(GgmlType::Q8_0, 3000, 128);
  const SamplingParams p = test::Sampling{.temperature = 1.2f,
                                          .top_k = 40,
                                          .top_p = 0.95f,
                                          .min_p = 0.02f,
                                          .repeat_penalty = 1.3f,
                                          .repeat_last_n = 16,
                                          .frequency_penalty = 0.2f,
                                          .seed = 99}
                               .params();
  auto reply = [&](bool on_host) {
    ClForward cl(m.model, test::cl_test_runtime(), options(128));
    EXPECT_EQ(cl.sampled_launches_per_token(p), 1);
    const uint64_t sampled_before = cl.tokens_sampled_in_decode_kernel();
    std::vector<int32_t> ids{7};
    std::vector<float> scratch;
    for (int pos = 0; pos < 120; ++pos) {
      const uint64_t draw = uint64_t(pos);
      if (on_host) {
        const auto l = cl.decode_logits(ids.back(), pos);
        ids.push_back(sample_token(p, std::vector<float>(l.begin(), l.end()), ids, draw, scratch));
      } else {
        ids.push_back(cl.decode_sample(ids.back(), pos, p, draw, ids));
      }
    }
    EXPECT_TRUE(cl.persistent_decode()) << "the path was dropped (see the log)";
    if (!on_host) {
      EXPECT_GE(cl.tokens_sampled_in_decode_kernel() - sampled_before, 120u);
    }
    return ids;
  };
  EXPECT_EQ(reply(false), reply(true));
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

// ---- layers of different weight types ---------------------------------------------

// A copy of the model file at `path` with the tensors named in `retype`
// (full names, "blk.1.attn_v.weight") in other types: dequantized and
// quantized again where quantize_row has a quantizer for the type, else
// random blocks (test::random_blocks: every code, scales keeping values in
// about [-1, 1]; this tree quantizes only F32, F16, Q4_0, Q4_1 and Q8_0).
// `patch`, if given, may then change any tensor's bytes (its name, type).
using TensorPatch =
    std::function<void(const std::string& name, GgmlType type, std::vector<uint8_t>& bytes)>;
std::string retyped_copy(const std::string& path, const std::map<std::string, GgmlType>& retype,
                         const TensorPatch& patch = {}) {
  const auto file = GgufFile::open(path);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.set(key, value);
  uint32_t seed = 1;
  for (const GgufTensor& t : file->tensors()) {
    const auto it = retype.find(t.name);
    const GgmlType type = it == retype.end() ? t.type : it->second;
    std::vector<uint8_t> data(t.data, t.data + t.n_bytes);
    if (type != t.type) {
      const auto values = dequantize_matrix(t.type, data, t.dims[0], t.n_rows());
      try {
        data = quantize_matrix(type, values, t.dims[0]);
      } catch (const std::invalid_argument&) {
        data = test::random_blocks(type, t.dims[0], t.n_rows(), seed++);
      }
    }
    if (patch) patch(t.name, type, data);
    w.add_tensor(t.name, type, t.dims, std::move(data));
  }
  const std::string out = path + ".retyped.gguf";
  w.write(out);
  return out;
}

// Layer il's tensor `what` ("attn_v", "ffn_down", ...).
std::string blk(int il, const std::string& what) {
  return "blk." + std::to_string(il) + "." + what + ".weight";
}

// What expect_mix_matches_cpu does beyond retyping: the path it expects
// (persistent, else the plan), a patch of the retyped bytes (retyped_copy), a
// check of the loaded model, a change of the shape before, and of the tuning.
struct MixOptions {
  bool persistent = true;
  TensorPatch patch{};
  std::function<void(const Model&)> check{};
  std::function<void(SyntheticSpec&)> reshape{};
  std::function<void(DecodeTuning&)> tune{};
};

// A synthetic model of 4 layers in `base` types (spec_for's shapes: rows of
// 128 and, for down, 256 values, so K-quants fit down only), retyped per
// tensor; logits at every position against the CPU reference.
void expect_mix_matches_cpu(GgmlType base, const std::map<std::string, GgmlType>& retype,
                            const MixOptions& o = {}) {
  SyntheticSpec spec = spec_for({base, GgmlType::Q8_0, true});
  spec.n_layer = 4;
  if (o.reshape) o.reshape(spec);
  const std::string path = write_synthetic_model_tmp(spec);
  const std::string mixed = retyped_copy(path, retype, o.patch);
  const Model model = load_model(mixed);
  if (o.check) o.check(model);
  for (const auto& [name, type] : retype) {
    const auto t = std::find_if(model.file->tensors().begin(), model.file->tensors().end(),
                                [&](const GgufTensor& x) { return x.name == name; });
    ASSERT_NE(t, model.file->tensors().end()) << name;
    ASSERT_EQ(t->type, type) << name;
  }
  expect_model_logits_match_cpu(model, 7919, o.persistent, o.tune);
  std::filesystem::remove(path);
  std::filesystem::remove(mixed);
}

// Q, K and V of three types in every layer (three matrices in the arena, no
// stacked one), Wo of another.
TEST(PersistentDecodeMixed, QkvOfThreeTypesMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  std::map<std::string, GgmlType> retype;
  for (int il = 0; il < 4; ++il) {
    retype[blk(il, "attn_k")] = GgmlType::Q8_0;
    retype[blk(il, "attn_v")] = GgmlType::F16;
    retype[blk(il, "attn_output")] = GgmlType::Q4_1;
  }
  expect_mix_matches_cpu(GgmlType::Q4_0, retype);
}

// Every role with a second type in some layers: layer 0 V Q8_0 (Q and K
// Q4_0: not stacked), layer 1 Q Q8_0 and down Q4_1, layer 2 all Q4_0 (Q, K
// and V stacked: K's and V's offsets point into the stack) with Wo F16,
// layer 3 Q, K and V all Q8_0 (stacked, each in its ALT type) with gate and
// up Q8_0.
TEST(PersistentDecodeMixed, SecondTypePerRoleMatchesCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  expect_mix_matches_cpu(GgmlType::Q4_0, {{blk(0, "attn_v"), GgmlType::Q8_0},
                                          {blk(1, "attn_q"), GgmlType::Q8_0},
                                          {blk(1, "ffn_down"), GgmlType::Q4_1},
                                          {blk(2, "attn_output"), GgmlType::F16},
                                          {blk(3, "attn_q"), GgmlType::Q8_0},
                                          {blk(3, "attn_k"), GgmlType::Q8_0},
                                          {blk(3, "attn_v"), GgmlType::Q8_0},
                                          {blk(3, "ffn_gate"), GgmlType::Q8_0},
                                          {blk(3, "ffn_up"), GgmlType::Q8_0}});
}

// llama-quantize's Q4_K_M mix: Q, K, Wo, gate and up Q5_0; V Q8_0 in some
// layers, Q5_0 in the others; down Q6_K in the same layers, Q4_K (on the
// device Q4_1) in the others; Q8_0 embedding (tied). (CPU devices store Q5_0 as Q8_0: there V
// has one type and Q, K and V are stacked; SecondTypePerRoleMatchesCpu
// covers V's second type.)
TEST(PersistentDecodeMixed, Q4KMLikeMixMatchesCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  std::map<std::string, GgmlType> retype;
  for (int il = 0; il < 4; ++il) {
    const bool more_bits = il == 0 || il == 3;
    for (const char* m : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
      retype[blk(il, m)] = GgmlType::Q5_0;
    }
    retype[blk(il, "attn_v")] = more_bits ? GgmlType::Q8_0 : GgmlType::Q5_0;
    retype[blk(il, "ffn_down")] = more_bits ? GgmlType::Q6_K : GgmlType::Q4_K;
  }
  expect_mix_matches_cpu(GgmlType::Q4_0, retype);
}

// A model whose longest row is long enough that the NVIDIA kernel reads every
// Q6_K row's top-bit words at the dot instead of holding them across a
// barrier (Q6_LATE_H: FFN 2304, three blocks a lane), and a Q6_K lm_head,
// whose rows it loads a step ahead of their dots (HEAD_PIPE): two layers,
// embedding 256, down Q6_K in layer 0 and Q4_K (on the device Q4_1) in layer
// 1, V Q6_K in layer 0, the tied embedding Q6_K. Three work-groups (48 warps
// on NVIDIA) give each warp 10 or 11 of the 512 head rows: rows handed from
// one step to the next, and a last step whose second row is past the vocab.
// (CPU devices keep their grid: a work-group per worker thread.)
TEST(PersistentDecodeMixed, Q6KLongRowsAndHeadMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  expect_mix_matches_cpu(GgmlType::Q4_0,
                         {{"token_embd.weight", GgmlType::Q6_K},
                          {blk(0, "attn_v"), GgmlType::Q6_K},
                          {blk(0, "ffn_down"), GgmlType::Q6_K},
                          {blk(1, "ffn_down"), GgmlType::Q4_K}},
                         {.reshape =
                              [](SyntheticSpec& s) {
                                s.n_layer = 2;
                                s.n_embd = 256;
                                s.n_ff = 2304;
                              },
                          .tune =
                              [](DecodeTuning& d) {
                                if (!device_is_cpu()) d.persist_groups = 3;
                              }});
}

// Rows of three blocks a lane (FFN 2304) off the 16-bit-activation path:
// an F16 V and down in layer 3 make Q/K/V and down take float inputs, so
// NVIDIA's float dots read held rows: Q4_0 Q, Q4_1 K, Q6_K V (its record
// read at the dot) and Q8_0 down with their scales as loaded words; Wo
// Q4_0 with Q4_1 in layer 1 and gate / up Q4_0 stay on the integer path.
// On 3 work-groups on NVIDIA, so that warps also load rows after the wait.
TEST(PersistentDecodeMixed, LongRowsOnFloatInputsMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  std::map<std::string, GgmlType> retype;
  for (int il = 0; il < 4; ++il) {
    retype[blk(il, "attn_k")] = GgmlType::Q4_1;
    retype[blk(il, "attn_v")] = il < 3 ? GgmlType::Q6_K : GgmlType::F16;
    retype[blk(il, "ffn_down")] = il < 3 ? GgmlType::Q8_0 : GgmlType::F16;
  }
  retype[blk(1, "attn_output")] = GgmlType::Q4_1;
  expect_mix_matches_cpu(GgmlType::Q4_0, retype,
                         {.reshape =
                              [](SyntheticSpec& s) {
                                s.n_embd = 256;
                                s.n_ff = 2304;
                              },
                          .tune =
                              [](DecodeTuning& d) {
                                if (!device_is_cpu()) d.persist_groups = 3;
                              }});
}

// The five-bit types, which the CPU kernel reads with their fifth bits from
// a table: gate, up and Wo Q5_1 in every layer, down Q5_0 in layers 0 and 1
// (on CPU devices Q8_0) and Q5_K (on the device Q5_1) in 2 and 3: a second
// type for the role.
TEST(PersistentDecodeMixed, FiveBitTypesMatchCpu) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  std::map<std::string, GgmlType> retype;
  for (int il = 0; il < 4; ++il) {
    for (const char* m : {"attn_output", "ffn_gate", "ffn_up"}) retype[blk(il, m)] = GgmlType::Q5_1;
    retype[blk(il, "ffn_down")] = il < 2 ? GgmlType::Q5_0 : GgmlType::Q5_K;
  }
  expect_mix_matches_cpu(GgmlType::Q4_0, retype);
}

// Q4_K whose scales fit fp16 becomes Q4_1 on the device; a tensor with one
// beyond it keeps the exact Q4_K layout (engine/cl/weights.h:
// repack_for_device). Down Q4_K in every layer, layer 1's first row made of
// minima only under a group scale of 65504 x 2: that layer's down stays Q4_K,
// a second type for the role next to the others' Q4_1.
TEST(PersistentDecodeMixed, KQuantScaleBeyondFp16KeepsTheExactLayout) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  std::map<std::string, GgmlType> retype;
  for (int il = 0; il < 4; ++il) retype[blk(il, "ffn_down")] = GgmlType::Q4_K;
  const TensorPatch patch = [](const std::string& name, GgmlType type, std::vector<uint8_t>& b) {
    if (name != blk(1, "ffn_down")) return;
    ASSERT_EQ(type, GgmlType::Q4_K);
    BlockQ4_K blk0{};
    blk0.d = 0x7bff;     // 65504
    blk0.dmin = 0x2000;  // 2^-7
    blk0.scales[0] = 2;  // group 0: scale 2 (d sc beyond fp16), its codes 0
    for (int g = 0; g < 4; ++g) blk0.scales[4 + g] = uint8_t(1 + g);         // minima of groups 0-3
    for (int g = 4; g < 8; ++g) blk0.scales[4 + g] = uint8_t((g - 3) << 4);  // 4-7, scale 0
    std::memcpy(b.data(), &blk0, sizeof blk0);
  };
  const auto check = [](const Model& m) {
    for (int il : {0, 1}) {
      const GgufTensor* t = m.file->find_tensor(blk(il, "ffn_down"));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(repack_tensor(*m.file, *t, test::cl_test_runtime().device().is_cpu).type,
                il == 1 ? GgmlType::Q4_K : GgmlType::Q4_1);
    }
  };
  expect_mix_matches_cpu(GgmlType::Q4_0, retype, {.patch = patch, .check = check});
}

// More than the kernels take: three types in one role. The plan decodes
// (and matches the reference).
TEST(PersistentDecodeMixed, ThreeTypesInARoleKeepThePlan) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  expect_mix_matches_cpu(GgmlType::Q4_0,
                         {{blk(1, "attn_v"), GgmlType::Q8_0}, {blk(2, "attn_v"), GgmlType::F16}},
                         {.persistent = false});
}

// llama-quantize's Q4_K_M of SmolLM2-135M (attn_v Q5_0 / Q8_0 and ffn_down
// Q4_K / Q6_K by layer) against reference/smollm2-q4_k_m/greedy.json
// (float64 NumPy forward pass): greedy ids up to each prompt's first
// position whose margin (top-1 minus top-2 logit) is below 0.05, where the
// id must be one of the two. Decode on the persistent kernel (asserted),
// then on the multi-kernel plan; prefill takes the plan in both.
TEST(PersistentDecodeMixed, SmolLM2Q4KMGreedyIdsMatchReference) {
  if (!persistent_expected()) GTEST_SKIP() << k_not_here;
  const Model model = load_model(test::shared_file("models/SmolLM2-135M-Instruct.Q4_K_M.gguf"));
  const auto ref = nlohmann::json::parse(
      test::read_file(test::shared_file("reference/smollm2-q4_k_m/greedy.json")));
  for (const bool persistent : {true, false}) {
    SCOPED_TRACE(persistent ? "persistent kernel" : "multi-kernel plan");
    ClForward cl(model, test::cl_test_runtime(),
                 options(128, [persistent](DecodeTuning& d) { d.persistent = persistent; }));
    ASSERT_EQ(cl.persistent_decode(), persistent) << "see the log for why (not) the path";
    ASSERT_EQ(cl.launches_per_token() == 1, persistent);
    test::expect_greedy_matches_reference(cl, ref);
    EXPECT_EQ(cl.persistent_decode(), persistent) << "the path was dropped (see the log)";
  }
}

}  // namespace
}  // namespace clchat
