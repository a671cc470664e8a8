// CLCHAT_FAULT parsing (see fault_injection.h).
#include "engine/cl/fault_injection.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace clchat::fault {

namespace {

// N > 0 from the text after "name="; throws naming the fault otherwise.
uint64_t parse_count(std::string_view name, std::string_view text, const char* what) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n == 0) {
    throw std::invalid_argument("CLCHAT_FAULT: " + std::string(name) + " needs " + what +
                                " > 0, not '" + std::string(text) + "'");
  }
  return n;
}

}  // namespace

Faults parse(std::string_view spec) {
  Faults f;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    constexpr std::string_view k_mem = "device_mem=";
    constexpr std::string_view k_timeout = "barrier_timeout=";
    if (item == "build") {
      f.build = true;
    } else if (item == "alloc") {
      f.alloc = true;
    } else if (item == "enqueue") {
      f.enqueue = true;
    } else if (item.substr(0, k_mem.size()) == k_mem) {
      f.device_mem = parse_count("device_mem", item.substr(k_mem.size()), "a byte count");
    } else if (item.substr(0, k_timeout.size()) == k_timeout) {
      f.barrier_timeout =
          parse_count("barrier_timeout", item.substr(k_timeout.size()), "a token count");
    } else if (!item.empty()) {
      throw std::invalid_argument("CLCHAT_FAULT: unknown fault '" + std::string(item) +
                                  "' (known: build, alloc, enqueue, device_mem=BYTES, "
                                  "barrier_timeout=N)");
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
