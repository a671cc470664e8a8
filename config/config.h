// The typed clchat configuration. Every setting has a built-in default (the
// member initialisers below, mirrored with a comment each in
// config/default.toml); a TOML file overrides some of them and command-line
// flags override the file. Keys are checked when the file is read, so a typo
// or a value of the wrong type is an error naming the key and its line, not a
// silent default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

namespace clchat::config {

// A bad config file: message is "FILE:LINE: key: what is wrong".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The chat's sampling defaults (config/default.toml says where each comes
// from). A model whose GGUF recommends values (general.sampling.*) replaces
// these for every key the file does not set.
struct Sampling {
  double temperature = 0.8;     // 0 = greedy (on the device, fastest)
  int top_k = 40;               // 0 = off
  double top_p = 0.95;          // 1 = off
  double min_p = 0.05;          // 0 = off
  double repeat_penalty = 1.1;  // 1 = off
  int repeat_last_n = 64;
  double frequency_penalty = 0.0;  // 0 = off
  double presence_penalty = 0.0;   // 0 = off
  int64_t seed = -1;               // -1 = a new random seed per run
  int max_tokens = 512;
  // The keys this file set (NumberRule::key names): the model's
  // recommendation does not replace them.
  std::set<std::string> keys_in_file;
};

// Colour names: default, black, red, green, yellow, blue, magenta, cyan, white.
struct Colors {
  std::string user = "cyan";
  std::string assistant = "default";
  std::string system = "yellow";
  std::string accent = "green";
  std::string bar = "blue";
  std::string warning = "red";
};

struct Keys {
  int toggle_panel = 2;  // function key number: 2 = F2
  int toggle_debug = 3;
};

struct Ui {
  bool panel = true;            // show the performance panel when wide enough
  int panel_width = 38;         // columns
  int panel_min_columns = 100;  // terminal width below which the panel starts hidden
  bool mouse = true;            // mouse wheel scrolls (hold Shift to select text)
  int scroll_lines = 3;         // lines per wheel step
  std::string color = "auto";   // auto: colours when the terminal has them; never
  Colors colors;
};

// The OpenCL engine's switches ([engine]; EngineSwitches in
// engine/messages.h). Every subcommand that builds an OpenCL engine uses them.
struct Engine {
  bool persistent_decode = true;  // false: the multi-kernel plan for every token
  bool tensor_cores = true;       // false: no tensor-core prefill (NVIDIA)
  bool lookahead = true;          // false: no greedy steps queued ahead
  std::string kernel_cache;  // empty: $CLCHAT_KERNEL_CACHE, else $XDG_CACHE_HOME/clchat/kernels
};

struct Config {
  std::string model;   // empty: $CLCHAT_MODEL, else assets/models/<default>
  std::string device;  // empty: first GPU, else first CPU; "cpu", "gpu", index, name part
  std::string backend = "opencl";  // opencl | reference
  int n_ctx = 0;                   // 0: the model's, capped by device memory
  std::string chat_template;       // empty: from the model's metadata
  std::string system_prompt;       // empty: the chat template's default
  int prefill_chunk = 512;         // prompt tokens per prefill launch
  bool profiling = true;           // sampled per-layer timings for the panel
  Sampling sampling;
  Engine engine;
  Ui ui;
  Keys keys;
  std::string log_level = "info";  // trace debug info warn error critical off
};

// The largest config file read (default.toml, every key commented, is ~10 KiB).
constexpr uint64_t k_max_config_bytes = uint64_t{1} << 20;

// Reads a TOML file over the built-in defaults. Throws ConfigError, also for
// a path that is not a regular file (a FIFO, a directory, /dev/zero) or is
// over k_max_config_bytes.
Config load_config_file(const std::filesystem::path& path);

// Parses TOML text; `name` is what error messages call the file.
Config parse_config(const std::string& text, const std::string& name);

// --config FILE when given (it must exist), else
// $XDG_CONFIG_HOME/clchat/config.toml when it exists, else the defaults.
Config load_config(const std::optional<std::filesystem::path>& explicit_path);

// Colour name -> ncurses-style colour number (-1 default, 0..7); nullopt when
// the name is unknown.
std::optional<int> color_number(const std::string& name);

bool is_log_level(const std::string& level);

}  // namespace clchat::config
