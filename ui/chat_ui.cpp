// The chat screen's main loop (see chat_ui.h). One iteration: wait in poll()
// for keys, engine events or a signal; turn keys into editor input or
// actions, events into State changes (Controller); then draw one frame if
// anything changed. Resizes only mark the layout dirty (btop's approach).
#include "ui/chat_ui.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#define NCURSES_WIDECHAR 1
#include <ncurses.h>

#include "config/logging.h"
#include "config/xdg.h"
#include "engine/engine.h"
#include "ui/controller.h"
#include "ui/line_editor.h"
#include "ui/screen.h"
#include "ui/signals.h"

namespace clchat::ui {

namespace {

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

// ncurses decodes arrows and friends; readline wants the escape sequences
// its default emacs keymap binds.
const char* readline_sequence(int code, const std::string& name) {
  switch (code) {
    case KEY_UP:
      return "\x1b[A";
    case KEY_DOWN:
      return "\x1b[B";
    case KEY_RIGHT:
      return "\x1b[C";
    case KEY_LEFT:
      return "\x1b[D";
    case KEY_DC:
      return "\x1b[3~";
    case KEY_BACKSPACE:
      return "\x7f";
    case KEY_ENTER:
      return "\r";
    default:
      break;
  }
  if (name == "kLFT5" || name == "kLFT3")
    return "\x1b"
           "b";  // word left
  if (name == "kRIT5" || name == "kRIT3")
    return "\x1b"
           "f";  // word right
  return nullptr;
}

class ChatLoop {
 public:
  explicit ChatLoop(const ChatUiOptions& o)
      : opt_(o),
        screen_(o.config.ui),
        editor_("› ", history_path()),
        engine_(o.engine),
        controller_(
            state_, [this](Command c) { engine_.post(std::move(c)); },
            [this] { engine_.cancel(); }) {
    state_.sampling = o.engine.sampling;
    state_.key_panel = o.config.keys.toggle_panel;
    state_.key_debug = o.config.keys.toggle_debug;
    // Always set: a folder that cannot be made is a failed autosave, said on
    // the screen (Controller::autosave), not a silent "off".
    state_.autosave = new_autosave_path();
    if (o.engine.profiling) engine_.post(cmd::SetProfiling{true});
    if (!o.log_problem.empty()) state_.transcript.add(EntryKind::Info, o.log_problem);
    if (o.resume) resume();
  }

  // Returns the exit status: 0, or 128 + the signal (SIGTERM, SIGHUP,
  // SIGQUIT) that ended the session.
  int run() {
    const int sig_fd = take_signals_fd_;
    int quit_signal = 0;
    draw();  // "loading…" while the engine thread loads the model
    while (!state_.quit) {
      pollfd fds[3] = {
          {STDIN_FILENO, POLLIN, 0}, {engine_.wake_fd(), POLLIN, 0}, {sig_fd, POLLIN, 0}};
      // Wake twice a second while a hint is up so it disappears on time.
      ::poll(fds, 3, state_.hint.empty() ? -1 : 500);
      const auto sig = take_signals();
      if (sig.terminate) {
        quit_signal = sig.terminate;
        break;
      }
      if (sig.resized) {
        screen_.resize();
        dirty_ = true;
      }
      read_keys();
      Event e;
      while (engine_.poll(e)) {
        controller_.on_event(e);
        dirty_ = true;
      }
      take_input_back();
      if (!state_.hint.empty() && std::chrono::steady_clock::now() >= state_.hint_until) {
        state_.hint.clear();
        dirty_ = true;
      }
      if (dirty_ || editor_.dirty) draw();
    }
    stop_reply();
    engine_.post(cmd::Shutdown{});
    return quit_signal ? 128 + quit_signal : 0;
  }

  int take_signals_fd_ = -1;

 private:
  static std::filesystem::path history_path() {
    const auto dir = config::state_dir();
    return config::ensure_dir(dir) ? dir / "history" : std::filesystem::path();
  }

  // Leaving during a reply: stop it and wait (the engine checks between
  // tokens) so that it is kept, marked stopped, and autosaved like any turn.
  void stop_reply() {
    if (!state_.generating) return;
    engine_.cancel();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    Event e;
    while (state_.generating && std::chrono::steady_clock::now() < end) {
      if (engine_.wait(e, std::chrono::milliseconds(100))) controller_.on_event(e);
    }
  }

  void resume() {
    const auto last = latest_autosave();
    if (!last) {
      controller_.set_hint("no saved conversation to resume", Style::Warning);
      return;
    }
    try {
      controller_.restore(read_conversation(*last), *last);
      controller_.set_hint("resumed " + last->string());
    } catch (const std::exception& e) {
      controller_.set_hint(e.what(), Style::Warning);
    }
  }

  Layout layout() const {
    const int width = screen_.cols();
    const auto input = layout_input(editor_.display_prompt(), editor_.text(), editor_.cursor(),
                                    std::max(2, width));
    return compute_layout(screen_.rows(), width, panel_wanted_now(), opt_.config.ui.panel_width,
                          static_cast<int>(input.lines.size()));
  }

  bool panel_wanted_now() const {
    const auto& ui = opt_.config.ui;
    return panel_wanted(state_.panel_choice, ui.panel, ui.panel_min_columns, screen_.cols());
  }

