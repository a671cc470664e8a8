// Inputs of the sampling chain's tests against the CPU sampler
// (test_cl_sample: kernels/sample.cl's launch; test_cl_persistent: the same
// chain inside the NVIDIA decode kernel): logits of every hard kind, recent
// ids that repeat, and parameter sets over the chain's options.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/messages.h"
#include "tests/sampling_params.h"
#include "tests/test_support.h"

namespace clchat::test {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

// Logits of one kind for n ids.
inline std::vector<float> make_logits(const std::string& kind, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t un = size_t(n);
  std::vector<float> x = random_floats(un, seed, -6.0f, 6.0f);
  std::uniform_int_distribution<size_t> at(0, un - 1);
  if (kind == "ties") {  // a few distinct values: many equal logits, also at the top
    for (float& v : x) v = std::round(v / 2.0f) * 2.0f;
  } else if (kind == "nan") {
    for (size_t i = 0; i < un; i += 3) x[i] = k_nan;
    x[at(rng)] = k_nan;
  } else if (kind == "pos_inf") {
    x[at(rng)] = k_inf;
    x[at(rng)] = k_inf;
    x[at(rng)] = k_nan;
  } else if (kind == "neg_inf") {
    for (size_t i = 0; i < un; i += 2) x[i] = -k_inf;
  } else if (kind == "all_nan") {
    x.assign(un, k_nan);
  } else if (kind == "all_neg_inf") {
    x.assign(un, -k_inf);
  } else if (kind == "zeros") {  // +0 and -0 compare equal: ties by id
    for (size_t i = 0; i < un; ++i) x[i] = (i % 2) ? -0.0f : 0.0f;
  } else if (kind == "stairs") {
    // Falling with id / 4 modulo 256: the top values sit in a few of every
    // 1,024 ids, so any split of a chunk over work-items that goes by
    // position gives some of them all of the top values.
    for (size_t i = 0; i < un; ++i) x[i] = 10.0f - 0.01f * float(i / 4 % 256) + 0.001f * x[i];
  } else if (kind == "peaked") {  // one clear winner, the rest far below
    for (float& v : x) v -= 20.0f;
    x[at(rng)] = 10.0f;
  }
  return x;
}

// Recent tokens (positions 0..pos) drawn from few ids, so the window repeats
// ids, with some outside the vocabulary's low ids.
inline std::vector<int32_t> make_recent(int n_vocab, int pos, uint32_t seed) {
  std::mt19937 rng(seed);
  const int distinct = std::max(1, std::min(n_vocab, 24));
  std::uniform_int_distribution<int32_t> pick(0, distinct - 1);
  std::uniform_int_distribution<int32_t> any(0, n_vocab - 1);
  std::vector<int32_t> r(size_t(pos) + 1);
  for (int32_t& id : r) id = (rng() % 4 == 0) ? any(rng) : pick(rng);
  return r;
}

struct Params {
  std::string name;
  SamplingParams p;
};

inline std::vector<Params> param_sets() {
  using S = Sampling;
  std::vector<Params> out = {
      {"chat_defaults", S{.top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.1f}.params()},
      {"plain_top_k", S{.temperature = 1.0f}.params()},
      {"top_k_1", S{.temperature = 0.7f, .top_k = 1}.params()},
      {"top_k_256_hot", S{.temperature = 2.5f, .top_k = 256}.params()},
      {"top_p_only", S{.temperature = 1.2f, .top_k = 256, .top_p = 0.5f}.params()},
      {"min_p_only", S{.temperature = 1.0f, .top_k = 200, .min_p = 0.2f}.params()},
      {"cold", S{.temperature = 0.05f,
                 .top_k = 20,
                 .top_p = 0.9f,
                 .repeat_penalty = 1.3f,
                 .repeat_last_n = 16}
                   .params()},
      {"all_penalties", S{.temperature = 0.9f,
                          .top_k = 64,
                          .top_p = 0.95f,
                          .min_p = 0.05f,
                          .repeat_penalty = 1.25f,
                          .repeat_last_n = 128,
                          .frequency_penalty = 0.4f,
                          .presence_penalty = 0.6f}
                            .params()},
      {"frequency_heavy",
       S{.temperature = 1.5f, .top_k = 32, .repeat_last_n = 256, .frequency_penalty = 0.7f}
           .params()},
      {"presence_long_window",
       S{.temperature = 1.0f, .top_k = 8, .repeat_last_n = 1024, .presence_penalty = 1.5f}
           .params()},
      {"greedy_penalised", S{.temperature = 0.0f,
                             .top_p = 0.95f,
                             .min_p = 0.05f,
                             .repeat_penalty = 1.5f,
                             .frequency_penalty = 0.3f,
                             .presence_penalty = 0.2f}
                               .params()},
  };
  for (size_t i = 0; i < out.size(); ++i) out[i].p.seed = 0x5eed0000u + i;
  return out;
}

}  // namespace clchat::test
