// Line mode's input lines: a message is a user turn whose reply streams to
// stdout; a line starting with '/' is a command, parsed as the chat screen
// parses it (ui/commands.h: "//x" sends "/x"). What a command shows (/help,
// /show, /stats, /system) and every problem go to stderr, so stdout holds
// replies only.
#pragma once

#include <cstdio>
#include <string>

#include "engine/engine.h"
#include "ui/conversation_file.h"

namespace clchat::app {

struct LineChat {
  Engine& engine;
  std::FILE* out;
  std::FILE* err;
  bool verbose = false;  // the statistics line after every reply
  ev::Ready ready;       // what the engine said when it was ready (/show)
  SamplingParams sampling;
  SamplingFields from_model;
  ui::Conversation conversation;  // what /save writes
  ev::Stats last_stats;           // of the last reply (/stats)
  bool quit = false;              // /quit: read no more lines
};

// One input line. Returns false when it failed: a failed turn or a bad
// command, said in one "clchat: " line on `err`.
bool handle_line(LineChat& chat, const std::string& line);

}  // namespace clchat::app
