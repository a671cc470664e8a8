// The CPU reference forward pass against data from independent
// implementations: stories260K's greedy ids (SOURCE.md) and SmolLM2's greedy
// ids and top logits (reference/greedy-smollm2.json, float64 NumPy).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/cpu/forward.h"
#include "engine/cpu/ops.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::vector<int32_t> greedy(CpuForward& fwd, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  int pos = 0;
  int32_t next = 0;
  for (int32_t t : prompt) next = cpu::argmax(fwd.forward(t, pos++));
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    if (i + 1 < n) next = cpu::argmax(fwd.forward(next, pos++));
  }
  return out;
}

TEST(CpuForward, Stories260KGreedyMatchesSourceMd) {
  const Model model = load_model(test::shared_file("models/stories260K.gguf"));
  CpuForward fwd(model, 128);
  // "Once upon a time" with BOS, and the 60 greedy ids listed in models/SOURCE.md.
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const std::vector<int32_t> expected = {
      432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
      337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432,
      358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337,
      335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};
  EXPECT_EQ(greedy(fwd, prompt, 60), expected);
}

TEST(CpuForward, TinyRandomF16RunsWithFiniteLogits) {
  const Model model = load_model(test::shared_file("models/llama-2-tiny-random.gguf"));
  ASSERT_EQ(model.config.n_vocab, 32000);
  CpuForward fwd(model, 16);
  for (int pos = 0; pos < 8; ++pos) {
    const auto& logits = fwd.forward(1 + pos * 7, pos);
    ASSERT_EQ(logits.size(), 32000u);
    double sum_sq = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v));
      sum_sq += double(v) * v;
    }
    EXPECT_GT(sum_sq, 0.0);
  }
}

TEST(CpuForward, RejectsOutOfRangeTokenAndPosition) {
  const Model model = load_model(test::shared_file("models/stories260K.gguf"));
  CpuForward fwd(model, 4);
  EXPECT_THROW(fwd.forward(512, 0), std::out_of_range);
  EXPECT_THROW(fwd.forward(-1, 0), std::out_of_range);
  EXPECT_THROW(fwd.forward(1, 4), std::out_of_range);
}

// Greedy ids must match up to the first position whose recorded margin (top-1
// minus top-2 logit) is below 0.05; the top-5 logits must stay close there.
// `model_path`: a full path.
void expect_greedy_matches(const std::string& model_path, const std::string& reference) {
  const Model model = load_model(model_path);
  const auto ref = nlohmann::json::parse(test::read_file(test::shared_file(reference)));
  ASSERT_GE(ref["cases"].size(), 6u);
  CpuForward fwd(model, 256);  // each case restarts at position 0
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy_ids = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = c["margins"].get<std::vector<double>>();
    size_t n_check = 0;
    while (n_check < greedy_ids.size() && margins[n_check] >= 0.05) ++n_check;
    int pos = 0;
    const std::vector<float>* logits = nullptr;
    for (int32_t t : prompt) logits = &fwd.forward(t, pos++);
    // Logits are checked one position further than ids: the near-tie
    // position's logits are still well defined.
    for (size_t i = 0; i <= n_check && i < greedy_ids.size(); ++i) {
      const auto top_ids = c["top_ids"][i].get<std::vector<int32_t>>();
      const auto top_logits = c["top_logits"][i].get<std::vector<double>>();
      for (size_t k = 0; k < top_ids.size(); ++k) {
        EXPECT_NEAR((*logits)[size_t(top_ids[k])], top_logits[k], 0.02)
            << "position " << i << " id " << top_ids[k];
      }
      if (i == n_check) break;
      ASSERT_EQ(cpu::argmax(*logits), greedy_ids[i]) << "position " << i;
      logits = &fwd.forward(greedy_ids[i], pos++);
    }
  }
}

TEST(CpuForward, SmolLM2MatchesReferenceGreedyIdsAndLogits) {
  expect_greedy_matches(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                        "reference/greedy-smollm2.json");
}

// llama-quantize's Q4_K_M of the same model: Q5_0, Q8_0, Q4_K and Q6_K tensors.
TEST(CpuForward, SmolLM2Q4KMMatchesReferenceGreedyIdsAndLogits) {
  expect_greedy_matches(test::shared_file("models/SmolLM2-135M-Instruct.Q4_K_M.gguf"),
                        "reference/smollm2-q4_k_m/greedy.json");
}

// Gemma 3 270M (gemma3: head size 256 != 640 / 4, q/k head norms, NeoX RoPE
// with two bases, post-norms, GELU, a 512-position window on 5 of 6 layers,
// a 262,144-token tied lm_head) against a float64 NumPy forward pass.
TEST(CpuForward, Gemma3MatchesReferenceGreedyIdsAndLogits) {
  const std::string path = test::gemma3_model();
  if (path.empty()) GTEST_SKIP() << test::kGemma3Missing;
  expect_greedy_matches(path, "reference/gemma3/greedy-gemma3.json");
}

}  // namespace
}  // namespace clchat
