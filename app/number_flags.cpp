// Number flags checked by the config file's rules (config/number_rules.h):
// `--top-p 2` is refused as `top_p = 2` is, with one line and exit status 2
// (CLI11's ValidationError). CLI11's own Range lets NaN through, so the
// sampling flags use rule_validator instead.
#include <random>

#include "app/commands.h"

namespace clchat::app {

CLI::Validator rule_validator(const config::NumberRule& rule) {
  auto check = [rule](std::string& text) -> std::string {
    std::string problem;
    if (config::parse_for_rule(rule, text, problem)) return "";
    return problem + " (given: " + text + ")";
  };
  return CLI::Validator(check, "", rule.key);
}

uint64_t seed_or_random(int64_t seed) {
  return seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
}

CLI::Option* add_seed_option(CLI::App& cmd, uint64_t& seed, const std::string& help) {
  return cmd
      .add_option_function<int64_t>(
          "--seed", [&seed](int64_t s) { seed = seed_or_random(s); }, help + " (-1: a random one)")
      ->type_name("S")
      ->check(rule_validator(config::rules::seed));
}

}  // namespace clchat::app
