// Token selection from logits: repeat, frequency and presence penalties,
// top-k, temperature, top-p (nucleus) and min-p, then a draw from a
// counter-based random stream (sample_uniform: splitmix64 of the seed and the
// draw number), so the same seed and the same logits give the same tokens.
//
// This is the reference of the device's chain (kernels/sample.cl,
// engine/cl/device_sampler.h), which computes the same numbers bit for bit:
// the softmax uses sampler_exp() rather than std::exp (whose last bit
// differs between libraries), the sums run in a fixed order in double, and
// this file is compiled with -ffp-contract=off. Change both together.
//
// The draw counter: the n-th token a Sampler draws since its last reseed uses
// draw number n (a greedy choice counts too), so `/regen` continues the
// stream (a new reply) and reseed() (set_params, a cleared conversation)
// starts it again.
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
// p = softmax(logit / temperature) over the candidates (temperature > 0),
// through sampler_exp. A candidate equal to the largest counts as exp(0),
// so +inf logits share the mass (and all -inf ones too).
void softmax_candidates(std::vector<Candidate>& c, float temperature);
// Keeps the smallest prefix whose probability mass reaches `top_p` (Holtzman
// et al. 2019, "The Curious Case of Neural Text Degeneration"); >= 1: off.
void top_p_filter(std::vector<Candidate>& c, float top_p);
// Keeps candidates with p >= min_p * p_max (the min-p rule of Nguyen et al.
// 2024, "Turning Up the Heat: Min-p Sampling"; the product in double); <= 0:
// off.
void min_p_filter(std::vector<Candidate>& c, float min_p);

// exp(d) for d <= 0 from + - * only (2^n times a degree-11 Taylor polynomial
// after Cody and Waite's reduction), so the device computes the same bits
// (kernels/sample.cl keeps a copy); 0 below -87 and for NaN.
double sampler_exp(double d);

// The random stream: splitmix64 (Steele, Lea and Flood 2014) read as a
// counter-based hash: the (draw+1)-th output of the generator seeded with
// `seed`, mix(seed + (draw + 1) * 0x9E3779B97F4A7C15).
uint64_t sample_random_bits(uint64_t seed, uint64_t draw);
// Its top 53 bits as a double in [0, 1).
double sample_uniform(uint64_t seed, uint64_t draw);

// The whole chain for one token: `recent` are the context's last tokens (the
// penalties look at their last repeat_last_n; -1: all of them), `draw` the
// draw number. Greedy parameters give the argmax of the penalised logits.
// `scratch` holds the penalised copy of the logits.
int32_t sample_token(const SamplingParams& params, std::span<const float> logits,
                     std::span<const int32_t> recent, uint64_t draw, std::vector<float>& scratch);

// Whether the device chain (kernels/sample.cl) runs `params`: top_k in
// 1..k_device_top_k_max (or greedy), and penalties, if any, over at most
// k_device_window_max recent tokens (repeat_last_n -1, the whole context,
// stays on the host). Others run on the host (decode_logits + sample_token).
inline constexpr int k_device_top_k_max = 256;
inline constexpr int k_device_window_max = 1024;
bool device_samplable(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params = {});
  // New parameters; restarts the random stream (reseed()).
  void set_params(const SamplingParams& params);
  const SamplingParams& params() const { return params_; }
  // Restarts the random stream: the next draw is number 0 of params().seed.
  void reseed() { draws_ = 0; }
  // The draw number of the next token, counted as drawn (for a caller that
  // draws elsewhere, e.g. on the device: Backend::decode_sample).
  uint64_t take_draw() { return draws_++; }
  // Tokens drawn since the last reseed, and going back to such a count (a
  // failed turn is undone as if never sent: its draws too).
  uint64_t draws() const { return draws_; }
  void set_draws(uint64_t n) { draws_ = n; }

  // The next token: sample_token() with the next draw number.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> recent);

 private:
  SamplingParams params_;
  uint64_t draws_ = 0;  // tokens drawn since the last reseed
  std::vector<float> scratch_;
};

}  // namespace clchat
