// Layout arithmetic (see layout.h).
#include "ui/layout.h"

#include <algorithm>

namespace clchat::ui {

bool panel_wanted(const std::optional<bool>& choice, bool panel, int panel_min_columns, int cols) {
  return choice.value_or(panel && cols >= panel_min_columns);
}

Layout compute_layout(int rows, int cols, bool panel_wanted, int panel_width, int input_lines) {
  Layout l;
  l.rows = rows;
  l.cols = cols;
  if (rows < k_min_rows || cols < k_min_cols) {
    l.too_small = true;
    return l;
  }
  // Status bar, hint line, and at least 3 transcript rows stay.
  const int input_h = std::clamp(input_lines, 1, std::min(k_max_input_lines, rows - 5));
  const int body_h = rows - input_h - 2;
  l.panel_shown = panel_wanted && cols - panel_width - 1 >= k_min_transcript_cols;
  const int panel_w = l.panel_shown ? panel_width : 0;
  // The panel has a one-column border on its left.
  l.transcript = {0, 0, body_h, cols - (l.panel_shown ? panel_w + 1 : 0)};
  if (l.panel_shown) l.panel = {0, cols - panel_w, body_h, panel_w};
  l.hint = {body_h, 0, 1, cols};
  l.input = {body_h + 1, 0, input_h, cols};
  l.status = {rows - 1, 0, 1, cols};
  return l;
}

}  // namespace clchat::ui
