// SIGBUS-guarded copies from a file mapping (see mapped_copy.h).
#include "engine/gguf/mapped_copy.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

namespace clchat {

namespace {

// The armed jump point of this thread, or null.
thread_local sigjmp_buf* t_armed = nullptr;
struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* armed = t_armed) {
    t_armed = nullptr;
    siglongjmp(*armed, 1);
  }
  // Not a guarded copy: what would have happened without us.
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    std::signal(SIGBUS, SIG_DFL);
    std::raise(SIGBUS);
  }
}

}  // namespace

void install_sigbus_guard() {
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  struct sigaction current {};
  if (sigaction(SIGBUS, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus) return;
  g_previous = current;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  // SA_NODEFER: SIGBUS stays unblocked after the jump (sigsetjmp below does
  // not save the signal mask, which would cost a system call per copy).
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

bool copy_from_mapping(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) != 0) return false;  // the handler disarmed it
  t_armed = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_armed = nullptr;
  return true;
}

}  // namespace clchat
