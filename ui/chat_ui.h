// The interactive chat screen: `clchat` with no subcommand on a terminal.
// run_chat_ui owns the terminal until it returns: ncurses screen, readline
// input line, the engine thread, and a poll() loop over stdin, the engine's
// wake fd and the signal self-pipe.
#pragma once

#include <filesystem>

#include "config/config.h"
#include "engine/messages.h"

namespace clchat::ui {

struct ChatUiOptions {
  config::Config config;
  EngineOptions engine;
  bool resume = false;             // reopen the latest autosaved conversation
  std::filesystem::path log_path;  // fd 2 goes here while the screen is up (else /dev/null)
  std::string log_problem;         // "" or why there is no log file (shown on the screen)
};

// Returns the process exit code: 0 after /quit, Ctrl-D or Ctrl-C twice; 128 +
// the signal after SIGTERM (143), SIGHUP (129) or SIGQUIT (131). Either way a
// running reply is stopped and kept, the conversation autosaved and the
// terminal restored.
int run_chat_ui(const ChatUiOptions& options);

}  // namespace clchat::ui
