// general.sampling.* over SamplingParams (see model_sampling.h).
#include "engine/chat/model_sampling.h"

#include <cmath>
#include <optional>

namespace clchat {

namespace {

// The key's value when it is a number in [lo, hi].
std::optional<double> recommended(const GgufFile& file, const char* key, double lo, double hi) {
  std::optional<double> v;
  try {
    v = file.opt_float(key);
  } catch (const GgufError&) {
    return std::nullopt;  // not a number: no recommendation
  }
  if (!v || !std::isfinite(*v) || *v < lo || *v > hi) return std::nullopt;
  return v;
}

template <typename T>
void take(const GgufFile& file, const char* key, double lo, double hi, bool allowed, T& field,
          bool& set) {
  if (!allowed) return;
  if (const auto v = recommended(file, key, lo, hi)) {
    field = static_cast<T>(*v);
    set = true;
  }
}

}  // namespace

SamplingFields apply_model_sampling(const GgufFile& file, const SamplingFields& allowed,
                                    SamplingParams& p) {
  // The ranges are config/number_rules.h's (the engine cannot include config/).
  SamplingFields set;
  take(file, "general.sampling.temp", 0, 100, allowed.temperature, p.temperature, set.temperature);
  take(file, "general.sampling.top_k", 0, 1 << 20, allowed.top_k, p.top_k, set.top_k);
  take(file, "general.sampling.top_p", 0, 1, allowed.top_p, p.top_p, set.top_p);
  take(file, "general.sampling.min_p", 0, 1, allowed.min_p, p.min_p, set.min_p);
  take(file, "general.sampling.penalty_repeat", 0, 100, allowed.repeat_penalty, p.repeat_penalty,
       set.repeat_penalty);
  take(file, "general.sampling.penalty_last_n", 0, 1 << 20, allowed.repeat_last_n, p.repeat_last_n,
       set.repeat_last_n);
  return set;
}

}  // namespace clchat
