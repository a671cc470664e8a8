// Sampling parameters for tests, spelled out in the chain's order with
// designated initializers (the rest keep SamplingParams' defaults, except
// top-p and min-p, off here):
//   test::Sampling{.temperature = 1.0f, .top_k = 20, .seed = 7}.params()
#pragma once

#include <cstdint>

#include "engine/messages.h"

namespace clchat::test {

struct Sampling {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  int max_tokens = 512;

  SamplingParams params() const {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = repeat_penalty;
    p.repeat_last_n = repeat_last_n;
    p.frequency_penalty = frequency_penalty;
    p.presence_penalty = presence_penalty;
    p.seed = seed;
    p.max_tokens = max_tokens;
    return p;
  }
};

}  // namespace clchat::test
