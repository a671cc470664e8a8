// The sampling chain of sampler.h. Candidates are sorted once, so top-k,
// top-p and min-p are prefix cuts of the same list.
#include "engine/chat/sampler.h"

#include <algorithm>
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

void softmax_candidates(std::vector<Candidate>& c, float temperature) {
  if (c.empty()) return;
  const double max_logit = c.front().logit;  // sorted: the first is the largest
  double sum = 0;
  for (Candidate& x : c) {
    x.p = float(std::exp((double(x.logit) - max_logit) / double(temperature)));
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
  while (keep < c.size() && c[keep].p >= min_p * p_max) ++keep;
  c.resize(keep);
}

Sampler::Sampler(const SamplingParams& params) { set_params(params); }

void Sampler::set_params(const SamplingParams& params) {
  params_ = params;
  reseed();
}

void Sampler::reseed() { rng_.seed(params_.seed); }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> recent) {
  scratch_.assign(logits.begin(), logits.end());
  if (params_.repeat_last_n > 0 && recent.size() > size_t(params_.repeat_last_n)) {
    recent = recent.last(size_t(params_.repeat_last_n));
  }
  if (params_.repeat_last_n == 0) recent = {};
  apply_repeat_penalty(scratch_, recent, params_.repeat_penalty);
  apply_frequency_presence(scratch_, recent, params_.frequency_penalty, params_.presence_penalty);
  if (params_.greedy()) return argmax(scratch_);

  std::vector<Candidate> c = sorted_candidates(scratch_);
  if (c.empty()) return 0;
  top_k_filter(c, params_.top_k);
  softmax_candidates(c, params_.temperature);
  top_p_filter(c, params_.top_p);
  min_p_filter(c, params_.min_p);

  // Draw from the kept mass (the filters removed the rest, so renormalise
  // by drawing in [0, kept mass)).
  double kept = 0;
  for (const Candidate& x : c) kept += x.p;
  const double r = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  double acc = 0;
  for (const Candidate& x : c) {
    acc += x.p;
    if (r < acc) return x.id;
  }
  return c.back().id;
}

}  // namespace clchat
