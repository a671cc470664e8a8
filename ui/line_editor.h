// The input line: GNU readline driven through its callback interface, drawn
// by us. readline never touches the terminal: key bytes reach it through
// rl_getc_function from a queue that feed() fills, rl_input_available_hook
// reports that queue, terminal preparation is a no-op (ncurses owns the
// terminal) and rl_redisplay_function only marks the screen dirty; the chat
// screen then draws rl_display_prompt, rl_line_buffer and rl_point itself.
// That keeps emacs editing, history (Up/Down), Ctrl-R search and ~/.inputrc.
// Every sent line goes to the history, multi-line and pasted ones too.
//
// readline is a process-wide singleton, and so is LineEditor.
#pragma once

#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace clchat::ui {

struct Submitted {
  std::string text;
  bool starts_with_paste = false;
  bool eof = false;  // Ctrl-D on an empty line
};

class LineEditor {
 public:
  // `history_file` empty: history is kept for the session only.
  LineEditor(std::string prompt, std::filesystem::path history_file);
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  // Key bytes (UTF-8 text, or an escape sequence such as "\x1b[A"). Whatever
  // they insert passes sanitize_input() (ui/text.h).
  void feed(std::string_view bytes);
  // A bracketed paste: inserted as text, newlines kept, no key bindings run;
  // ill-formed UTF-8 becomes U+FFFD and control characters are dropped.
  void paste(std::string_view text);
  void insert_newline();
  // Drops the current line (Ctrl-C when idle) and any search in progress.
  void clear_line();
  // Replaces the line (a refused message put back), the cursor at its end.
  void set_text(const std::string& text, bool starts_with_paste);

  std::optional<Submitted> take_submitted();

  std::string display_prompt() const;
  std::string text() const;
  size_t cursor() const;  // byte offset
  bool empty() const;
  // Set by readline's redisplay; cleared by the caller after drawing.
  bool dirty = true;

 private:
  static void on_line(char* line);
  void remember(const char* line);
  void scrub_line();
  void install();

  std::string prompt_;
  std::filesystem::path history_file_;
  bool pasted_at_start_ = false;
  std::deque<Submitted> submitted_;
};

}  // namespace clchat::ui
