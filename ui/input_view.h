// Where the input text goes on screen: the prompt, then the text broken at
// '\n' (Alt-Enter) and at the window width, between code points, with the
// continuation lines indented under the text. Character wrapping rather than
// word wrapping keeps the cursor's place obvious while editing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace clchat::ui {

struct InputView {
  std::vector<std::string> lines;  // at least one
  int cursor_row = 0, cursor_col = 0;
};

// `cursor` is a byte offset into text (readline's rl_point).
InputView layout_input(std::string_view prompt, std::string_view text, size_t cursor, int width);

}  // namespace clchat::ui
