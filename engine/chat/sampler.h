// Token selection from logits read back to the host: repeat, frequency and
// presence penalties, top-k,
// temperature, top-p (nucleus) and min-p, then a draw from a seeded
// std::mt19937_64, so the same seed and the same logits give the same tokens.
//
// The greedy default never comes here: the device computes the argmax and the
// host reads back 4 bytes (Backend::decode_argmax). argmax() below is the
// host equivalent, used when the logits are on the host anyway.
//
// Order of the chain (as llama.cpp's default sampler chain orders the same
// steps): penalties -> top-k -> softmax at the temperature -> top-p -> min-p ->
// renormalise -> draw. Each filter keeps at least one candidate.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/messages.h"

namespace clchat {

struct Candidate {
  int32_t id = 0;
  float logit = 0;
  float p = 0;  // probability, valid after softmax_candidates()
};

// Index of the largest logit; ties go to the lower id, NaN never wins.
int32_t argmax(std::span<const float> logits);

// CTRL's repetition penalty (Keskar et al. 2019, "CTRL", section 4.1) in the
// sign-aware form llama.cpp applies: a logit of a token seen in `recent` is
// divided by `penalty` when positive and multiplied by it when negative.
// Each distinct id is penalised once however often it occurs.
void apply_repeat_penalty(std::span<float> logits, std::span<const int32_t> recent, float penalty);

// OpenAI's frequency and presence penalties (as llama.cpp applies them): a
// token seen c > 0 times in `recent` loses c * frequency + presence.
void apply_frequency_presence(std::span<float> logits, std::span<const int32_t> recent,
                              float frequency, float presence);

// All ids with their logits, sorted by logit (highest first, ties: lower id).
std::vector<Candidate> sorted_candidates(std::span<const float> logits);
// Keeps the k best (k <= 0: all). `c` must be sorted.
void top_k_filter(std::vector<Candidate>& c, int k);
// p = softmax(logit / temperature) over the candidates (temperature > 0).
void softmax_candidates(std::vector<Candidate>& c, float temperature);
// Keeps the smallest prefix whose probability mass reaches `top_p` (Holtzman
// et al. 2019, "The Curious Case of Neural Text Degeneration"); >= 1: off.
void top_p_filter(std::vector<Candidate>& c, float top_p);
// Keeps candidates with p >= min_p * p_max (the min-p rule of Nguyen et al.
// 2024, "Turning Up the Heat: Min-p Sampling"); <= 0: off.
void min_p_filter(std::vector<Candidate>& c, float min_p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params = {});
  // New parameters; reseeds the generator with params.seed.
  void set_params(const SamplingParams& params);
  const SamplingParams& params() const { return params_; }
  // Restarts the random sequence from the seed.
  void reseed();

  // The next token. `recent` are the context's last tokens (the penalty looks
  // at its last repeat_last_n). Greedy parameters give argmax().
  int32_t sample(std::span<const float> logits, std::span<const int32_t> recent);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
};

}  // namespace clchat
