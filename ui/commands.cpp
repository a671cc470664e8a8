// Command parsing and /set validation (see commands.h).
#include "ui/commands.h"

#include <cstdio>
#include <random>

#include "config/number_rules.h"

namespace clchat::ui {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

struct SetKey {
  const char* name;
  const char* alias;
  const config::NumberRule& rule;  // the config key's (config/number_rules.h)
};

constexpr SetKey k_set_keys[] = {
    {"temp", "temperature", config::rules::temperature},
    {"top_k", "top-k", config::rules::top_k},
    {"top_p", "top-p", config::rules::top_p},
    {"min_p", "min-p", config::rules::min_p},
    {"repeat_penalty", "repeat-penalty", config::rules::repeat_penalty},
    {"repeat_last_n", "repeat-last-n", config::rules::repeat_last_n},
    {"frequency_penalty", "frequency-penalty", config::rules::frequency_penalty},
    {"presence_penalty", "presence-penalty", config::rules::presence_penalty},
    {"seed", "seed", config::rules::seed},
    {"max_tokens", "max-tokens", config::rules::max_tokens},
};

command::Invalid usage_set() {
  return {
      "usage: /set temp|top_k|top_p|min_p|repeat_penalty|repeat_last_n|frequency_penalty|"
      "presence_penalty|seed|max_tokens VALUE, or /set greedy"};
}

Input parse_set(std::string_view args) {
  args = trim(args);
  if (args == "greedy") return command::SetGreedy{};
  const auto space = args.find(' ');
  if (space == std::string_view::npos) return usage_set();
  const auto key = args.substr(0, space);
  const auto value_text = trim(args.substr(space + 1));
  for (const auto& k : k_set_keys) {
    if (key != k.name && key != k.alias) continue;
    std::string problem;
    const auto value = config::parse_for_rule(k.rule, value_text, problem);
    if (!value) return command::Invalid{"/set " + std::string(k.name) + ": " + problem};
    return command::Set{k.name, static_cast<double>(*value)};
  }
  return usage_set();
}

Input parse_debug(std::string_view args) {
  args = trim(args);
  if (args == "on") return command::Debug{true};
  if (args == "off") return command::Debug{false};
  return command::Invalid{"usage: /debug on|off"};
}

}  // namespace

Input parse_input(std::string_view line, bool starts_with_paste) {
  if (trim(line).empty()) return Nothing{};
  if (starts_with_paste || line.empty() || line.front() != '/') return Message{std::string(line)};
  if (line.size() > 1 && line[1] == '/') return Message{std::string(line.substr(1))};

  const auto end = line.find_first_of(" \t\n");
  const auto name = line.substr(1, end == std::string_view::npos ? end : end - 1);
  const auto args = end == std::string_view::npos ? std::string_view() : line.substr(end + 1);
  const auto no_args = [&](Input cmd) -> Input {
    if (!trim(args).empty())
      return command::Invalid{"/" + std::string(name) + " takes no arguments"};
    return cmd;
  };
  if (name == "help" || name == "?") return no_args(command::Help{});
  if (name == "clear") return no_args(command::Clear{});
  if (name == "regen") return no_args(command::Regen{});
  if (name == "stats") return no_args(command::Stats{});
  if (name == "show") return no_args(command::Show{});
  if (name == "quit" || name == "exit") return no_args(command::Quit{});
  // The system prompt keeps its inner spacing and newlines; only the ends are trimmed.
  if (name == "system") return command::System{std::string(trim(args))};
  if (name == "save") return command::Save{std::string(trim(args))};
  if (name == "load") {
    if (trim(args).empty()) return command::Invalid{"usage: /load FILE"};
    return command::Load{std::string(trim(args))};
  }
  if (name == "set") return parse_set(args);
  if (name == "debug") return parse_debug(args);
  return command::Invalid{"unknown command /" + std::string(name) +
                          " (/help lists them; start with // to send a line beginning with /)"};
}