  void draw() {
    const Layout l = layout();
    if (!l.too_small) state_.transcript.set_width(l.transcript.w);
    const auto input = layout_input(editor_.display_prompt(), editor_.text(), editor_.cursor(),
                                    std::max(2, l.input.w));
    screen_.draw(state_, l, input);
    dirty_ = false;
    editor_.dirty = false;
  }

  int transcript_height() const { return std::max(1, layout().transcript.h); }

  void read_keys() {
    for (Key k = screen_.read_key(); k.kind != Key::None; k = screen_.read_key()) {
      dirty_ = true;
      if (in_paste_) {
        if (k.kind == Key::PasteEnd) {
          in_paste_ = false;
          editor_.paste(paste_);
          paste_.clear();
        } else if (k.kind == Key::Char) {
          paste_ += k.code == '\r' ? std::string("\n") : utf8(static_cast<char32_t>(k.code));
        }
        continue;
      }
      handle_key(k);
      while (auto line = editor_.take_submitted()) submit(*line);
      if (state_.quit) return;
    }
  }

  void submit(const Submitted& line) {
    if (line.eof) {
      state_.quit = true;
      return;
    }
    controller_.on_submit(line.text, line.starts_with_paste);
    take_input_back();
  }

  // A refused line goes back into the input line; when something new has
  // been typed there meanwhile, the refused one is in the history (Up).
  void take_input_back() {
    if (!state_.input_back) return;
    if (editor_.empty())
      editor_.set_text(state_.input_back->text, state_.input_back->starts_with_paste);
    state_.input_back.reset();
  }

  void handle_key(const Key& k) {
    const int h = transcript_height();
    switch (k.kind) {
      case Key::PasteBegin:
        in_paste_ = true;
        return;
      case Key::WheelUp:
        state_.transcript.scroll_up(opt_.config.ui.scroll_lines, h);
        return;
      case Key::WheelDown:
        state_.transcript.scroll_down(opt_.config.ui.scroll_lines, h);
        return;
      case Key::Char:
        return handle_char(k.code);
      case Key::Special:
        return handle_special(k, h);
      default:
        return;
    }
  }

  void handle_char(int c) {
    if (c == 3) {  // Ctrl-C
      if (controller_.on_interrupt(std::chrono::steady_clock::now())) editor_.clear_line();
      return;
    }
    if (c == 4 && editor_.empty()) {  // Ctrl-D on an empty line
      state_.quit = true;
      return;
    }
    if (c == 27) {
      // ncurses hands over ESC + key as two keys; Alt-Enter is a newline.
      Key next = screen_.read_key();
      if (next.kind == Key::Char && (next.code == '\r' || next.code == '\n')) {
        editor_.insert_newline();
        return;
      }
      std::string bytes = "\x1b";
      if (next.kind == Key::Char) bytes += utf8(static_cast<char32_t>(next.code));
      editor_.feed(bytes);
      if (next.kind != Key::Char && next.kind != Key::None) handle_key(next);
      return;
    }
    editor_.feed(utf8(static_cast<char32_t>(c)));
  }

  void handle_special(const Key& k, int h) {
    const auto& keys = opt_.config.keys;
    if (k.code == KEY_F(keys.toggle_panel)) {
      state_.panel_choice = !panel_wanted_now();
      if (*state_.panel_choice && !layout().panel_shown) {
        controller_.set_hint("the terminal is too narrow for the panel", Style::Warning);
      }
      return;
    }
    if (k.code == KEY_F(keys.toggle_debug)) return controller_.toggle_debug();
    switch (k.code) {
      case KEY_PPAGE:
        return state_.transcript.scroll_up(std::max(1, h - 2), h);
      case KEY_NPAGE:
        return state_.transcript.scroll_down(std::max(1, h - 2), h);
      case KEY_HOME:
        return state_.transcript.scroll_home(h);
      case KEY_END:
        return state_.transcript.scroll_end();
      case KEY_RESIZE:
        return;  // handled through SIGWINCH
      default:
        break;
    }
    if (const char* seq = readline_sequence(k.code, k.name)) editor_.feed(seq);
  }

  const ChatUiOptions& opt_;
  State state_;
  Screen screen_;
  LineEditor editor_;
  Engine engine_;
  Controller controller_;
  bool dirty_ = true;
  bool in_paste_ = false;
  std::string paste_;
};

}  // namespace

int run_chat_ui(const ChatUiOptions& options) {
  // PoCL and other drivers print to fd 2 while compiling kernels; that must
  // land in the log, not on the screen (nowhere when the log cannot be written).
  int saved_stderr = config::redirect_stderr(options.log_path);
  if (saved_stderr < 0) saved_stderr = config::redirect_stderr("/dev/null");
  const int sig_fd = install_signal_handlers();
  int rc = 0;
  try {
    ChatLoop loop(options);
    loop.take_signals_fd_ = sig_fd;
    rc = loop.run();
  } catch (...) {
    remove_signal_handlers();
    config::restore_stderr(saved_stderr);
    throw;  // after the loop's destructors have put the terminal back
  }
  remove_signal_handlers();
  config::restore_stderr(saved_stderr);
  return rc;
}

}  // namespace clchat::ui
