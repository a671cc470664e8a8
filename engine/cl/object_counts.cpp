// Counters behind engine/cl/object_counts.h.
#include "engine/cl/object_counts.h"

#include <atomic>
#include <numeric>

namespace clchat {
namespace {

struct Counters {
  std::array<std::atomic<uint64_t>, kClObjectKinds> created{};
  std::array<std::atomic<uint64_t>, kClObjectKinds> released{};
};

Counters& counters() {
  static Counters c;
  return c;
}

size_t index_of(ClObjectKind kind) { return static_cast<size_t>(kind); }

}  // namespace

const char* cl_object_kind_name(ClObjectKind kind) {
  switch (kind) {
    case ClObjectKind::buffer:
      return "buffers";
    case ClObjectKind::kernel:
      return "kernels";
    case ClObjectKind::program:
      return "programs";
    case ClObjectKind::event:
      return "events";
    case ClObjectKind::queue:
      return "queues";
    case ClObjectKind::context:
      return "contexts";
  }
  return "?";
}

void note_cl_object_created(ClObjectKind kind) {
  counters().created[index_of(kind)].fetch_add(1, std::memory_order_relaxed);
}

void note_cl_object_released(ClObjectKind kind) {
  counters().released[index_of(kind)].fetch_add(1, std::memory_order_relaxed);
}

int64_t ClObjectCounts::live(ClObjectKind kind) const {
  return int64_t(created[index_of(kind)]) - int64_t(released[index_of(kind)]);
}

int64_t ClObjectCounts::total_live() const {
  const uint64_t c = std::accumulate(created.begin(), created.end(), uint64_t(0));
  const uint64_t r = std::accumulate(released.begin(), released.end(), uint64_t(0));
  return int64_t(c) - int64_t(r);
}

ClObjectCounts cl_object_counts() {
  ClObjectCounts s;
  for (size_t i = 0; i < kClObjectKinds; ++i) {
    s.created[i] = counters().created[i].load(std::memory_order_relaxed);
    s.released[i] = counters().released[i].load(std::memory_order_relaxed);
  }
  return s;
}

std::string format_cl_object_counts(const ClObjectCounts& counts) {
  std::string line = "live";
  uint64_t created = 0, released = 0;
  for (size_t i = 0; i < kClObjectKinds; ++i) {
    const auto kind = static_cast<ClObjectKind>(i);
    line += std::string(" ") + cl_object_kind_name(kind) + " " + std::to_string(counts.live(kind));
    created += counts.created[i];
    released += counts.released[i];
  }
  line += " | created " + std::to_string(created) + " released " + std::to_string(released);
  return line;
}

}  // namespace clchat