void apply_set(SamplingParams& p, const command::Set& s, SamplingFields& from_model) {
  if (s.key == "temp") from_model.temperature = false;
  if (s.key == "top_k") from_model.top_k = false;
  if (s.key == "top_p") from_model.top_p = false;
  if (s.key == "min_p") from_model.min_p = false;
  if (s.key == "repeat_penalty") from_model.repeat_penalty = false;
  if (s.key == "repeat_last_n") from_model.repeat_last_n = false;
  if (s.key == "temp") p.temperature = static_cast<float>(s.value);
  if (s.key == "top_k") p.top_k = static_cast<int>(s.value);
  if (s.key == "top_p") p.top_p = static_cast<float>(s.value);
  if (s.key == "min_p") p.min_p = static_cast<float>(s.value);
  if (s.key == "repeat_penalty") p.repeat_penalty = static_cast<float>(s.value);
  if (s.key == "repeat_last_n") p.repeat_last_n = static_cast<int>(s.value);
  if (s.key == "frequency_penalty") p.frequency_penalty = static_cast<float>(s.value);
  if (s.key == "presence_penalty") p.presence_penalty = static_cast<float>(s.value);
  if (s.key == "seed")
    p.seed = s.value < 0 ? std::random_device{}() : static_cast<uint64_t>(s.value);
  if (s.key == "max_tokens") p.max_tokens = static_cast<int>(s.value);
}

std::string sampling_summary(const SamplingParams& p) {
  if (p.greedy()) return "greedy";
  char buf[128];
  std::snprintf(buf, sizeof buf, "temp %.2f top-k %d top-p %.2f min-p %.2f", p.temperature, p.top_k,
                p.top_p, p.min_p);
  return buf;
}

std::string sampling_label(const SamplingParams& p) {
  if (p.greedy()) return "greedy";
  char buf[32];
  std::snprintf(buf, sizeof buf, "temp %.2f", p.temperature);
  return buf;
}

std::vector<std::pair<std::string, std::string>> set_values(const SamplingParams& p) {
  const auto real = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", x);
    return std::string(buf);
  };
  return {
      {"temp", real(p.temperature) + (p.greedy() ? " (greedy)" : "")},
      {"top_k", std::to_string(p.top_k)},
      {"top_p", real(p.top_p)},
      {"min_p", real(p.min_p)},
      {"repeat_penalty", real(p.repeat_penalty)},
      {"repeat_last_n", std::to_string(p.repeat_last_n)},
      {"frequency_penalty", real(p.frequency_penalty)},
      {"presence_penalty", real(p.presence_penalty)},
      {"seed", std::to_string(p.seed)},
      {"max_tokens", std::to_string(p.max_tokens)},
  };
}

std::vector<std::string> help_lines() {
  return {
      "/help                 this list",
      "/clear                new conversation (system prompt kept, cache reset)",
      "/system TEXT          set the system prompt (/system alone shows it)",
      "/regen                drop the last reply and generate it again",
      "/save [FILE]          write FILE.md (transcript) and FILE.json (for /load)",
      "/load FILE            restore a conversation saved with /save",
      "/set KEY VALUE        temp, top_k, top_p, min_p, repeat_penalty, repeat_last_n, "
      "frequency_penalty, presence_penalty, seed (-1: a new random one), max_tokens",
      "/set greedy           always take the most likely token",
      "/stats                speed and cache use of the last reply",
      "/show                 the model (architecture, size, types, context, template) and "
      "every /set value",
      "/debug on|off         per-layer hidden-state statistics and top-5 in the panel (F3)",
      "/quit                 leave (also Ctrl-D on an empty line, or Ctrl-C twice)",
      "keys: Enter send · Alt-Enter newline · Ctrl-C stop reply · PgUp/PgDn/Home/End or wheel "
      "scroll · F2 panel · F3 debug · Up/Down history · Ctrl-R search",
  };
}

}  // namespace clchat::ui
