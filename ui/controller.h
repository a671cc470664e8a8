// The controller changes ui::State in answer to engine events and to what the
// user submits, and posts commands to the engine. It talks to the engine only
// through two callables, so tests drive it without a model or a terminal.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "engine/messages.h"
#include "ui/state.h"

namespace clchat::ui {

class Controller {
 public:
  using Post = std::function<void(Command)>;
  using Cancel = std::function<void()>;

  Controller(State& state, Post post, Cancel cancel) : s_(state), post_(post), cancel_(cancel) {}

  void on_event(const Event& event);
  // A line from the input (Enter). `starts_with_paste`: see parse_input.
  void on_submit(const std::string& line, bool starts_with_paste);
  // Ctrl-C: stops a reply; when idle, the second press within 2 s quits.
  // Returns true when the input line should be cleared.
  bool on_interrupt(std::chrono::steady_clock::time_point now);
  void toggle_debug();
  // Restores a saved conversation into the engine, the transcript and `autosave`.
  void restore(const Conversation& c, const std::filesystem::path& autosave);
  void set_hint(std::string text, Style style = Style::Dim,
                std::chrono::seconds duration = std::chrono::seconds(6));

 private:
  void on_command(const auto& command);
  void finish_turn(const ev::TurnFinished& f);
  void autosave();
  bool busy(const char* what);

  State& s_;
  Post post_;
  Cancel cancel_;
  ReturnedInput submitted_;  // the line on_submit is handling
  // The reply /regen took out of the conversation; put back if the engine
  // does not keep the regenerated one (it keeps the old reply then).
  std::optional<SavedTurn> regen_removed_;
};

}  // namespace clchat::ui
