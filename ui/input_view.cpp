// Input line layout (see input_view.h).
#include "ui/input_view.h"

#include <algorithm>

#include "ui/text.h"

namespace clchat::ui {

InputView layout_input(std::string_view prompt, std::string_view text, size_t cursor, int width) {
  InputView v;
  width = std::max(width, 2);
  const std::string head = fit_width(prompt, width - 1);
  const int indent = display_width(head);
  v.lines.push_back(head);
  int col = indent;
  auto new_line = [&] {
    v.lines.emplace_back(static_cast<size_t>(indent), ' ');
    col = indent;
  };
  const auto place = [&] {
    v.cursor_row = static_cast<int>(v.lines.size()) - 1;
    v.cursor_col = std::min(col, width - 1);
  };
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      if (i == cursor) place();
      new_line();
      ++i;
      continue;
    }
    size_t next = i;
    const int cw = codepoint_width(next_codepoint(text, next));
    if (col + cw > width) new_line();
    if (i == cursor) place();
    v.lines.back().append(text.substr(i, next - i));
    col += cw;
    i = next;
  }
  if (cursor >= text.size()) {
    if (col >= width) new_line();
    place();
  }
  return v;
}

}  // namespace clchat::ui
