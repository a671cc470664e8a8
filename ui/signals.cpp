// Self-pipe signal handling and crash-time terminal restore (see signals.h).
#include "ui/signals.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace clchat::ui {

namespace {

int g_pipe[2] = {-1, -1};
volatile sig_atomic_t g_resized = 0;
volatile sig_atomic_t g_terminate = 0;
struct termios g_saved_termios;
bool g_have_termios = false;

constexpr int k_fatal[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
constexpr int k_quit[] = {SIGTERM, SIGHUP, SIGQUIT};

void wake() {
  const char c = 1;
  [[maybe_unused]] auto n = ::write(g_pipe[1], &c, 1);
}

void on_winch(int) {
  g_resized = 1;
  wake();
}

void on_quit(int sig) {
  g_terminate = sig;
  wake();
}

void on_fatal(int sig) {
  // Mouse and paste modes off, cursor on, leave the alternate screen.
  static const char k_reset[] =
      "\x1b[?1000l\x1b[?1002l\x1b[?1006l\x1b[?2004l\x1b[?25h\x1b[?1049l\r\n";
  [[maybe_unused]] auto n = ::write(STDOUT_FILENO, k_reset, sizeof k_reset - 1);
  if (g_have_termios) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void set_handler(int sig, void (*fn)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

}  // namespace

int install_signal_handlers() {
  g_have_termios = ::tcgetattr(STDIN_FILENO, &g_saved_termios) == 0;
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  set_handler(SIGWINCH, on_winch);
  for (int s : k_quit) set_handler(s, on_quit);
  for (int s : k_fatal) set_handler(s, on_fatal);
  ::signal(SIGPIPE, SIG_IGN);
  return g_pipe[0];
}

void remove_signal_handlers() {
  ::signal(SIGWINCH, SIG_DFL);
  for (int s : k_quit) ::signal(s, SIG_DFL);
  for (int s : k_fatal) ::signal(s, SIG_DFL);
}

SignalFlags take_signals() {
  char buf[64];
  while (::read(g_pipe[0], buf, sizeof buf) > 0) {
  }
  SignalFlags f;
  f.resized = g_resized != 0;
  f.terminate = g_terminate;
  g_resized = 0;
  g_terminate = 0;
  return f;
}

}  // namespace clchat::ui
