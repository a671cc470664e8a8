// The chat front ends over the engine thread (engine/engine.h): line mode
// (each stdin line is a user turn, each reply one stdout line) and, when
// stdin and stdout are both terminals, the chat screen (UI issue; line mode
// until it lands). `clchat` with no subcommand and `clchat run --chat` end
// here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <istream>

#include "engine/messages.h"

namespace clchat::app {

struct ChatOptions {
  EngineOptions engine;
  bool verbose = false;  // a statistics line on stderr after every reply
};

// Registers the chat options (-m, --device, -c/--ctx, --system, --temp, ...)
// on `app` (the top level: `clchat -m MODEL`).
void add_chat_options(CLI::App& app, ChatOptions& options);

// Line mode: reads turns from `in` until EOF, replies to `out`, statistics
// and notices to `err`. Returns the exit code (0); throws UsageError when
// the model file is missing and std::runtime_error when it does not load.
int run_line_chat(const ChatOptions& options, std::istream& in, std::FILE* out, std::FILE* err);

// Picks the front end for an interactive or piped session and runs it.
int run_chat(const ChatOptions& options);

// The statistics line of line mode's --verbose:
// [prefill <n> tok <x> tok/s | decode <m> tok <y> tok/s | ttft <ms> ms | cache <used>/<capacity>]
std::string format_stats_line(const ev::Stats& stats);

}  // namespace clchat::app
