// How fast a device reads its global memory, for `clchat bench`'s "fraction
// of the device's read bandwidth": a streaming kernel (kernels/read_bandwidth.cl)
// over a buffer several times the device's cache, timed on the host, the best
// of a few rounds. Measured once per device and driver, then kept in
// read-bandwidth.json in the kernel cache folder; a damaged file is measured
// again and rewritten (logged), and a file that cannot be written costs only
// the next measurement.
#pragma once

#include <string>

#include "engine/cl/runtime.h"

namespace clchat {

struct ReadBandwidth {
  double bytes_per_s = 0;
  bool cached = false;  // read from the cache file, not measured now
};

// The streaming kernel's bytes per second on rt's device (no cache).
double measure_read_bandwidth(const ClRuntime& rt);

// The cached figure for rt's device from `folder`/read-bandwidth.json, else
// measured and stored there.
ReadBandwidth device_read_bandwidth(const ClRuntime& rt, const std::string& folder);

}  // namespace clchat
