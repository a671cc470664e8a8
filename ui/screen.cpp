// ncurses set-up, key reading and frame drawing (see screen.h).
#include "ui/screen.h"

#define NCURSES_WIDECHAR 1
#include <langinfo.h>
#include <ncurses.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/utf8.h"
#include "ui/perf.h"
#include "ui/status.h"
#include "ui/text.h"

namespace clchat::ui {

namespace {

constexpr Style k_styles[] = {Style::Normal, Style::User,  Style::Assistant, Style::System,
                              Style::Accent, Style::Bar,   Style::Warning,   Style::Dim,
                              Style::Title,  Style::Status};

// A key code nothing else uses, for define_key().
int free_key_code(int after) {
  for (int code = after + 1; code < KEY_MAX + 4096; ++code) {
    char* bound = keybound(code, 0);
    if (!bound) return code;
    std::free(bound);
  }
  return 0;
}

void write_tty(const char* s) {
  std::fputs(s, stdout);
  std::fflush(stdout);
}

}  // namespace

Screen::Screen(const config::Ui& ui) {
  unicode_ = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  // Alt-keys arrive as ESC + key; 25 ms is enough to tell them from a lone Esc.
  set_escdelay(25);
  initscr();
  raw();  // Ctrl-C and Ctrl-Z reach us as keys, not signals
  noecho();
  nonl();
  keypad(stdscr, TRUE);
  nodelay(stdscr, TRUE);
  const bool no_color = std::getenv("NO_COLOR") && *std::getenv("NO_COLOR");
  if (ui.color != "never" && !no_color && has_colors()) {
    start_color();
    use_default_colors();
    colors_ = true;
    const auto c = [](const std::string& name) { return config::color_number(name).value_or(-1); };
    const auto& k = ui.colors;
    init_pair(1, c(k.user), -1);
    init_pair(2, c(k.assistant), -1);
    init_pair(3, c(k.system), -1);
    init_pair(4, c(k.accent), -1);
    init_pair(5, c(k.bar), -1);
    init_pair(6, c(k.warning), -1);
    init_pair(7, COLOR_BLACK, c(k.accent) < 0 ? COLOR_GREEN : c(k.accent));
  }
  paste_begin_code_ = free_key_code(KEY_MAX);
  define_key("\x1b[200~", paste_begin_code_);
  paste_end_code_ = free_key_code(paste_begin_code_);
  define_key("\x1b[201~", paste_end_code_);
  write_tty("\x1b[?2004h");  // bracketed paste on
  if (ui.mouse) {
    mouse_ = true;
    mousemask(BUTTON4_PRESSED | BUTTON5_PRESSED, nullptr);
    mouseinterval(0);
  }
}

Screen::~Screen() {
  write_tty("\x1b[?2004l");
  if (mouse_) mousemask(0, nullptr);
  endwin();
}

int Screen::rows() const { return LINES; }
int Screen::cols() const { return COLS; }

void Screen::resize() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    resizeterm(ws.ws_row, ws.ws_col);
  }
  clearok(curscr, TRUE);  // repaint everything: the terminal may have reflowed
}

// One character from the bytes of the terminal, decoded here rather than by
// wget_wch(), which drops the byte after an ill-formed sequence with it: a
// sequence that is not a character becomes U+FFFD, and the byte that broke
// it is read again as the start of the next key.
int Screen::read_utf8(int lead) {
  constexpr int k_replacement = 0xFFFD;
  const int need = utf8_sequence_length(static_cast<uint8_t>(lead));
  if (need == 0) return k_replacement;
  std::string bytes(1, static_cast<char>(lead));
  wtimeout(stdscr, 20);  // the rest of a character follows at once
  while (static_cast<int>(bytes.size()) < need) {
    const int c = wgetch(stdscr);
    if (c < 0x80 || c > 0xBF) {
      if (c != ERR) ungetch(c);
      break;
    }
    bytes += static_cast<char>(c);
  }
  nodelay(stdscr, TRUE);
  const Utf8Char ch = decode_utf8_char(bytes, 0);
  if (ch.length != static_cast<int>(bytes.size())) return k_replacement;
  return static_cast<int>(ch.code_point);
}

