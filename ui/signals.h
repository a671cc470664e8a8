// Signals while the chat screen owns the terminal, done the btop way: the
// handlers only set flags and write a byte to a self-pipe that the main loop
// poll()s, so a resize or SIGTERM wakes it at once. Fatal signals (SIGSEGV,
// SIGABRT, SIGBUS, SIGFPE, SIGILL) first put the terminal back (termios saved
// before ncurses started, mouse/paste modes off, alternate screen left) with
// async-signal-safe calls only, then die with the default action.
#pragma once

namespace clchat::ui {

struct SignalFlags {
  bool resized = false;
  int terminate = 0;  // SIGTERM, SIGHUP or SIGQUIT when one arrived, else 0
};

// Saves the terminal state and installs the handlers. Returns the read end of
// the self-pipe.
int install_signal_handlers();
void remove_signal_handlers();
// Drains the pipe and returns (and clears) what happened since the last call.
SignalFlags take_signals();

}  // namespace clchat::ui
