// CLCHAT_FAULT parsing (see fault_injection.h).
#include "engine/fault_injection.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace clchat::fault {

Faults parse(std::string_view spec) {
  Faults f;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    constexpr std::string_view k_mem = "device_mem=";
    if (item == "build") {
      f.build = true;
    } else if (item == "alloc") {
      f.alloc = true;
    } else if (item == "enqueue") {
      f.enqueue = true;
    } else if (item.substr(0, k_mem.size()) == k_mem) {
      const std::string_view n = item.substr(k_mem.size());
      const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), f.device_mem);
      if (ec != std::errc() || end != n.data() + n.size() || f.device_mem == 0) {
        throw std::invalid_argument("CLCHAT_FAULT: device_mem needs a byte count > 0, not '" +
                                    std::string(n) + "'");
      }
    } else if (!item.empty()) {
      throw std::invalid_argument("CLCHAT_FAULT: unknown fault '" + std::string(item) +
                                  "' (known: build, alloc, enqueue, device_mem=BYTES)");
    }
  }
  return f;
}

const Faults& active() {
  static const Faults faults = [] {
    const char* v = std::getenv("CLCHAT_FAULT");
    return v ? parse(v) : Faults{};
  }();
  return faults;
}

cl_int alloc_error() { return active().alloc ? CL_MEM_OBJECT_ALLOCATION_FAILURE : CL_SUCCESS; }

cl_int enqueue_error() { return active().enqueue ? CL_OUT_OF_RESOURCES : CL_SUCCESS; }

}  // namespace clchat::fault
