// Config target: the bytes as a config.toml. parse_config() must return a
// Config or throw ConfigError (a message naming the file), whatever the text:
// TOML syntax errors, wrong types, unknown keys, absurd numbers.
#include <string>

#include "config/config.h"
#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {

int fuzz_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const config::Config c = config::parse_config(text, "fuzz.toml");
    require(config::is_log_level(c.log_level), "accepted an unknown log level");
    require(config::color_number(c.ui.colors.user).has_value(), "accepted an unknown colour");
  } catch (const config::ConfigError& e) {
    require(std::string(e.what()).rfind("fuzz.toml", 0) == 0,
            "ConfigError does not start with the file name");
  }
  return 0;
}

}  // namespace clchat::fuzz
