// Line-mode chat over the engine thread (engine/engine.h): each stdin line is
// a user turn, each reply one stdout line. `clchat run --chat` ends here, and
// `clchat` with no subcommand does when stdin or stdout is not a terminal;
// on a terminal it opens the chat screen instead (run_interactive in
// app/chat_screen.h, ui/).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <istream>

#include "engine/messages.h"

namespace clchat::app {

struct ChatOptions {
  EngineOptions engine;
  bool verbose = false;  // a statistics line on stderr after every reply
  // Line mode: the live OpenCL objects on stderr after every reply and at
  // exit (engine/cl/object_counts.h), for leak checks.
  bool cl_object_counts = false;
};

// Registers the chat options (-m, --device, -c/--ctx, --system, --temp, ...)
// on `app` (the top level: `clchat -m MODEL`).
void add_chat_options(CLI::App& app, ChatOptions& options);

// Line mode: reads turns from `in` until EOF, replies to `out`, statistics
// and notices to `err`. Returns the exit code (0); throws UsageError when
// the model file is missing or malformed and std::runtime_error when it does
// not load for another reason (e.g. no device).
int run_line_chat(const ChatOptions& options, std::istream& in, std::FILE* out, std::FILE* err);

// Line mode on stdin and stdout (run_interactive picks it for a piped
// session).
int run_chat(const ChatOptions& options);

// The statistics line of line mode's --verbose:
// [prefill <n> tok <x> tok/s | decode <m> tok <y> tok/s | ttft <ms> ms | cache <used>/<capacity>]
std::string format_stats_line(const ev::Stats& stats);

}  // namespace clchat::app
