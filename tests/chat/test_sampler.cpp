// Sampler: each filter on hand-built logits whose probabilities are known
// (logit = ln p, so softmax at temperature 1 gives p back), the repeat
// penalty, seeding, and the frequencies of many draws; the random stream
// (splitmix64 read as a counter-based hash) against published values and a
// sequential generator written out here; sampler_exp against std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/chat/sampler.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)));
  return l;
}

std::vector<int32_t> ids(const std::vector<Candidate>& c) {
  std::vector<int32_t> out;
  for (const Candidate& x : c) out.push_back(x.id);
  return out;
}

SamplingParams plain_sampling(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s;  // defaults: temperature 0
  ASSERT_TRUE(s.params().greedy());
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> logits = test::random_floats(1000, seed, -5, 5);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    EXPECT_EQ(s.sample(logits, {}), int32_t(best));
  }
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, {}), 1);  // tie: the lower id
}

TEST(Sampler, ArgmaxTiesAndNaN) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN, 0.5f, NAN}), 1);
}

TEST(Sampler, TopKKeepsTheKBest) {
  std::vector<Candidate> c = sorted_candidates(std::vector<float>{1, 5, 3, 5, 2});
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 3, 2, 4, 0}));  // ties: lower id first
  top_k_filter(c, 2);
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 3}));
  top_k_filter(c, 0);  // off
  EXPECT_EQ(c.size(), 2u);
}

TEST(Sampler, SoftmaxAtTemperature) {
  std::vector<Candidate> c = sorted_candidates(log_probs({0.5, 0.25, 0.15, 0.1}));
  softmax_candidates(c, 1.0f);
  EXPECT_NEAR(c[0].p, 0.5, 1e-6);
  EXPECT_NEAR(c[3].p, 0.1, 1e-6);
  // Temperature 0.5 squares the probabilities before normalising.
  softmax_candidates(c, 0.5f);
  const double z = 0.25 + 0.0625 + 0.0225 + 0.01;
  EXPECT_NEAR(c[0].p, 0.25 / z, 1e-6);
  EXPECT_NEAR(c[2].p, 0.0225 / z, 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<float> logits = log_probs({0.1, 0.5, 0.15, 0.25});
  auto run = [&](float top_p) {
    std::vector<Candidate> c = sorted_candidates(logits);
    softmax_candidates(c, 1.0f);
    top_p_filter(c, top_p);
    return ids(c);
  };
  EXPECT_EQ(run(0.4f), (std::vector<int32_t>{1}));
  EXPECT_EQ(run(0.7f), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(run(0.8f), (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(run(1.0f), (std::vector<int32_t>{1, 3, 2, 0}));
}

TEST(Sampler, MinPKeepsThoseAboveAFractionOfTheBest) {
  const std::vector<float> logits = log_probs({0.1, 0.5, 0.15, 0.25});
  auto run = [&](float min_p) {
    std::vector<Candidate> c = sorted_candidates(logits);
    softmax_candidates(c, 1.0f);
    min_p_filter(c, min_p);
    return ids(c);
  };
  EXPECT_EQ(run(0.25f), (std::vector<int32_t>{1, 3, 2}));  // p >= 0.125
  EXPECT_EQ(run(0.4f), (std::vector<int32_t>{1, 3}));      // p >= 0.2
  EXPECT_EQ(run(0.9f), (std::vector<int32_t>{1}));
  EXPECT_EQ(run(0.0f), (std::vector<int32_t>{1, 3, 2, 0}));
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2, -2, 1, 4};
  apply_repeat_penalty(logits, std::vector<int32_t>{0, 1, 1, 7}, 2.0f);
  EXPECT_EQ(logits, (std::vector<float>{1, -4, 1, 4}));  // 1 penalised once; 7 out of range
}

TEST(Sampler, RepeatPenaltyLooksOnlyAtTheLastN) {
  SamplingParams p;  // greedy, so the result is the argmax after the penalty
  p.repeat_penalty = 10.0f;
  p.repeat_last_n = 1;
  Sampler s(p);
  const std::vector<float> logits = {5, 1, 4};
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{2, 0}), 2);  // only 0 is penalised
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0, 2}), 0);  // only 2 is
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOccurrences) {
  std::vector<float> logits = {2, -2, 1, 4};
  apply_frequency_presence(logits, std::vector<int32_t>{0, 1, 1, 7}, 0.5f, 0.25f);
  // 0 seen once: -0.75; 1 seen twice: -1.25; 2 and 3 unseen; 7 out of range.
  EXPECT_EQ(logits, (std::vector<float>{1.25f, -3.25f, 1, 4}));
}

