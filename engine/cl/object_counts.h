// Process-wide counts of the OpenCL objects clchat creates and releases, by
// kind, for leak checks (the line-mode soak compares them turn by turn). Every
// handle goes through ClHandle (engine/cl/runtime.h), which counts a non-null
// handle when it takes ownership and again when it releases it, so a count
// that grows while chatting is a leak and anything live at exit was never
// released. Counters are relaxed atomics: exact once the threads that touch
// OpenCL are idle.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <array>
#include <cstdint>
#include <string>

namespace clchat {

enum class ClObjectKind { buffer, kernel, program, event, queue, context };
inline constexpr size_t kClObjectKinds = 6;

// The kind of a handle type: cl_mem -> buffer, and so on.
constexpr ClObjectKind cl_object_kind(cl_mem) { return ClObjectKind::buffer; }
constexpr ClObjectKind cl_object_kind(cl_kernel) { return ClObjectKind::kernel; }
constexpr ClObjectKind cl_object_kind(cl_program) { return ClObjectKind::program; }
constexpr ClObjectKind cl_object_kind(cl_event) { return ClObjectKind::event; }
constexpr ClObjectKind cl_object_kind(cl_command_queue) { return ClObjectKind::queue; }
constexpr ClObjectKind cl_object_kind(cl_context) { return ClObjectKind::context; }

const char* cl_object_kind_name(ClObjectKind kind);  // "buffers", "kernels", ...

void note_cl_object_created(ClObjectKind kind);
void note_cl_object_released(ClObjectKind kind);

// A snapshot of the counters, indexed by ClObjectKind.
struct ClObjectCounts {
  std::array<uint64_t, kClObjectKinds> created{};
  std::array<uint64_t, kClObjectKinds> released{};

  int64_t live(ClObjectKind kind) const;
  int64_t total_live() const;
};

ClObjectCounts cl_object_counts();

// "live buffers 12 kernels 30 ... contexts 1 | created 50 released 7": the
// live count of each kind, then the totals over all kinds.
std::string format_cl_object_counts(const ClObjectCounts& counts);

}  // namespace clchat
