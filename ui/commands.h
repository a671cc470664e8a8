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
  std::string
      key;  // canonical: temp top_k top_p min_p repeat_penalty repeat_last_n seed max_tokens
  double value = 0;
};
struct SetGreedy {};
struct Stats {};
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
                 command::Debug, command::Quit, command::Invalid>;

// `starts_with_paste`: the line's first character came from a bracketed paste.
Input parse_input(std::string_view line, bool starts_with_paste = false);

// Applies a validated /set to sampling parameters.
void apply_set(SamplingParams& params, const command::Set& set);

// "greedy" or "temp 0.70 top-k 40 top-p 0.95 min-p 0.05" for the status bar.
std::string sampling_summary(const SamplingParams& params);

// The /help text, one entry per line.
std::vector<std::string> help_lines();

}  // namespace clchat::ui
