// The allowed values of the numeric sampling settings, in one place: the
// config file's [sampling] keys, the command-line flags (--temp, --top-k, ...)
// and /set all check a value against the same NumberRule, so a value one of
// them refuses is refused by the others too. Bounds are long double so that
// int64 limits (the seed's) are exact.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace clchat::config {

struct NumberRule {
  const char* key;  // the config key under [sampling]
  long double min, max;
  bool integer;  // whole numbers only
};

namespace rules {
inline constexpr NumberRule temperature{"temperature", 0, 100, false};
inline constexpr NumberRule top_k{"top_k", 0, 1 << 20, true};
inline constexpr NumberRule top_p{"top_p", 0, 1, false};
inline constexpr NumberRule min_p{"min_p", 0, 1, false};
inline constexpr NumberRule repeat_penalty{"repeat_penalty", 0, 100, false};
inline constexpr NumberRule repeat_last_n{"repeat_last_n", 0, 1 << 20, true};
inline constexpr NumberRule frequency_penalty{"frequency_penalty", -2, 2, false};
inline constexpr NumberRule presence_penalty{"presence_penalty", -2, 2, false};
// -1: a new random seed per run.
inline constexpr NumberRule seed{"seed", -1, 9223372036854775807.0L, true};
inline constexpr NumberRule max_tokens{"max_tokens", 1, 1 << 24, true};
}  // namespace rules

// "" when `x` is allowed, else what is wrong ("must be between 0 and 1",
// "expected a whole number"; NaN is never allowed).
std::string rule_problem(const NumberRule& rule, long double x);

// Parses `text` (the whole of it) as a number for `rule`; nullopt and
// `problem` set ("expected a number", or rule_problem's) when it is not one.
std::optional<long double> parse_for_rule(const NumberRule& rule, std::string_view text,
                                          std::string& problem);

}  // namespace clchat::config
