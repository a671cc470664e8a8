// ui::State: everything the chat screen shows, as plain data. Engine events
// and user actions change it (controller.cpp); draw() only reads it.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/messages.h"
#include "ui/conversation_file.h"
#include "ui/perf.h"
#include "ui/styled.h"
#include "ui/transcript.h"

namespace clchat::ui {

struct SessionInfo {
  bool ready = false;
  bool failed = false;
  std::string model, quant, device, backend;
  int n_layer = 0;
  int n_ctx = 0;
  ev::Ready facts;    // everything the engine said when it was ready (/show)
  std::string stage;  // while loading: what the engine is doing
};

// A submitted line the controller refused or the engine did not keep, to be
// put back into the input line: nothing typed is lost.
struct ReturnedInput {
  std::string text;
  bool starts_with_paste = false;
};

struct State {
  Transcript transcript;
  PerfState perf;
  SessionInfo session;
  SamplingParams sampling;
  // The settings still at the model's recommendation (general.sampling.*).
  SamplingFields sampling_from_model;
  bool sampling_set = false;       // a /set came before the engine was ready
  Conversation conversation;       // what /save and the autosave write
  std::filesystem::path autosave;  // this conversation's autosave file ("" = off)
  // Why the last autosave failed ("" = it worked); the status bar says so
  // until an autosave (tried again after every turn) works.
  std::string autosave_error;

  bool generating = false;
  // The running turn's prompt processing (total 0: none reported yet).
  ev::PrefillProgress prefill;
  // Ctrl-C during a reply. The engine clears its cancel flag when a turn
  // starts, so a cancel that raced ahead of the turn is repeated on each token.
  bool cancel_requested = false;
  // F2's choice, which sticks; none: the panel shows when the terminal is
  // wide enough, decided again on every resize (panel_wanted in layout.h).
  std::optional<bool> panel_choice;
  bool debug = false;
  bool quit = false;
  bool stats_requested = false;      // /stats: print the next final Stats
  int key_panel = 2, key_debug = 3;  // function key numbers, for the hints

  std::optional<ReturnedInput> input_back;  // taken by the chat screen

  // The transient line above the input ("saved …", "unknown command …").
  std::string hint;
  Style hint_style = Style::Dim;
  std::chrono::steady_clock::time_point hint_until{};
  std::chrono::steady_clock::time_point last_interrupt{};  // Ctrl-C twice to quit
};

}  // namespace clchat::ui
