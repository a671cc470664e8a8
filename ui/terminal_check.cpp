// terminfo look-up before the screen starts (see terminal_check.h).
#include "ui/terminal_check.h"

#include <ncurses.h>
#include <term.h>
#include <unistd.h>

#include <cstdlib>

namespace clchat::ui {

std::optional<std::string> terminal_problem() {
  const char* term = std::getenv("TERM");
  if (!term || !*term) {
    return "TERM is not set, so the chat screen cannot draw; set it (e.g. TERM=xterm-256color) "
           "or redirect stdin to chat line by line";
  }
  int err = 0;
  if (setupterm(nullptr, STDOUT_FILENO, &err) != OK) {
    const std::string name(term);
    if (err == 1)
      return "terminal type '" + name +
             "' is a hard-copy terminal; the chat screen needs a display";
    if (err == -1) return "no terminfo database found for terminal type '" + name + "'";
    return "terminal type '" + name +
           "' is not in the terminfo database; set TERM to a known type (e.g. TERM=xterm-256color) "
           "or redirect stdin to chat line by line";
  }
  del_curterm(cur_term);  // initscr() sets the terminal up again
  return std::nullopt;
}

}  // namespace clchat::ui
