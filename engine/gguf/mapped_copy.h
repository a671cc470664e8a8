// Copies out of a file mapping that survive the file shrinking underneath.
//
// GgufFile maps the model; when another process truncates the file while
// clchat reads it (issue 21: `truncate -s 1000000` during the load), every
// access to a page past the new end raises SIGBUS, which used to end clchat
// without a word. copy_from_mapping() is the one place that touches the
// mapping: it arms a per-thread sigsetjmp point around a memcpy, and a
// process-wide SIGBUS handler (installed on first use) jumps back there when
// the fault comes from an armed thread, so the copy reports failure instead.
// Only the memcpy runs between the jump point and the fault: no C++ object
// is skipped. A SIGBUS anywhere else goes to the handler that was there
// before (or the default action).
#pragma once

#include <cstddef>

namespace clchat {

// memcpy(dst, src, n) from a mapped file; false when the mapping faulted
// (the file is now shorter than the range), leaving dst partly written.
bool copy_from_mapping(void* dst, const void* src, size_t n) noexcept;

}  // namespace clchat
