// Slash commands typed into the input line. parse_input() turns a submitted
// line into a message for the model, a command, or a one-line hint for a
// mistake; nothing here acts, so every case is a unit test.
//
// A line is a command only when it starts with a typed '/': text that begins
// with a bracketed paste is always a message, and "//x" sends "/x".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/messages.h"

namespace clchat::ui {

namespace command {
struct Help {};
struct Clear {};
struct System {
  std::string text;  // empty: show the current system prompt
};
struct Regen {};
struct Save {
  std::string path;  // empty: a timestamped name in the current directory
};
struct Load {
  std::string path;
};
struct Set {
  // canonical: temp top_k top_p min_p repeat_penalty repeat_last_n
  // frequency_penalty presence_penalty seed max_tokens
  std::string key;
  double value = 0;
};
struct SetGreedy {};
struct Stats {};
struct Show {};
struct Debug {
  bool on = false;
};
struct Quit {};
// Unknown or malformed: `hint` is shown, nothing is sent.
struct Invalid {
  std::string hint;
};
}  // namespace command

struct Message {
  std::string text;
};
struct Nothing {};  // an empty line

using Input =
    std::variant<Nothing, Message, command::Help, command::Clear, command::System, command::Regen,
                 command::Save, command::Load, command::Set, command::SetGreedy, command::Stats,
                 command::Show, command::Debug, command::Quit, command::Invalid>;

// `starts_with_paste`: the line's first character came from a bracketed paste.
Input parse_input(std::string_view line, bool starts_with_paste = false);

// Applies a validated /set to sampling parameters; the key is no longer the
// model's recommendation in `from_model`.
void apply_set(SamplingParams& params, const command::Set& set, SamplingFields& from_model);

// "greedy" or "temp 0.70 top-k 40 top-p 0.95 min-p 0.05" (the /set hint).
std::string sampling_summary(const SamplingParams& params);
// "greedy" or "temp 0.70", short enough for the status bar.
std::string sampling_label(const SamplingParams& params);

// Every /set key with its value, in /set's order: {"temp", "0.80"}, ...
std::vector<std::pair<std::string, std::string>> set_values(const SamplingParams& params);

// The /help text, one entry per line.
std::vector<std::string> help_lines();

}  // namespace clchat::ui
