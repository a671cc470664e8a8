// Screen geometry, recomputed from the terminal size on every resize:
//
//   +-------------------------------+----------+
//   | transcript                    | panel    |
//   |                               |          |
//   +---- hint / activity line -----+----------+
//   | input (1..k lines)                       |
//   +------------------------------------------+
//   | status bar                               |
//   +------------------------------------------+
#pragma once

#include <optional>

namespace clchat::ui {

struct Rect {
  int y = 0, x = 0, h = 0, w = 0;
};

struct Layout {
  int rows = 0, cols = 0;
  bool too_small = false;
  bool panel_shown = false;
  Rect transcript, panel, hint, input, status;
};

inline constexpr int k_min_cols = 30;
inline constexpr int k_min_rows = 8;
inline constexpr int k_min_transcript_cols = 40;  // the panel hides rather than squeeze below
inline constexpr int k_max_input_lines = 6;

// Whether the panel is wanted at `cols` columns: F2's `choice` when there is
// one, else the config's `panel` at `panel_min_columns` columns or more.
bool panel_wanted(const std::optional<bool>& choice, bool panel, int panel_min_columns, int cols);

// `input_lines` is the height the input text wants (clamped to
// 1..k_max_input_lines and to what leaves the transcript 3 rows).
Layout compute_layout(int rows, int cols, bool panel_wanted, int panel_width, int input_lines);

}  // namespace clchat::ui
