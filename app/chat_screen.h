// Glue between the command line and the chat screen (ui/): the config file
// gives the defaults of the chat options before CLI11 parses the flags, so a
// flag always wins over the file, and `clchat` picks the screen on a terminal
// and line mode (cmd_chat.cpp) otherwise.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "app/cmd_chat.h"
#include "config/config.h"

namespace clchat::app {

struct ScreenOptions {
  config::Config config;
  std::string config_file;  // --config (read before parsing; registered for --help)
  bool resume = false;
  std::string log_level;  // --log-level; empty: the config's
};

// Finds --config FILE in argv, loads it (or $XDG_CONFIG_HOME/clchat/config.toml)
// and seeds `chat` with its values. Prints the error and returns 2 when the
// file is bad; 0 otherwise.
int load_config_defaults(int argc, char** argv, ScreenOptions& screen, ChatOptions& chat);

// --config, --resume, --log-level.
void add_screen_options(CLI::App& app, ScreenOptions& screen);

// --config on every subcommand too (`clchat run --config FILE ...`): the file
// is read before parsing wherever the flag stands, so each command accepts it.
void add_config_to_subcommands(CLI::App& app, ScreenOptions& screen);

// No subcommand: the chat screen when stdin and stdout are terminals, else
// line mode.
int run_interactive(const ChatOptions& chat, const ScreenOptions& screen);

}  // namespace clchat::app
