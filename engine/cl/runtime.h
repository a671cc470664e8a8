// OpenCL runtime: RAII handles, device discovery and selection, program builds
// with an on-disk binary cache. Only core OpenCL 1.2 is required; optional
// extensions are reported, never assumed.
//
// Errors throw ClError, whose message names the failing call and the CL error
// (CL_OUT_OF_RESOURCES, ...). Destructors release quietly.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cl/object_counts.h"

namespace clchat {

class ClError : public std::runtime_error {
 public:
  ClError(const std::string& what, cl_int code) : std::runtime_error(what), code_(code) {}
  cl_int code() const { return code_; }

 private:
  cl_int code_;
};

// No OpenCL platform or no device matching the request.
class NoDeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* cl_error_name(cl_int code);
// Throws ClError("<call>: <error name>") unless code is CL_SUCCESS.
void cl_check(cl_int code, const char* call);

// A released-on-destruction OpenCL handle (cl_mem, cl_kernel, ...). Taking
// ownership of a non-null handle and releasing it are counted
// (engine/cl/object_counts.h).
template <typename T, cl_int (*Release)(T)>
class ClHandle {
 public:
  ClHandle() = default;
  explicit ClHandle(T h) : h_(h) {
    if (h_) note_cl_object_created(cl_object_kind(h_));
  }
  ~ClHandle() { reset(); }
  ClHandle(ClHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ClHandle& operator=(ClHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  ClHandle(const ClHandle&) = delete;
  ClHandle& operator=(const ClHandle&) = delete;
  T get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (h_) {
      Release(h_);
      note_cl_object_released(cl_object_kind(h_));
    }
    h_ = nullptr;
  }

 private:
  T h_ = nullptr;
};

using ClMem = ClHandle<cl_mem, clReleaseMemObject>;
using ClKernel = ClHandle<cl_kernel, clReleaseKernel>;
using ClProgram = ClHandle<cl_program, clReleaseProgram>;
using ClEvent = ClHandle<cl_event, clReleaseEvent>;

// A finished command's device time from its profiling info, in microseconds.
double event_device_us(const ClEvent& ev);
using ClQueue = ClHandle<cl_command_queue, clReleaseCommandQueue>;
using ClContextHandle = ClHandle<cl_context, clReleaseContext>;

// What `clchat devices` shows and selection matches against.
struct DeviceInfo {
  int index = 0;  // across all platforms, in discovery order
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::string platform_name;
  std::string name;
  std::string vendor;
  std::string driver_version;
  std::string opencl_c_version;
  bool is_gpu = false;
  bool is_cpu = false;
  uint32_t compute_units = 0;
  uint64_t global_mem_bytes = 0;
  uint64_t max_alloc_bytes = 0;
  uint64_t local_mem_bytes = 0;
  uint64_t global_cache_bytes = 0;  // the global memory cache (a GPU's L2); 0: unknown
  size_t max_work_group_size = 0;
  std::string extensions;
  bool has_extension(const std::string& name) const;
};

// Every device of every platform; an empty list when there is no platform.
std::vector<DeviceInfo> list_devices();
// Picks a device: "" or "auto" = the first GPU, else the first CPU; "gpu",
// "cpu", a number (index in list_devices()), or a case-insensitive substring of
// the device or platform name. Throws NoDeviceError saying what exists.
DeviceInfo select_device(const std::string& spec);

// A context and in-order queue on one device.
class ClRuntime {
 public:
  // `kernel_cache`: the folder of compiled program binaries; empty:
  // default_kernel_cache_dir().
  ClRuntime(const DeviceInfo& device, bool profiling, const std::string& kernel_cache = "");
  const DeviceInfo& device() const { return device_; }
  const std::string& kernel_cache() const { return kernel_cache_; }
  cl_context context() const { return context_.get(); }
  cl_command_queue queue() const { return queue_.get(); }
  bool profiling() const { return profiling_; }

