// The transcript model: the conversation as entries (user and assistant turns,
// system prompt, notices) plus the wrapped lines for the current width and
// the scroll position.
//
// Scrolling keeps `top_` (the first visible line) while the user reads back,
// so streamed text never moves the view; `follow_` is set again when the view
// reaches the bottom. Streaming re-wraps only the last entry, so a token costs
// O(length of the reply), not O(transcript).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ui/styled.h"

namespace clchat::ui {

enum class EntryKind { User, Assistant, System, Info, Error };

struct Entry {
  EntryKind kind = EntryKind::Info;
  std::string text;
  bool streaming = false;  // assistant reply still arriving
  std::string footnote;    // e.g. "stopped", shown dimmed under the entry
};

class Transcript {
 public:
  void add(EntryKind kind, std::string_view text);
  // Adds above the first question, if there is one (the model's banner, when
  // a message was typed while the model loaded).
  void add_before_turns(EntryKind kind, std::string_view text);
  // Appends to the last entry when it is a streaming reply, else starts one.
  void append_reply(std::string_view piece);
  // Marks the streaming reply done; `footnote` non-empty adds a dimmed note.
  void finish_reply(std::string_view footnote);
  // Removes the last assistant entry (for /regen) and moves the entries
  // after it above its question, where the regenerated reply follows.
  void drop_last_reply();
  void clear();
  const std::vector<Entry>& entries() const { return entries_; }

  void set_width(int width);
  int width() const { return width_; }
  int line_count() const;

  // The `height` lines on screen now (padded with empty lines at the top when
  // the transcript is shorter than the view).
  std::vector<StyledLine> visible(int height) const;

  void scroll_up(int lines, int height);
  void scroll_down(int lines, int height);
  void scroll_home(int height);
  void scroll_end();
  bool following() const { return follow_; }
  // Text arrived below the view while the user was reading back.
  bool unseen_below() const { return unseen_; }
  int top_line(int height) const;

 private:
  void rewrap_all();
  void rewrap(size_t index);
  void changed_last();

  std::vector<Entry> entries_;
  std::vector<std::vector<StyledLine>> wrapped_;  // per entry, for width_
  int width_ = 80;
  int top_ = 0;
  bool follow_ = true;
  bool unseen_ = false;
};

}  // namespace clchat::ui
