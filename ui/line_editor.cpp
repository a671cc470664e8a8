// readline callback-interface glue (see line_editor.h).
#include "ui/line_editor.h"

#include <readline/history.h>
#include <readline/readline.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ui/text.h"

namespace clchat::ui {

namespace {

LineEditor* g_editor = nullptr;
std::deque<unsigned char> g_keys;  // bytes waiting for readline

int queue_getc(FILE*) {
  // readline only asks when we said input is available; EOF would end the line.
  if (g_keys.empty()) return 0;
  const int c = g_keys.front();
  g_keys.pop_front();
  return c;
}

int queue_available() { return g_keys.empty() ? 0 : 1; }

void mark_dirty() {
  if (g_editor) g_editor->dirty = true;
}

void no_prep(int) {}
void no_deprep() {}

int insert_newline_cmd(int, int) {
  rl_insert_text("\n");
  return 0;
}

constexpr int k_history_max = 1000;

// The history file holds one entry per line, so a multi-line entry is
// written with this byte for each newline (sanitize_input() keeps it out of
// typed text) and read back with newlines.
constexpr char k_file_newline = '\x1e';

std::string with(std::string text, char from, char to) {
  std::replace(text.begin(), text.end(), from, to);
  return text;
}

// After read_history(): the file's encoded newlines back to newlines.
void decode_history() {
  for (int i = 0; i < history_length; ++i) {
    HIST_ENTRY* e = history_get(history_base + i);
    if (!e || !std::strchr(e->line, k_file_newline)) continue;
    const std::string line = with(e->line, k_file_newline, '\n');
    if (HIST_ENTRY* old = replace_history_entry(i, line.c_str(), e->data)) free_history_entry(old);
  }
}

}  // namespace

LineEditor::LineEditor(std::string prompt, std::filesystem::path history_file)
    : prompt_(std::move(prompt)), history_file_(std::move(history_file)) {
  g_editor = this;
  rl_readline_name = "clchat";  // `$if clchat` in ~/.inputrc
  rl_catch_signals = 0;         // our signal handlers, not readline's
  rl_catch_sigwinch = 0;
  rl_change_environment = 0;  // do not export LINES/COLUMNS
  rl_getc_function = queue_getc;
  rl_input_available_hook = queue_available;
  rl_redisplay_function = mark_dirty;
  rl_prep_term_function = no_prep;
  rl_deprep_term_function = no_deprep;
  // Readline writes bells and completion lists to rl_outstream; the screen is ours.
  rl_outstream = std::fopen("/dev/null", "w");
  rl_instream = stdin;
  rl_initialize();
  rl_variable_bind("bell-style", "none");
  rl_variable_bind("enable-bracketed-paste", "off");  // ncurses delivers pastes to us
  // Wait for the key after ESC indefinitely: ncurses already split Alt-keys.
  rl_variable_bind("keyseq-timeout", "0");
  rl_bind_key('\t', rl_insert);  // no filename completion in a chat
  rl_bind_keyseq("\\e\\r", insert_newline_cmd);
  rl_bind_keyseq("\\e\\n", insert_newline_cmd);
  using_history();
  stifle_history(k_history_max);
  if (!history_file_.empty() && read_history(history_file_.c_str()) == 0) decode_history();
  install();
}

LineEditor::~LineEditor() {
  rl_callback_handler_remove();
  if (rl_outstream && rl_outstream != stdout) std::fclose(rl_outstream);
  rl_outstream = nullptr;
  g_keys.clear();
  g_editor = nullptr;
}

void LineEditor::install() { rl_callback_handler_install(prompt_.c_str(), &LineEditor::on_line); }

void LineEditor::on_line(char* line) {
  LineEditor* self = g_editor;
  Submitted s;
  if (!line) {
    s.eof = true;
  } else {
    s.text = sanitize_input(line);
    s.starts_with_paste = self->pasted_at_start_;
    if (*line) self->remember(line);
    std::free(line);
  }
  self->pasted_at_start_ = false;
  self->submitted_.push_back(std::move(s));
  self->dirty = true;
}

// Every sent line is a history entry (multi-line and pasted ones too), written
// to the file at once, so a killed terminal loses nothing.
void LineEditor::remember(const char* line) {
  HIST_ENTRY* last = history_length > 0 ? history_get(history_base + history_length - 1) : nullptr;
  if (last && std::strcmp(last->line, line) == 0) return;
  const bool multi_line = std::strchr(line, '\n') != nullptr;
  // append_history writes the entry as it is: encoded while it is written.
  add_history(multi_line ? with(line, '\n', k_file_newline).c_str() : line);
  if (!history_file_.empty()) {
    if (append_history(1, history_file_.c_str()) != 0) write_history(history_file_.c_str());
    history_truncate_file(history_file_.c_str(), k_history_max);
  }
  if (multi_line) {
    HIST_ENTRY* old = replace_history_entry(history_length - 1, line, nullptr);
    if (old) free_history_entry(old);
  }
}

void LineEditor::set_text(const std::string& text, bool starts_with_paste) {
  rl_replace_line(text.c_str(), 0);
  rl_point = rl_end;
  pasted_at_start_ = starts_with_paste;
  dirty = true;
}

void LineEditor::feed(std::string_view bytes) {
  for (char c : bytes) g_keys.push_back(static_cast<unsigned char>(c));
  while (!g_keys.empty()) rl_callback_read_char();
  scrub_line();
  dirty = true;
}

// Key bytes that readline inserts as they are (quoted-insert with Ctrl-V,
// unbound escape sequences, a code point that is no character) must not stay
// in the line: it is drawn on the screen and sent to the model.
void LineEditor::scrub_line() {
  if (!rl_line_buffer || rl_end <= 0) return;
  const std::string_view line(rl_line_buffer, static_cast<size_t>(rl_end));
  const std::string clean = sanitize_input(line);
  if (clean == line) return;
  const size_t point = sanitize_input(line.substr(0, static_cast<size_t>(rl_point))).size();
  rl_replace_line(clean.c_str(), 0);
  rl_point = static_cast<int>(std::min(point, clean.size()));
}

void LineEditor::paste(std::string_view text) {
  const std::string clean = sanitize_input(text);
  if (clean.empty()) return;
  if (rl_end == 0) pasted_at_start_ = true;
  rl_insert_text(clean.c_str());
  dirty = true;
}

void LineEditor::insert_newline() {
  rl_insert_text("\n");
  dirty = true;
}

void LineEditor::clear_line() {
  rl_callback_sigcleanup();  // leaves an incremental search, if one is running
  rl_callback_handler_remove();
  rl_replace_line("", 1);
  rl_point = rl_end = 0;
  pasted_at_start_ = false;
  install();
  dirty = true;
}

std::optional<Submitted> LineEditor::take_submitted() {
  if (submitted_.empty()) return std::nullopt;
  Submitted s = std::move(submitted_.front());
  submitted_.pop_front();
  return s;
}

std::string LineEditor::display_prompt() const {
  // During Ctrl-R readline shows "(reverse-i-search)`x': " via rl_display_prompt.
  if (rl_display_prompt) return rl_display_prompt;
  return prompt_;
}

std::string LineEditor::text() const {
  return rl_line_buffer ? std::string(rl_line_buffer, rl_end) : "";
}

size_t LineEditor::cursor() const { return static_cast<size_t>(rl_point); }

bool LineEditor::empty() const { return rl_end == 0; }

}  // namespace clchat::ui