  // Builds `source` (with `options` and -cl-kernel-arg-info) or loads its
  // cached binary; the cache key covers device, driver, options and source. A
  // build failure throws ClError carrying the device's build log.
  ClProgram build_program(const std::string& name, std::string_view source,
                          const std::string& options) const;
  ClKernel create_kernel(const ClProgram& program, const char* name) const;
  // Told about each program before it is loaded from the kernel cache
  // (`cached`) or compiled from source: the chat's loading progress.
  std::function<void(const std::string& name, bool cached)> on_build;

  // Device-only buffer (CL_MEM_READ_WRITE) or host-readable one.
  ClMem alloc(size_t bytes, bool host_readable = false) const;
  // Read-only buffer initialised from host memory.
  ClMem upload(const void* data, size_t bytes) const;

  void finish() const;

 private:
  DeviceInfo device_;
  bool profiling_;
  std::string kernel_cache_;
  ClContextHandle context_;
  ClQueue queue_;
};

// Folder for cached program binaries when none is given: $CLCHAT_KERNEL_CACHE,
// else $XDG_CACHE_HOME/clchat/kernels (~/.cache/clchat/kernels).
std::string default_kernel_cache_dir();

// One kernel argument: the name the kernel's signature gives it and its
// value, a buffer (ClMem; empty: a null buffer) or a cl_int, cl_uint, cl_ulong
// or cl_float (other types do not convert, so a size_t cannot pass as int).
class KernelArg {
 public:
  KernelArg(const char* name, const ClMem& m);
  template <typename T>
  requires std::same_as<T, cl_int> || std::same_as<T, cl_uint> || std::same_as<T, cl_ulong> ||
      std::same_as<T, cl_float>
      KernelArg(const char* name, T value) : name_(name), size_(sizeof(T)) {
    std::memcpy(value_, &value, sizeof(T));
  }
  const char* name() const { return name_; }
  size_t size() const { return size_; }
  const void* value() const { return value_; }

 private:
  const char* name_;
  size_t size_;
  alignas(8) unsigned char value_[8];
};

// Arguments bound that do not match the kernel's signature: a bug in clchat,
// never a reason to fall back to another path (the fallbacks that catch
// device failures let exactly this type through).
struct KernelArgError : std::logic_error {
  using std::logic_error::logic_error;
};

// The arguments of one kernel, in its signature's order, each under the name
// the kernel gives it: declared once per kernel, e.g.
//   const KernelArgs args = {{"x", x}, {"n", cl_int(n)}, {"pos", cl_int(0)}};
//   args.bind(kernel);
//   pos_arg = args.index("pos");  // set again per call: set_arg(k, pos_arg, ...)
class KernelArgs {
 public:
  KernelArgs(std::initializer_list<KernelArg> args) : args_(args) {}
  explicit KernelArgs(std::vector<KernelArg> args) : args_(std::move(args)) {}
  // Checks that `k` takes exactly these arguments under these names, then
  // sets them. The names are checked where the driver reports them
  // (clGetKernelArgInfo, which needs -cl-kernel-arg-info: build_program adds
  // it; PoCL and NVIDIA's OpenCL (driver 580 on an H100) report them for
  // programs built from source and from cached binaries); the count always.
  // A mismatch throws KernelArgError naming the kernel and the argument.
  void bind(const ClKernel& k) const;
  // The index of argument `name` (KernelArgError when there is none).
  cl_uint index(std::string_view name) const;

 private:
  std::vector<KernelArg> args_;
};

// KernelArgs(args).bind(k), for kernels with no per-call arguments.
void bind_args(const ClKernel& k, std::initializer_list<KernelArg> args);

// Sets argument `index` again (a per-call value, e.g. the position; its index
// from KernelArgs::index).
void set_arg(cl_kernel k, cl_uint index, const ClMem& m);
template <typename T>
void set_arg(cl_kernel k, cl_uint index, const T& value) {
  cl_check(clSetKernelArg(k, index, sizeof(T), &value), "clSetKernelArg");
}

}  // namespace clchat
