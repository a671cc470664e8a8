// OpenCL discovery, selection, context/queue, program cache.
#include "engine/cl/runtime.h"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "engine/cl/build_error.h"
#include "engine/cl/fault_injection.h"
#include "engine/cl/kernel_cache.h"
#include "engine/cl/kernel_cache_entry.h"

namespace clchat {

const char* cl_error_name(cl_int code) {
  switch (code) {
#define CASE(x) \
  case x:       \
    return #x;
    CASE(CL_SUCCESS)
    CASE(CL_DEVICE_NOT_FOUND)
    CASE(CL_DEVICE_NOT_AVAILABLE)
    CASE(CL_COMPILER_NOT_AVAILABLE)
    CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    CASE(CL_OUT_OF_RESOURCES)
    CASE(CL_OUT_OF_HOST_MEMORY)
    CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    CASE(CL_BUILD_PROGRAM_FAILURE)
    CASE(CL_INVALID_VALUE)
    CASE(CL_INVALID_DEVICE)
    CASE(CL_INVALID_BINARY)
    CASE(CL_INVALID_BUILD_OPTIONS)
    CASE(CL_INVALID_PROGRAM)
    CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    CASE(CL_INVALID_KERNEL_NAME)
    CASE(CL_INVALID_KERNEL)
    CASE(CL_INVALID_ARG_INDEX)
    CASE(CL_INVALID_ARG_VALUE)
    CASE(CL_INVALID_MEM_OBJECT)
    CASE(CL_INVALID_ARG_SIZE)
    CASE(CL_INVALID_KERNEL_ARGS)
    CASE(CL_INVALID_WORK_DIMENSION)
    CASE(CL_INVALID_WORK_GROUP_SIZE)
    CASE(CL_INVALID_WORK_ITEM_SIZE)
    CASE(CL_INVALID_GLOBAL_OFFSET)
    CASE(CL_INVALID_EVENT_WAIT_LIST)
    CASE(CL_INVALID_EVENT)
    CASE(CL_INVALID_OPERATION)
    CASE(CL_INVALID_BUFFER_SIZE)
    CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    CASE(CL_INVALID_COMMAND_QUEUE)
    CASE(CL_INVALID_CONTEXT)
    CASE(CL_INVALID_PLATFORM)
#undef CASE
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "unknown OpenCL error";
  }
}

void cl_check(cl_int code, const char* call) {
  if (code != CL_SUCCESS) {
    throw ClError(
        std::string(call) + " failed: " + cl_error_name(code) + " (" + std::to_string(code) + ")",
        code);
  }
}

namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof(T), &v, nullptr);
  return v;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string describe_all(const std::vector<DeviceInfo>& devices) {
  std::string s;
  for (const auto& d : devices) {
    s += (s.empty() ? "" : ", ") + std::to_string(d.index) + ": " + d.name + " (" +
         (d.is_gpu   ? "gpu"
          : d.is_cpu ? "cpu"
                     : "other") +
         ")";
  }
  return s;
}

constexpr const char* k_no_platform_help =
    "no OpenCL platform found. Install an OpenCL driver: on Debian/Ubuntu "
    "`apt-get install pocl-opencl-icd` runs on the CPU; for NVIDIA GPUs install the NVIDIA "
    "driver's OpenCL ICD (libnvidia-compute / nvidia-opencl-icd)";

// Before the first OpenCL call: PoCL's CPU driver pins worker thread i to
// core i when POCL_AFFINITY=1. Unpinned, Linux wakes the second worker on
// the core of the first one, where it waits ~3.5 ms for a time slice: the
// persistent decode kernel's work-groups (one per worker) then meet at their
// first barrier milliseconds late. Set only when the user has not set it and
// this process may run on exactly CPUs 0..n-1 (PoCL pins to index i whatever
// the process's CPU set is, and newer versions abort when that fails, e.g.
// under `taskset -c 2,3` or a container's cpuset). PoCL reads the variable
// when it starts its workers; other drivers ignore it.
void prepare_opencl_environment() {
  static const bool done = [] {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
    const int n = CPU_COUNT(&allowed);
    for (int i = 0; i < n; ++i) {
      if (!CPU_ISSET(i, &allowed)) return false;
    }
    return setenv("POCL_AFFINITY", "1", /*overwrite=*/0) == 0;
  }();
  (void)done;
}

