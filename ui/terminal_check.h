// Can the chat screen run on this terminal? ncurses' initscr() prints
// "Error opening terminal: …" and exits when $TERM names no terminfo entry,
// and by then clchat's stderr goes to the log file, so the user would see
// nothing. terminal_problem() asks terminfo first, while stderr is still the
// terminal.
#pragma once

#include <optional>
#include <string>

namespace clchat::ui {

// A sentence saying why the terminal on stdout cannot be drawn on (unknown or
// unset TERM, no terminfo database, a hard-copy terminal), or nullopt.
std::optional<std::string> terminal_problem();

}  // namespace clchat::ui
