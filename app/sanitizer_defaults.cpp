// Defaults for the sanitizer runtimes when clchat is built with
// CLCHAT_SANITIZE=ON (the hooks below are unused otherwise). They are compiled
// in because tests start clchat with a clean environment (the tmux tests use
// `env -i`), where ASAN_OPTIONS and LSAN_OPTIONS from .ci/sanitize never
// arrive:
// - use_sigaltstack=0: without it ASan fails a CHECK ("unable to unmap" its
//   alternate signal stack) when a thread exits in a process using PoCL;
// - intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC <= 13 and
//   LLVM <= 16 takes a dynamic TLS block (PoCL and the libraries it loads have
//   them) whose start lies 16 bytes into a page for a glibc < 2.25 header and
//   reads the words before it; LeakSanitizer's tracer then dies at exit
//   ("Tracer caught signal 11", fresh-root CI 2026-11-22, tmux test under
//   ASan) with no leak found. Off, dynamic TLS is not scanned as a root,
//   which could only add reports, and none are seen;
// - the leak suppressions of .ci/lsan.supp: the OpenCL driver stack (PoCL, the
//   LLVM it compiles with, the ICD loader) keeps state it never frees;
// - print_suppressions=0, as .ci/sanitize sets it: LeakSanitizer's table of
//   the suppressions it used goes to stderr at exit, which is the terminal the
//   chat screen owns (Tui.UnwritableStateIsSaidOnTheScreenNotOnStderr reads
//   it and wants nothing there).
extern "C" {

const char* __asan_default_options() { return "use_sigaltstack=0:intercept_tls_get_addr=0"; }

const char* __lsan_default_options() { return "print_suppressions=0"; }

const char* __lsan_default_suppressions() {
  return "leak:libpocl.so\nleak:libLLVM-15.so\nleak:libclang-cpp.so\nleak:libOpenCL.so\n";
}

}  // extern "C"