// No device at all: no platform (no driver installed), or platforms whose
// devices failed to start. PoCL, for one, offers no device when it cannot
// create its kernel cache directory.
std::string no_device_help() {
  prepare_opencl_environment();
  cl_uint n_platforms = 0;
  if (clGetPlatformIDs(0, nullptr, &n_platforms) != CL_SUCCESS || n_platforms == 0) {
    return k_no_platform_help;
  }
  std::vector<cl_platform_id> platforms(n_platforms);
  clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
  std::string names;
  for (cl_platform_id p : platforms) {
    names += (names.empty() ? "" : ", ") + platform_string(p, CL_PLATFORM_NAME);
  }
  return "OpenCL platform found (" + names +
         ") but it offers no device; its driver failed to start (PoCL needs a writable cache "
         "directory: $POCL_CACHE_DIR, else $XDG_CACHE_HOME/pocl or ~/.cache/pocl)";
}

}  // namespace

bool DeviceInfo::has_extension(const std::string& ext) const {
  std::istringstream in(extensions);
  std::string word;
  while (in >> word) {
    if (word == ext) return true;
  }
  return false;
}

std::vector<DeviceInfo> list_devices() {
  prepare_opencl_environment();
  std::vector<DeviceInfo> out;
  cl_uint n_platforms = 0;
  if (clGetPlatformIDs(0, nullptr, &n_platforms) != CL_SUCCESS || n_platforms == 0) return out;
  std::vector<cl_platform_id> platforms(n_platforms);
  clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint n_devices = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n_devices) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devices(n_devices);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n_devices, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      DeviceInfo info;
      info.index = int(out.size());
      info.platform = p;
      info.device = d;
      info.platform_name = platform_string(p, CL_PLATFORM_NAME);
      info.name = device_string(d, CL_DEVICE_NAME);
      info.vendor = device_string(d, CL_DEVICE_VENDOR);
      info.driver_version = device_string(d, CL_DRIVER_VERSION);
      info.opencl_c_version = device_string(d, CL_DEVICE_OPENCL_C_VERSION);
      const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
      info.is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
      info.is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
      info.compute_units = device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
      info.global_mem_bytes = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
      info.max_alloc_bytes = device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      info.local_mem_bytes = device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
      info.global_cache_bytes = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE);
      info.max_work_group_size = device_value<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      info.extensions = device_string(d, CL_DEVICE_EXTENSIONS);
      if (const uint64_t limit = fault::active().device_mem) {
        info.global_mem_bytes = info.max_alloc_bytes = limit;
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

DeviceInfo select_device(const std::string& spec_in) {
  const auto devices = list_devices();
  if (devices.empty()) throw NoDeviceError(no_device_help());
  const std::string spec = lower(spec_in);
  auto first = [&](auto pred) -> const DeviceInfo* {
    for (const auto& d : devices) {
      if (pred(d)) return &d;
    }
    return nullptr;
  };
  const DeviceInfo* found = nullptr;
  if (spec.empty() || spec == "auto") {
    found = first([](const DeviceInfo& d) { return d.is_gpu; });
    if (!found) found = first([](const DeviceInfo& d) { return d.is_cpu; });
    if (!found) found = &devices.front();
  } else if (spec == "gpu") {
    found = first([](const DeviceInfo& d) { return d.is_gpu; });
  } else if (spec == "cpu") {
    found = first([](const DeviceInfo& d) { return d.is_cpu; });
  } else if (std::all_of(spec.begin(), spec.end(), ::isdigit) && spec.size() < 6) {
    const int index = std::stoi(spec);
    found = first([&](const DeviceInfo& d) { return d.index == index; });
  } else {
    found = first([&](const DeviceInfo& d) {
      return lower(d.name).find(spec) != std::string::npos ||
             lower(d.platform_name).find(spec) != std::string::npos;
    });
  }
  if (!found) {
    throw NoDeviceError("no OpenCL device matches --device '" + spec_in + "'; available: " +
                        describe_all(devices) + " (select with --device cpu|gpu|INDEX|NAME)");
  }
  return *found;
}

ClRuntime::ClRuntime(const DeviceInfo& device, bool profiling, const std::string& kernel_cache)
    : device_(device),
      profiling_(profiling),
      kernel_cache_(kernel_cache.empty() ? default_kernel_cache_dir() : kernel_cache) {
  cl_int err = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         cl_context_properties(device.platform), 0};
  context_ = ClContextHandle(clCreateContext(props, 1, &device.device, nullptr, nullptr, &err));
  cl_check(err, "clCreateContext");
  const cl_command_queue_properties qprops = profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
  queue_ = ClQueue(clCreateCommandQueue(context_.get(), device.device, qprops, &err));
  cl_check(err, "clCreateCommandQueue");
}