Key Screen::read_key() {
  const int code = wgetch(stdscr);
  Key k;
  if (code == ERR) return k;
  if (code >= 0 && code <= 0xFF) {
    k.kind = Key::Char;
    k.code = code < 0x80 ? code : read_utf8(code);
    return k;
  }
  if (code == paste_begin_code_) {
    k.kind = Key::PasteBegin;
  } else if (code == paste_end_code_) {
    k.kind = Key::PasteEnd;
  } else if (code == KEY_MOUSE) {
    MEVENT m;
    if (getmouse(&m) == OK) {
      if (m.bstate & BUTTON4_PRESSED) k.kind = Key::WheelUp;
      if (m.bstate & BUTTON5_PRESSED) k.kind = Key::WheelDown;
    }
  } else {
    k.kind = Key::Special;
    k.code = code;
    if (const char* name = keyname(code)) k.name = name;
  }
  return k;
}

int Screen::attr_of(Style style) const {
  if (!colors_) {
    switch (style) {
      case Style::User:
      case Style::Title:
      case Style::Accent:
        return A_BOLD;
      case Style::Warning:
        return A_BOLD | A_UNDERLINE;
      case Style::Dim:
      case Style::System:
        return A_DIM;
      case Style::Status:
        return A_REVERSE;
      default:
        return A_NORMAL;
    }
  }
  switch (style) {
    case Style::User:
      return COLOR_PAIR(1) | A_BOLD;
    case Style::Assistant:
      return COLOR_PAIR(2);
    case Style::System:
      return COLOR_PAIR(3);
    case Style::Accent:
      return COLOR_PAIR(4) | A_BOLD;
    case Style::Bar:
      return COLOR_PAIR(5);
    case Style::Warning:
      return COLOR_PAIR(6) | A_BOLD;
    case Style::Dim:
      return A_DIM;
    case Style::Title:
      return A_BOLD;
    case Style::Status:
      return COLOR_PAIR(7);
    default:
      return A_NORMAL;
  }
}

void Screen::put_line(int y, int x, int w, const StyledLine& line) {
  int col = 0;
  for (const auto& span : line.spans) {
    if (col >= w) break;
    const std::string text = fit_width(span.text, w - col);
    if (text.empty()) continue;
    attrset(attr_of(span.style));
    mvaddstr(y, x + col, text.c_str());
    col += display_width(text);
  }
  attrset(A_NORMAL);
}

void Screen::draw(const State& s, const Layout& l, const InputView& input) {
  erase();
  if (l.too_small) {
    const std::string msg =
        "terminal too small: need " + std::to_string(k_min_cols) + "x" + std::to_string(k_min_rows);
    const int y = l.rows / 2;
    const int w = std::max(1, l.cols);
    put_line(y, 0, w, StyledLine(fit_width(msg, w), Style::Warning));
    curs_set(0);
    refresh();
    return;
  }
  const auto lines = s.transcript.visible(l.transcript.h);
  for (int i = 0; i < static_cast<int>(lines.size()) && i < l.transcript.h; ++i) {
    put_line(l.transcript.y + i, l.transcript.x, l.transcript.w, lines[static_cast<size_t>(i)]);
  }
  if (l.panel_shown) {
    attrset(A_DIM);
    mvvline(l.panel.y, l.panel.x - 1, unicode_ ? ACS_VLINE : '|', l.panel.h);
    attrset(A_NORMAL);
    const auto panel = build_panel(s.perf, s.debug, l.panel.w, l.panel.h, unicode_);
    for (int i = 0; i < l.panel.h; ++i) {
      put_line(l.panel.y + i, l.panel.x, l.panel.w, panel[static_cast<size_t>(i)]);
    }
  }
  put_line(l.hint.y, 0, l.hint.w,
           build_hint_line(s, l.hint.w, unicode_, std::chrono::steady_clock::now()));
  // The input shows its last rows when it is taller than its window, with the
  // cursor's row always among them.
  const int n = static_cast<int>(input.lines.size());
  int first = std::max(0, n - l.input.h);
  first = std::min(first, input.cursor_row);
  for (int i = 0; i < l.input.h && first + i < n; ++i) {
    put_line(l.input.y + i, 0, l.input.w,
             StyledLine(input.lines[static_cast<size_t>(first + i)], Style::Normal));
  }
  put_line(l.status.y, 0, l.status.w, build_status_line(s, l.status.w));
  curs_set(1);
  move(l.input.y + input.cursor_row - first, input.cursor_col);
  refresh();
}

}  // namespace clchat::ui
