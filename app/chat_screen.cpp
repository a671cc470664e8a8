// Config defaults, the screen's flags and the choice of front end (see
// chat_screen.h).
#include "app/chat_screen.h"

#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "app/commands.h"
#include "config/logging.h"
#include "engine/chat/template.h"
#include "ui/chat_ui.h"
#include "ui/terminal_check.h"

namespace clchat::app {

namespace {

EngineOptions engine_options_from(const config::Config& c) {
  EngineOptions o;
  o.model_path = c.model;
  o.device = c.device;
  o.backend = c.backend;
  o.n_ctx = c.n_ctx;
  o.chat_template = c.chat_template;
  o.system_prompt = c.system_prompt;
  o.prefill_chunk = c.prefill_chunk;
  o.profiling = c.profiling;
  o.switches.persistent_decode = c.engine.persistent_decode;
  o.switches.tensor_cores = c.engine.tensor_cores;
  o.switches.lookahead = c.engine.lookahead;
  o.switches.kernel_cache = c.engine.kernel_cache;
  const auto& s = c.sampling;
  o.sampling.temperature = static_cast<float>(s.temperature);
  o.sampling.top_k = s.top_k;
  o.sampling.top_p = static_cast<float>(s.top_p);
  o.sampling.min_p = static_cast<float>(s.min_p);
  o.sampling.repeat_penalty = static_cast<float>(s.repeat_penalty);
  o.sampling.repeat_last_n = s.repeat_last_n;
  o.sampling.frequency_penalty = static_cast<float>(s.frequency_penalty);
  o.sampling.presence_penalty = static_cast<float>(s.presence_penalty);
  o.sampling.seed = seed_or_random(s.seed);
  o.sampling.max_tokens = s.max_tokens;
  // The model's recommendation, for the keys the file leaves out (the
  // sampling flags take theirs back: add_chat_options).
  const auto unset = [&](const config::NumberRule& r) { return !s.keys_in_file.count(r.key); };
  namespace rules = config::rules;
  o.model_sampling = {unset(rules::temperature),    unset(rules::top_k),
                      unset(rules::top_p),          unset(rules::min_p),
                      unset(rules::repeat_penalty), unset(rules::repeat_last_n)};
  return o;
}

constexpr const char* k_config_help =
    "Config file (default: $XDG_CONFIG_HOME/clchat/config.toml; read before the other flags, "
    "which override it)";

std::optional<std::filesystem::path> config_flag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return std::nullopt;
}

}  // namespace

int load_config_defaults(int argc, char** argv, ScreenOptions& screen, ChatOptions& chat) {
  try {
    screen.config = config::load_config(config_flag(argc, argv));
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "clchat: config: %s\n", e.what());
    return 2;
  }
  // The config cannot see the engine's template names: checked here, as
  // --chat-template is.
  const std::string& name = screen.config.chat_template;
  if (!name.empty() && !template_style_from_name(name)) {
    std::fprintf(stderr, "clchat: config: chat_template: %s\n",
                 unknown_template_message(name).c_str());
    return 2;
  }
  chat.engine = engine_options_from(screen.config);
  return 0;
}

void add_screen_options(CLI::App& app, ScreenOptions& screen) {
  app.add_option("--config", screen.config_file, k_config_help);
  app.add_flag("--resume", screen.resume,
               "Reopen the last autosaved conversation (chat screen only; refused in line mode)");
  app.add_option("--log-level", screen.log_level,
                 "trace, debug, info, warn, error, critical or off (log: "
                 "$XDG_STATE_HOME/clchat/clchat.log)")
      ->check([](const std::string& level) {
        return config::is_log_level(level) ? std::string() : "not a log level: " + level;
      });
}

void add_config_to_subcommands(CLI::App& app, ScreenOptions& screen) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->add_option("--config", screen.config_file, k_config_help);
  }
}

int run_interactive(const ChatOptions& chat, const ScreenOptions& screen) {
  if (!::isatty(STDIN_FILENO) || !::isatty(STDOUT_FILENO)) {
    // Line mode neither autosaves nor reopens: a silent --resume would
    // start a new conversation the user believes is the old one.
    if (screen.resume) {
      throw UsageError(
          "--resume needs the chat screen (stdin and stdout a terminal); line mode does not "
          "autosave or resume");
    }
    return run_chat(chat);
  }
  ui::ChatUiOptions o;
  o.config = screen.config;
  o.engine = chat.engine;
  o.resume = screen.resume;
  // Resolved before the screen starts, so "no model" is a plain error message.
  if (o.engine.model_path.empty()) o.engine.model_path = default_model_path();
  if (!std::filesystem::exists(o.engine.model_path)) {
    throw UsageError("no model file '" + o.engine.model_path + "'");
  }
  // Checked while stderr is still the terminal (the log file takes it next).
  if (const auto problem = ui::terminal_problem()) throw std::runtime_error(*problem);
  o.log_path = config::default_log_path();
  if (!config::start_file_log(
          o.log_path, screen.log_level.empty() ? screen.config.log_level : screen.log_level)) {
    // Never the terminal the screen owns: no log at all, and the screen says so.
    config::discard_log();
    o.log_problem = "cannot write the log file " + o.log_path.string() + "; logging is off";
  }
  std::setlocale(LC_ALL, "");  // wide characters in ncurses and wcwidth()
  return ui::run_chat_ui(o);
}

}  // namespace clchat::app
