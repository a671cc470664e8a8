// Copies out of a file mapping that survive the file shrinking underneath.
//
// GgufFile maps the model; when another process truncates the file while
// clchat reads it (issue 21: `truncate -s 1000000` during the load), every
// access to a page past the new end raises SIGBUS, which used to end clchat
// without a word. copy_from_mapping() is the one place that touches the
// mapping: it arms a per-thread sigsetjmp point around a memcpy, and a
// process-wide SIGBUS handler (install_sigbus_guard()) jumps back there when
// the fault comes from an armed thread, so the copy reports failure instead.
// Only the memcpy runs between the jump point and the fault: no C++ object
// is skipped. A SIGBUS anywhere else goes to the handler that was there
// before (the chat screen's terminal restore, or the default action).
#pragma once

#include <cstddef>

namespace clchat {

// Makes the guard's SIGBUS handler the current one, chaining to the one it
// replaces; a no-op (one sigaction query) while it already is. Call it
// before a series of copies: another part of clchat may have installed its
// own handler meanwhile (the chat screen does, for its terminal restore).
void install_sigbus_guard();

// memcpy(dst, src, n) from a mapped file; false when the mapping faulted
// (the file is now shorter than the range), leaving dst partly written.
// Needs install_sigbus_guard() to have run since any other SIGBUS handler
// was installed.
bool copy_from_mapping(void* dst, const void* src, size_t n) noexcept;

}  // namespace clchat
