// The sampling chain of sampler.h. Candidates are sorted once, so top-k,
// top-p and min-p are prefix cuts of the same list. Compiled with
// -ffp-contract=off (engine/CMakeLists.txt): kernels/sample.cl must find the
// same roundings.
#include "engine/chat/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "engine/cpu/ops.h"

namespace clchat {

int32_t argmax(std::span<const float> logits) { return cpu::argmax(logits); }

void apply_repeat_penalty(std::span<float> logits, std::span<const int32_t> recent, float penalty) {
  if (penalty == 1.0f || penalty <= 0.0f) return;
  std::unordered_set<int32_t> seen;
  for (int32_t id : recent) {
    if (id < 0 || size_t(id) >= logits.size() || !seen.insert(id).second) continue;
    float& l = logits[size_t(id)];
    l = l > 0 ? l / penalty : l * penalty;
  }
}

void apply_frequency_presence(std::span<float> logits, std::span<const int32_t> recent,
                              float frequency, float presence) {
  if (frequency == 0.0f && presence == 0.0f) return;
  std::unordered_map<int32_t, int> count;
  for (int32_t id : recent) {
    if (id >= 0 && size_t(id) < logits.size()) ++count[id];
  }
  for (const auto& [id, c] : count) logits[size_t(id)] -= float(c) * frequency + presence;
}

std::vector<Candidate> sorted_candidates(std::span<const float> logits) {
  std::vector<Candidate> c;
  c.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) c.push_back({int32_t(i), logits[i], 0.0f});
  }
  std::stable_sort(c.begin(), c.end(),
                   [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
  return c;
}

void top_k_filter(std::vector<Candidate>& c, int k) {
  if (k > 0 && size_t(k) < c.size()) c.resize(size_t(k));
}

double sampler_exp(double d) {
  if (!(d >= -87.0)) return 0.0;
  const double n = std::floor(d * 0x1.71547652b82fep+0 + 0.5);  // round(d / ln 2)
  const double r = (d - n * 0x1.62e42fee00000p-1) - n * 0x1.a39ef35793c76p-33;
  // 1/k! for k = 11 .. 2, then 1, 1 (Horner).
  double p = 0x1.ae64567f544e4p-26;
  p = p * r + 0x1.27e4fb7789f5cp-22;
  p = p * r + 0x1.71de3a556c734p-19;
  p = p * r + 0x1.a01a01a01a01ap-16;
  p = p * r + 0x1.a01a01a01a01ap-13;
  p = p * r + 0x1.6c16c16c16c17p-10;
  p = p * r + 0x1.1111111111111p-7;
  p = p * r + 0x1.5555555555555p-5;
  p = p * r + 0x1.5555555555555p-3;
  p = p * r + 0x1.0000000000000p-1;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * std::bit_cast<double>(uint64_t(int64_t(n) + 1023) << 52);  // n in -126..0
}

uint64_t sample_random_bits(uint64_t seed, uint64_t draw) {
  uint64_t z = seed + (draw + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double sample_uniform(uint64_t seed, uint64_t draw) {
  return double(sample_random_bits(seed, draw) >> 11) * 0x1.0p-53;
}

void softmax_candidates(std::vector<Candidate>& c, float temperature) {
  if (c.empty()) return;
  const double max_logit = c.front().logit;  // sorted: the first is the largest
  double sum = 0;
  for (Candidate& x : c) {
    // Equal to the largest: exp(0), also where both are +-inf (inf - inf).
    const double l = x.logit;
    const double d = l == max_logit ? 0.0 : (l - max_logit) / double(temperature);
    x.p = float(sampler_exp(d));
    sum += x.p;
  }
  for (Candidate& x : c) x.p = float(x.p / sum);
}

void top_p_filter(std::vector<Candidate>& c, float top_p) {
  if (top_p >= 1.0f) return;
  double mass = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    mass += c[i].p;
    if (mass >= double(top_p)) {
      c.resize(i + 1);
      return;
    }
  }
}

void min_p_filter(std::vector<Candidate>& c, float min_p) {
  if (min_p <= 0.0f || c.empty()) return;
  const float p_max = c.front().p;
  size_t keep = 1;
  const double bar = double(min_p) * double(p_max);
  while (keep < c.size() && double(c[keep].p) >= bar) ++keep;
  c.resize(keep);
}

bool device_samplable(const SamplingParams& p) {
  if (!p.greedy() && (p.top_k < 1 || p.top_k > k_device_top_k_max)) return false;
  return !p.penalized() || (p.repeat_last_n > 0 && p.repeat_last_n <= k_device_window_max);
}

int32_t sample_token(const SamplingParams& params, std::span<const float> logits,
                     std::span<const int32_t> recent, uint64_t draw, std::vector<float>& scratch) {
  scratch.assign(logits.begin(), logits.end());
  if (params.repeat_last_n > 0 && recent.size() > size_t(params.repeat_last_n)) {
    recent = recent.last(size_t(params.repeat_last_n));
  }
  if (params.repeat_last_n == 0) recent = {};
  apply_repeat_penalty(scratch, recent, params.repeat_penalty);
  apply_frequency_presence(scratch, recent, params.frequency_penalty, params.presence_penalty);
  if (params.greedy()) return argmax(scratch);

  std::vector<Candidate> c = sorted_candidates(scratch);
  if (c.empty()) return 0;
  top_k_filter(c, params.top_k);
  softmax_candidates(c, params.temperature);
  top_p_filter(c, params.top_p);
  min_p_filter(c, params.min_p);

  // Draw from the kept mass (the filters removed the rest, so renormalise
  // by drawing in [0, kept mass)).
  double kept = 0;
  for (const Candidate& x : c) kept += x.p;
  const double r = sample_uniform(params.seed, draw) * kept;
  double acc = 0;
  for (const Candidate& x : c) {
    acc += x.p;
    if (r < acc) return x.id;
  }
  return c.back().id;
}

Sampler::Sampler(const SamplingParams& params) { set_params(params); }

void Sampler::set_params(const SamplingParams& params) {
  params_ = params;
  reseed();
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> recent) {
  return sample_token(params_, logits, recent, take_draw(), scratch_);
}

}  // namespace clchat
