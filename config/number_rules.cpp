// Checking numbers against a NumberRule (see number_rules.h).
#include "config/number_rules.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace clchat::config {

std::string rule_problem(const NumberRule& rule, long double x) {
  if (!(x >= rule.min && x <= rule.max)) {
    std::ostringstream s;
    s.precision(19);
    s << "must be between " << rule.min << " and " << rule.max;
    return s.str();
  }
  if (rule.integer && std::floor(x) != x) return "expected a whole number";
  return "";
}

std::optional<long double> parse_for_rule(const NumberRule& rule, std::string_view text,
                                          std::string& problem) {
  const std::string s(text);
  char* end = nullptr;
  const long double x = s.empty() ? 0 : std::strtold(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    problem = rule.integer ? "expected a whole number" : "expected a number";
    return std::nullopt;
  }
  problem = rule_problem(rule, x);
  if (!problem.empty()) return std::nullopt;
  return x;
}

}  // namespace clchat::config
