// Defaults for the sanitizer runtimes when clchat is built with
// CLCHAT_SANITIZE=ON (the hooks below are unused otherwise). They are compiled
// in because tests start clchat with a clean environment (the tmux tests use
// `env -i`), where ASAN_OPTIONS and LSAN_OPTIONS from .ci/sanitize never
// arrive:
// - use_sigaltstack=0: without it ASan fails a CHECK ("unable to unmap" its
//   alternate signal stack) when a thread exits in a process using PoCL;
// - the leak suppressions of .ci/lsan.supp: the OpenCL driver stack (PoCL, the
//   LLVM it compiles with, the ICD loader) keeps state it never frees.
extern "C" {

const char* __asan_default_options() { return "use_sigaltstack=0"; }

const char* __lsan_default_suppressions() {
  return "leak:libpocl.so\nleak:libLLVM-15.so\nleak:libclang-cpp.so\nleak:libOpenCL.so\n";
}

}  // extern "C"