std::string default_kernel_cache_dir() {
  if (const char* env = std::getenv("CLCHAT_KERNEL_CACHE"); env && *env) return env;
  std::filesystem::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".cache";
  } else {
    base = std::filesystem::temp_directory_path();
  }
  return (base / "clchat" / "kernels").string();
}

namespace {

std::string build_log(cl_program program, cl_device_id device) {
  size_t n = 0;
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

ClProgram ClRuntime::build_program(const std::string& name, std::string_view source_in,
                                   const std::string& options_in) const {
  const DeviceInfo& d = device_;
  // The argument names, for KernelArgs::bind's check. CPU devices: -w, as
  // PoCL's compiler prints "N warnings generated." to the terminal (stderr)
  // on a first start otherwise: on a target without AVX-512 the 16-wide
  // vectors of the CPU kernels draw clang's -Wpsabi notes, and they hid
  // `--verbose`'s header line (2026-11-28, PoCL 3.1's "pthread-haswell").
  const std::string options = options_in + " -cl-kernel-arg-info" + (d.is_cpu ? " -w" : "");
  // CLCHAT_FAULT=build (a test hook): a source no compiler accepts. It is
  // another source, so no cached binary of the real one is found either.
  std::string broken;
  if (fault::active().build) broken = std::string(source_in) + std::string(fault::k_build_breaker);
  const std::string_view source = broken.empty() ? source_in : std::string_view(broken);
  uint64_t key = fnv1a64(source);
  for (const std::string* s : {&d.platform_name, &d.name, &d.driver_version, &options}) {
    key = fnv1a64(*s, key ^ 0x9e3779b97f4a7c15ull);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(key));
  const std::filesystem::path cache_path =
      std::filesystem::path(kernel_cache_) / (name + "-" + hex + ".bin");

  cl_int err = CL_SUCCESS;
  // Cached binary first. The entry checks itself (length, checksum, key)
  // before its bytes reach the driver, which does not survive a damaged
  // binary; a binary the driver still refuses is deleted and rebuilt too.
  if (const auto bin = read_kernel_cache(cache_path, key)) {
    if (on_build) on_build(name, true);
    const size_t len = bin->size();
    const auto* ptr = reinterpret_cast<const unsigned char*>(bin->data());
    cl_int status = CL_SUCCESS;
    ClProgram p(clCreateProgramWithBinary(context_.get(), 1, &d.device, &len, &ptr, &status, &err));
    if (err == CL_SUCCESS && status == CL_SUCCESS &&
        clBuildProgram(p.get(), 1, &d.device, options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
      spdlog::debug("program {}: loaded cached binary {}", name, cache_path.string());
      return p;
    }
    drop_kernel_cache(cache_path, "was refused by the driver");
  }

  if (on_build) on_build(name, false);
  const char* src = source.data();
  const size_t len = source.size();
  ClProgram program(clCreateProgramWithSource(context_.get(), 1, &src, &len, &err));
  cl_check(err, "clCreateProgramWithSource");
  err = clBuildProgram(program.get(), 1, &d.device, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    // The whole log goes to the log file; the message carries its first error.
    const std::string log = build_log(program.get(), d.device);
    spdlog::info("build log of OpenCL program '{}' for {} ({}):\n{}", name, d.name,
                 cl_error_name(err), log);
    const std::string first = first_build_error(log);
    throw ClBuildError("building OpenCL program '" + name + "' for " + d.name + " failed (" +
                           cl_error_name(err) + ")" + (first.empty() ? "" : ": " + first),
                       err, log);
  }
  // A build log on success (e.g. NVIDIA's register counts with the option
  // -cl-nv-verbose): shown when that option was asked for, else debug.
  if (const std::string log = build_log(program.get(), d.device);
      log.find_first_not_of(" \n\r\t") != std::string::npos) {
    const bool asked = options.find("-cl-nv-verbose") != std::string::npos;
    spdlog::log(asked ? spdlog::level::warn : spdlog::level::debug,
                "build log of OpenCL program '{}' for {}:\n{}", name, d.name, log);
  }
  // Save the binary for the next start; failures here only cost time later.
  size_t bin_size = 0;
  if (clGetProgramInfo(program.get(), CL_PROGRAM_BINARY_SIZES, sizeof(bin_size), &bin_size,
                       nullptr) == CL_SUCCESS &&
      bin_size > 0) {
    std::string bin(bin_size, '\0');
    unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
    if (clGetProgramInfo(program.get(), CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) ==
        CL_SUCCESS) {
      write_kernel_cache(cache_path, key, bin);
    }
  }
  return program;
}

ClKernel ClRuntime::create_kernel(const ClProgram& program, const char* name) const {
  cl_int err = CL_SUCCESS;
  ClKernel k(clCreateKernel(program.get(), name, &err));
  if (err != CL_SUCCESS) {
    throw ClError(std::string("clCreateKernel(") + name + ") failed: " + cl_error_name(err), err);
  }
  return k;
}

double event_device_us(const ClEvent& ev) {
  cl_ulong start = 0, end = 0;
  clGetEventProfilingInfo(ev.get(), CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr);
  clGetEventProfilingInfo(ev.get(), CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr);
  return double(end - start) / 1000.0;
}

ClMem ClRuntime::alloc(size_t bytes, bool host_readable) const {
  cl_int err = fault::alloc_error();
  const cl_mem_flags flags = CL_MEM_READ_WRITE | (host_readable ? CL_MEM_ALLOC_HOST_PTR : 0);
  ClMem m;
  if (err == CL_SUCCESS) {
    m = ClMem(clCreateBuffer(context_.get(), flags, std::max<size_t>(bytes, 4), nullptr, &err));
  }
  if (err != CL_SUCCESS) {
    throw ClError("allocating " + std::to_string(bytes) + " bytes on " + device_.name +
                      " failed: " + cl_error_name(err),
                  err);
  }
  return m;
}

ClMem ClRuntime::upload(const void* data, size_t bytes) const {
  cl_int err = fault::alloc_error();
  ClMem m;
  if (err == CL_SUCCESS) {
    m = ClMem(clCreateBuffer(context_.get(), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                             const_cast<void*>(data), &err));
  }
  if (err != CL_SUCCESS) {
    throw ClError("uploading " + std::to_string(bytes) + " bytes to " + device_.name +
                      " failed: " + cl_error_name(err),
                  err);
  }
  return m;
}

void ClRuntime::finish() const { cl_check(clFinish(queue_.get()), "clFinish"); }

KernelArg::KernelArg(const char* name, const ClMem& m) : name_(name), size_(sizeof(cl_mem)) {
  const cl_mem mem = m.get();
  std::memcpy(value_, &mem, sizeof(mem));
}

namespace {

std::string kernel_name(cl_kernel k) {
  size_t n = 0;
  if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, 0, nullptr, &n) != CL_SUCCESS || n == 0) {
    return "(unnamed)";
  }
  std::string s(n, '\0');
  clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// The name the kernel gives argument `i`; empty when the driver does not say.
std::string arg_name(cl_kernel k, cl_uint i) {
  size_t n = 0;
  if (clGetKernelArgInfo(k, i, CL_KERNEL_ARG_NAME, 0, nullptr, &n) != CL_SUCCESS || n == 0) {
    return "";
  }
  std::string s(n, '\0');
  if (clGetKernelArgInfo(k, i, CL_KERNEL_ARG_NAME, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace

void KernelArgs::bind(const ClKernel& k) const {
  cl_uint n_args = 0;
  cl_check(clGetKernelInfo(k.get(), CL_KERNEL_NUM_ARGS, sizeof(n_args), &n_args, nullptr),
           "clGetKernelInfo(CL_KERNEL_NUM_ARGS)");
  if (n_args != args_.size()) {
    throw KernelArgError("kernel " + kernel_name(k.get()) + " takes " + std::to_string(n_args) +
                         " arguments; " + std::to_string(args_.size()) + " are bound");
  }
  for (cl_uint i = 0; i < n_args; ++i) {
    const KernelArg& a = args_[i];
    const std::string name = arg_name(k.get(), i);
    if (!name.empty() && name != a.name()) {
      throw KernelArgError("kernel " + kernel_name(k.get()) + ": argument " + std::to_string(i) +
                           " is '" + name + "', bound as '" + a.name() + "'");
    }
    const cl_int err = clSetKernelArg(k.get(), i, a.size(), a.value());
    if (err != CL_SUCCESS) {
      throw ClError("clSetKernelArg(" + kernel_name(k.get()) + ", " + a.name() +
                        ") failed: " + cl_error_name(err),
                    err);
    }
  }
}

cl_uint KernelArgs::index(std::string_view name) const {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (name == args_[i].name()) return cl_uint(i);
  }
  throw KernelArgError("no kernel argument named '" + std::string(name) + "' is bound");
}

void bind_args(const ClKernel& k, std::initializer_list<KernelArg> args) {
  KernelArgs(args).bind(k);
}

void set_arg(cl_kernel k, cl_uint index, const ClMem& m) {
  const cl_mem mem = m.get();
  cl_check(clSetKernelArg(k, index, sizeof(cl_mem), &mem), "clSetKernelArg");
}

}  // namespace clchat