TEST(Sampler, PresencePenaltyTurnsTheGreedyChoice) {
  SamplingParams p;  // greedy: the argmax after the penalty
  p.presence_penalty = 2.0f;
  EXPECT_TRUE(p.penalized());
  Sampler s(p);
  const std::vector<float> logits = {5, 1, 4};
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{1}), 0);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0}), 2);
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits = test::random_floats(200, 3, -2, 2);
  auto draw = [&](uint64_t seed) {
    SamplingParams p = plain_sampling(1.0f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) out.push_back(s.sample(logits, {}));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  // reseed() restarts the sequence.
  SamplingParams p = plain_sampling(1.0f);
  p.seed = 42;
  Sampler s(p);
  const int32_t first = s.sample(logits, {});
  for (int i = 0; i < 10; ++i) s.sample(logits, {});
  s.reseed();
  EXPECT_EQ(s.sample(logits, {}), first);
}

TEST(Sampler, FrequenciesFollowTheProbabilities) {
  Sampler s(plain_sampling(1.0f));
  const std::vector<float> logits = log_probs({0.2, 0.5, 0.3});
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(logits, {})];
  // Binomial sd at n = 20000 is at most 0.0036; 0.02 is > 5 sd.
  EXPECT_NEAR(count[0] / double(n), 0.2, 0.02);
  EXPECT_NEAR(count[1] / double(n), 0.5, 0.02);
  EXPECT_NEAR(count[2] / double(n), 0.3, 0.02);
}

TEST(Sampler, FiltersBoundWhatCanBeDrawn) {
  const std::vector<float> logits = log_probs({0.2, 0.5, 0.3});
  SamplingParams p = plain_sampling(1.0f);
  p.top_k = 2;  // id 0 can never come
  Sampler s(p);
  std::map<int32_t, int> count;
  for (int i = 0; i < 5000; ++i) ++count[s.sample(logits, {})];
  EXPECT_EQ(count[0], 0);
  // Renormalised over {1, 2}: 0.5 / 0.8 = 0.625.
  EXPECT_NEAR(count[1] / 5000.0, 0.625, 0.03);

  p = plain_sampling(0.01f);  // a very low temperature is nearly greedy
  Sampler cold(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(cold.sample(logits, {}), 1);
}

// The first outputs of splitmix64 seeded with 1234567, as Rosetta Code's
// "Pseudo-random numbers/Splitmix64" task publishes them.
TEST(SamplerStream, Splitmix64KnownAnswers) {
  const uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                           4593380528125082431ull, 16408922859458223821ull};
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(sample_random_bits(1234567, i), want[i]) << i;
}

// The draw-th value is the (draw+1)-th output of the sequential generator
// (Vigna's splitmix64.c: state += golden gamma, then the mix).
TEST(SamplerStream, CounterIsTheSequentialGenerator) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xFFFFFFFFFFFFFFFFull, 0x0123456789ABCDEFull}) {
    uint64_t state = seed;
    for (uint64_t draw = 0; draw < 1000; ++draw) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      ASSERT_EQ(sample_random_bits(seed, draw), z) << "seed " << seed << " draw " << draw;
      const double u = sample_uniform(seed, draw);
      ASSERT_EQ(u, std::ldexp(double(z >> 11), -53));
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
    }
  }
}

TEST(SamplerStream, DrawCounterRestartsWithReseed) {
  Sampler s(plain_sampling(1.0f));
  EXPECT_EQ(s.take_draw(), 0u);
  EXPECT_EQ(s.take_draw(), 1u);
  s.sample(std::vector<float>{0, 0}, {});  // draw 2
  EXPECT_EQ(s.take_draw(), 3u);
  s.reseed();
  EXPECT_EQ(s.take_draw(), 0u);
  s.set_params(plain_sampling(0.5f));
  EXPECT_EQ(s.take_draw(), 0u);
}

TEST(SamplerExp, AgreesWithStdExp) {
  for (double d = -87.0; d <= 0.0; d += 0.0137) {
    const double want = std::exp(d);
    ASSERT_NEAR(sampler_exp(d), want, want * 1e-14) << d;
  }
  EXPECT_EQ(sampler_exp(0.0), 1.0);
  EXPECT_EQ(sampler_exp(-87.5), 0.0);  // below float's normal range
  EXPECT_EQ(sampler_exp(-INFINITY), 0.0);
  EXPECT_EQ(sampler_exp(NAN), 0.0);
}

TEST(Sampler, InfiniteLogitsShareTheMass) {
  std::vector<Candidate> c = sorted_candidates(std::vector<float>{1, INFINITY, 3, INFINITY, NAN});
  softmax_candidates(c, 0.7f);
  ASSERT_EQ(c.size(), 4u);  // NaN is never a candidate
  EXPECT_EQ(c[0].p, 0.5f);
  EXPECT_EQ(c[1].p, 0.5f);
  EXPECT_EQ(c[2].p, 0.0f);
  std::vector<Candidate> low = sorted_candidates(std::vector<float>{-INFINITY, -INFINITY});
  softmax_candidates(low, 1.0f);
  EXPECT_EQ(low[0].p, 0.5f);
}

}  // namespace
}  // namespace clchat
