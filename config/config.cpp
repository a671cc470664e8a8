// Loading the typed Config from TOML (toml11). A TableReader walks one table:
// each read() takes a known key, checks its type and range and records it;
// finish() rejects the keys nobody asked for, so typos are reported.
#include "config/config.h"

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <sstream>
#include <toml.hpp>
#include <vector>

#include "common/input_file.h"
#include "common/utf8.h"
#include "config/number_rules.h"
#include "config/xdg.h"

namespace clchat::config {

namespace {

constexpr std::array<const char*, 9> k_color_names = {
    "default", "black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"};
constexpr std::array<const char*, 7> k_log_levels = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};

class TableReader {
 public:
  TableReader(const toml::value* table, std::string prefix, std::string file)
      : table_(table), prefix_(std::move(prefix)), file_(std::move(file)) {}

  void read(const char* key, std::string& out) {
    if (const auto* v = take(key)) {
      if (!v->is_string()) fail(*v, key, "expected a string");
      out = v->as_string().str;
    }
  }
  void read(const char* key, bool& out) {
    if (const auto* v = take(key)) {
      if (!v->is_boolean()) fail(*v, key, "expected true or false");
      out = v->as_boolean();
    }
  }
  template <typename Int>
  void read(const char* key, Int& out, Int min, Int max) {
    if (const auto* v = take(key)) {
      if (!v->is_integer()) fail(*v, key, "expected an integer");
      const auto x = v->as_integer();
      if (x < min || x > max) {
        fail(*v, key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
      }
      out = static_cast<Int>(x);
    }
  }
  // A number checked against `rule` (config/number_rules.h); an integer rule
  // takes integers only, a real one integers too (`temperature = 1`).
  template <typename T>
  void read(const NumberRule& rule, T& out) {
    if (const auto* v = take(rule.key)) {
      long double x = 0;
      if (v->is_integer()) {
        x = static_cast<long double>(v->as_integer());
      } else if (v->is_floating() && !rule.integer) {
        x = static_cast<long double>(v->as_floating());
      } else {
        fail(*v, rule.key, rule.integer ? "expected an integer" : "expected a number");
      }
      const std::string problem = rule_problem(rule, x);
      if (!problem.empty()) fail(*v, rule.key, problem);
      out = static_cast<T>(x);
    }
  }
  // A string that must be one of `allowed`.
  template <size_t N>
  void read_choice(const char* key, std::string& out, const std::array<const char*, N>& allowed) {
    if (const auto* v = take(key)) {
      if (!v->is_string()) fail(*v, key, "expected a string");
      const std::string s = v->as_string().str;
      std::string list;
      for (const char* a : allowed) {
        if (s == a) {
          out = s;
          return;
        }
        list += list.empty() ? "" : ", ";
        list += a;
      }
      fail(*v, key, "\"" + s + "\" is not one of " + list);
    }
  }
  // "F1".."F12" -> 1..12.
  void read_function_key(const char* key, int& out) {
    if (const auto* v = take(key)) {
      const std::string s = v->is_string() ? v->as_string().str : "";
      int n = 0;
      if (s.size() >= 2 && (s[0] == 'F' || s[0] == 'f')) {
        try {
          size_t used = 0;
          n = std::stoi(s.substr(1), &used);
          if (used != s.size() - 1) n = 0;
        } catch (const std::exception&) {
          n = 0;
        }
      }
      if (n < 1 || n > 12) fail(*v, key, "expected a function key name \"F1\" to \"F12\"");
      out = n;
    }
  }

  TableReader sub(const char* key) {
    const auto* v = take(key);
    if (v && !v->is_table()) fail(*v, key, "expected a table [" + prefix_ + key + "]");
    return TableReader(v, prefix_ + key + ".", file_);
  }

  const std::set<std::string>& keys_read() const { return taken_; }

  // Every key of the table must have been read.
  void finish() const {
    if (!table_) return;
    const toml::value* first = nullptr;
    std::string first_key;
    for (const auto& [k, v] : table_->as_table()) {
      if (taken_.count(k)) continue;
      if (!first || v.location().line() < first->location().line()) {
        first = &v;
        first_key = k;
      }
    }
    if (first) fail(*first, first_key.c_str(), "unknown setting (see config/default.toml)");
  }

 private:
  const toml::value* take(const char* key) {
    if (!table_) return nullptr;
    const auto& t = table_->as_table();
    auto it = t.find(key);
    if (it == t.end()) return nullptr;
    taken_.insert(key);
    return &it->second;
  }
  [[noreturn]] void fail(const toml::value& v, const char* key, const std::string& what) const {
    throw ConfigError(file_ + ":" + std::to_string(v.location().line()) + ": " + prefix_ + key +
                      ": " + what);
  }

  const toml::value* table_;
  std::string prefix_;
  std::string file_;
  std::set<std::string> taken_;
};

void read_colors(TableReader r, Colors& c) {
  r.read_choice("user", c.user, k_color_names);
  r.read_choice("assistant", c.assistant, k_color_names);
  r.read_choice("system", c.system, k_color_names);
  r.read_choice("accent", c.accent, k_color_names);
  r.read_choice("bar", c.bar, k_color_names);
  r.read_choice("warning", c.warning, k_color_names);
  r.finish();
}

void read_ui(TableReader r, Ui& ui) {
  r.read("panel", ui.panel);
  r.read("panel_width", ui.panel_width, 20, 200);
  r.read("panel_min_columns", ui.panel_min_columns, 0, 1000);
  r.read("mouse", ui.mouse);
  r.read("scroll_lines", ui.scroll_lines, 1, 100);
  r.read_choice("color", ui.color, std::array<const char*, 2>{"auto", "never"});
  read_colors(r.sub("colors"), ui.colors);
  r.finish();
}

void read_sampling(TableReader r, Sampling& s) {
  r.read(rules::temperature, s.temperature);
  r.read(rules::top_k, s.top_k);
  r.read(rules::top_p, s.top_p);
  r.read(rules::min_p, s.min_p);
  r.read(rules::repeat_penalty, s.repeat_penalty);
  r.read(rules::repeat_last_n, s.repeat_last_n);
  r.read(rules::frequency_penalty, s.frequency_penalty);
  r.read(rules::presence_penalty, s.presence_penalty);
  r.read(rules::seed, s.seed);
  r.read(rules::max_tokens, s.max_tokens);
  s.keys_in_file = r.keys_read();
  r.finish();
}

void read_engine(TableReader r, Engine& e) {
  r.read("persistent_decode", e.persistent_decode);
  r.read("tensor_cores", e.tensor_cores);
  r.read("lookahead", e.lookahead);
  r.read("kernel_cache", e.kernel_cache);
  r.finish();
}

void read_keys(TableReader r, Keys& k) {
  r.read_function_key("toggle_panel", k.toggle_panel);
  r.read_function_key("toggle_debug", k.toggle_debug);
  r.finish();
}

Config from_toml(const toml::value& root, const std::string& name) {
  Config c;
  TableReader r(&root, "", name);
  r.read("model", c.model);
  r.read("device", c.device);
  r.read_choice("backend", c.backend, std::array<const char*, 2>{"opencl", "reference"});
  r.read("context_size", c.n_ctx, 0, 1 << 24);
  r.read("chat_template", c.chat_template);
  r.read("system_prompt", c.system_prompt);
  r.read("prefill_chunk", c.prefill_chunk, 1, 1 << 16);
  r.read("profiling", c.profiling);
  r.read_choice("log_level", c.log_level, k_log_levels);
  read_sampling(r.sub("sampling"), c.sampling);
  read_engine(r.sub("engine"), c.engine);
  read_ui(r.sub("ui"), c.ui);
  read_keys(r.sub("keys"), c.keys);
  r.finish();
  return c;
}

// toml11 parses nested arrays and inline tables recursively and builds dotted
// keys (a.b.c = 1) in time quadratic in their length, so a file with
// thousands of '[' overflows the stack and one long dotted key hangs. No
// clchat setting is more than 3 levels deep; this lexical pass (strings and
// comments skipped) rejects more than k_max_nesting open brackets, or dots in
// one key, before toml11 sees the text.
constexpr int k_max_nesting = 32;

// The index of the last character of the string that opens at `i`: "...",
// '...' (ending at the line's end at the latest), or """...""" / '''...'''.
size_t skip_string(std::string_view text, size_t i, int& line) {
  const char c = text[i];
  const bool multi = text.substr(i, 3) == std::string(3, c);
  const size_t n = multi ? 3 : 1;
  const std::string_view quote = text.substr(i, n);
  for (i += n; i < text.size(); ++i) {
    if (text.substr(i, n) == quote) return i + n - 1;
    if (text[i] == '\n') {
      if (!multi) return i - 1;  // unterminated: the line break is the caller's
      ++line;
    }
    if (c == '"' && text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n') ++i;
  }
  return text.size();
}

// toml11 3.7 reads past the end of its buffer when a literal string ('...'
// or '''...''') holds a byte that is not UTF-8 (found by
// fuzz/fuzz_config.cpp). TOML files must be UTF-8: check that first.
void check_utf8(std::string_view text, const std::string& name) {
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8_char(text, i);
    if (c.length == 0) {
      throw ConfigError(name + ":" + std::to_string(line) +
                        ": not valid UTF-8 (a TOML file must be UTF-8)");
    }
    if (c.code_point == '\n') ++line;
    i += size_t(c.length);
  }
}

void check_nesting(std::string_view text, const std::string& name) {
  int depth = 0;
  int dots = 0;  // since the last '=', ',', '[', '{' or line break
  int line = 1;
  const auto fail = [&] {
    throw ConfigError(name + ":" + std::to_string(line) +
                      ": arrays, tables or dotted keys nested " + "deeper than " +
                      std::to_string(k_max_nesting) + " levels");
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      i = skip_string(text, i, line);
    } else if (c == '[' || c == '{') {
      if (++depth > k_max_nesting) fail();
      dots = 0;
    } else if (c == ']' || c == '}') {
      depth = std::max(depth - 1, 0);
    } else if (c == '.') {
      if (++dots > k_max_nesting) fail();
    } else if (c == '=' || c == ',' || c == '\n') {
      dots = 0;
      if (c == '\n') ++line;
    }
  }
}

// toml11's syntax messages span several lines with a source excerpt; the
// first line holds the reason, and the location gives the line.
std::string syntax_message(const toml::syntax_error& e, const std::string& name) {
  std::string what = e.what();
  std::string reason = what.substr(0, what.find('\n'));
  if (const auto p = reason.find("] "); reason.rfind("[error]", 0) == 0 && p != std::string::npos) {
    reason = reason.substr(p + 2);
  }
  return name + ":" + std::to_string(e.location().line()) + ": syntax error: " + reason;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& name) {
  check_utf8(text, name);
  check_nesting(text, name);
  std::istringstream in(text);
  toml::value root;
  try {
    root = toml::parse(in, name);
  } catch (const toml::syntax_error& e) {
    throw ConfigError(syntax_message(e, name));
  }
  return from_toml(root, name);
}

Config load_config_file(const std::filesystem::path& path) {
  // Regular files only, and bounded: a FIFO would block, /dev/zero never ends.
  std::string text;
  try {
    text = read_regular_file(path.string(), k_max_config_bytes, "config file");
  } catch (const InputFileError& e) {
    throw ConfigError(e.what());
  }
  return parse_config(text, path.string());
}

Config load_config(const std::optional<std::filesystem::path>& explicit_path) {
  if (explicit_path) return load_config_file(*explicit_path);
  const auto user_file = config_dir() / "config.toml";
  std::error_code ec;
  if (std::filesystem::exists(user_file, ec)) return load_config_file(user_file);
  return Config{};
}

std::optional<int> color_number(const std::string& name) {
  for (size_t i = 0; i < k_color_names.size(); ++i) {
    if (name == k_color_names[i]) return static_cast<int>(i) - 1;  // default -> -1, black -> 0
  }
  return std::nullopt;
}

bool is_log_level(const std::string& level) {
  for (const char* l : k_log_levels) {
    if (level == l) return true;
  }
  return false;
}

}  // namespace clchat::config
