#include "engine/cl/read_bandwidth.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/input_file.h"
#include "common/replace_file.h"
#include "engine/cl/programs.h"

namespace clchat {

namespace {

// The buffer: 1 GiB (far past any cache: a CPU's last level can be hundreds
// of MB; 256 MiB on this 2-core VM with 32 MiB of L3 gave 27-46 GB/s from
// run to run), at most a quarter of the device's memory and one allocation.
size_t stream_bytes(const DeviceInfo& d) {
  uint64_t b = uint64_t(1) << 30;
  if (d.global_mem_bytes > 0) b = std::min(b, d.global_mem_bytes / 4);
  if (d.max_alloc_bytes > 0) b = std::min(b, d.max_alloc_bytes);
  return size_t(b) / 16 * 16;
}

std::string device_key(const DeviceInfo& d) {
  return d.platform_name + " | " + d.name + " | " + d.driver_version;
}

std::filesystem::path cache_file(const std::string& folder) {
  return std::filesystem::path(folder) / "read-bandwidth.json";
}

// The file's figures; an empty object when it is missing, and (logged) when
// it is not a regular file of at most 1 MiB holding a JSON object.
nlohmann::json read_cache(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json::object();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_regular_file(path.string(), k_mib, "read-bandwidth cache"),
                              nullptr, false);
  } catch (const InputFileError& e) {
    spdlog::warn("{}; measuring the read bandwidth again", e.what());
    return nlohmann::json::object();
  }
  if (!j.is_object()) {
    spdlog::warn("{} is damaged; measuring the read bandwidth again", path.string());
    return nlohmann::json::object();
  }
  return j;
}

// A positive, finite bytes_per_s in entry, else 0.
double cached_value(const nlohmann::json& entry) {
  if (!entry.is_object() || !entry.contains("bytes_per_s")) return 0;
  const nlohmann::json& v = entry["bytes_per_s"];
  if (!v.is_number()) return 0;
  const double d = v.get<double>();
  return std::isfinite(d) && d > 0 ? d : 0;
}

void write_cache(const std::filesystem::path& path, const nlohmann::json& j) {
  // (A device or driver name that is not UTF-8 is written with U+FFFD.)
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::error_code ec = replace_file(path, text + "\n");
  if (ec) spdlog::warn("could not store the read bandwidth in {}: {}", path.string(), ec.message());
}

}  // namespace

double measure_read_bandwidth(const ClRuntime& rt) {
  const DeviceInfo& d = rt.device();
  const size_t bytes = stream_bytes(d);
  const cl_ulong n16 = bytes / 16;
  const size_t local = std::min<size_t>(256, std::max<size_t>(1, d.max_work_group_size));
  const size_t per_unit = d.is_cpu ? 1 : 8;  // GPUs: several work-groups per compute unit
  const size_t global = local * per_unit * std::max<uint32_t>(1, d.compute_units);
  ClMem src = rt.alloc(bytes);
  ClMem sink = rt.alloc(global * 4);
  // Not zeros: a host may map never-written or zeroed pages to one shared page
  // (then the kernel reads a cache, not memory).
  const cl_uint pattern = 0x5a5a5a5au;
  cl_check(clEnqueueFillBuffer(rt.queue(), src.get(), &pattern, sizeof(pattern), 0, bytes, 0,
                               nullptr, nullptr),
           "clEnqueueFillBuffer");
  const ClProgram program =
      rt.build_program("read_bandwidth", kernel_source("read_bandwidth"), "-cl-std=CL1.2");
  const ClKernel kernel = rt.create_kernel(program, "read_stream");
  const cl_ulong per_item = d.is_cpu ? (n16 + global - 1) / global : 0;
  bind_args(kernel, {{"src", src}, {"n", n16}, {"per_item", per_item}, {"sink", sink}});
  auto launch = [&] {
    cl_check(clEnqueueNDRangeKernel(rt.queue(), kernel.get(), 1, nullptr, &global, &local, 0,
                                    nullptr, nullptr),
             "clEnqueueNDRangeKernel(read_stream)");
  };
  launch();  // warm-up: the first touch of the buffer, the kernel's first launch
  rt.finish();
  // Rounds of launches until 50 ms have passed, enqueued 8 at a time (a
  // GPU reads the buffer in well under a millisecond: waiting for each launch
  // would count the host's round trips); the best round's rate.
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    double s = 0;
    do {
      for (int k = 0; k < 8; ++k) launch();
      rt.finish();
      n += 8;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 0.05);
    best = std::max(best, double(bytes) * n / s);
  }
  return best;
}

ReadBandwidth device_read_bandwidth(const ClRuntime& rt, const std::string& folder) {
  const std::filesystem::path path = cache_file(folder);
  nlohmann::json j = read_cache(path);
  const std::string key = device_key(rt.device());
  if (j.contains(key)) {
    const double v = cached_value(j[key]);
    if (v > 0) return {v, true};
    spdlog::warn("{}: the entry for {} is damaged; measuring again", path.string(),
                 rt.device().name);
  }
  const double v = measure_read_bandwidth(rt);
  j[key] = {{"device", rt.device().name}, {"bytes_per_s", v}};
  write_cache(path, j);
  return {v, false};
}

}  // namespace clchat
