// The ncurses side of the chat screen: start and stop curses, read keys, and
// draw a frame from const data (State, Layout, the input text). Everything
// drawn comes from the StyledLine builders, so this file only maps styles to
// attributes and puts lines in rectangles.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "ui/input_view.h"
#include "ui/layout.h"
#include "ui/state.h"

namespace clchat::ui {

// Keys beyond ncurses' own codes.
struct Key {
  enum Kind { None, Char, Special, PasteBegin, PasteEnd, WheelUp, WheelDown } kind = None;
  int code = 0;      // Char: the code point (U+FFFD for bytes that are not UTF-8);
                     // Special: the ncurses KEY_* code
  std::string name;  // Special: keyname(), e.g. "kLFT5" for Ctrl-Left
};

class Screen {
 public:
  explicit Screen(const config::Ui& ui);
  ~Screen();
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  int rows() const;
  int cols() const;
  bool unicode() const { return unicode_; }
  // After SIGWINCH: asks the kernel for the new size and tells ncurses.
  void resize();

  // The next key, or Key::None when no input is waiting.
  Key read_key();

  void draw(const State& s, const Layout& l, const InputView& input);

 private:
  int read_utf8(int lead);  // the code point that starts with byte `lead`
  void put_line(int y, int x, int w, const StyledLine& line);
  int attr_of(Style style) const;

  bool colors_ = false;
  bool unicode_ = true;
  bool mouse_ = false;
  int paste_begin_code_ = 0, paste_end_code_ = 0;
};

}  // namespace clchat::ui
