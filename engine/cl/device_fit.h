// Does a model fit an OpenCL device, and which other devices could run it.
//
// check_model_fits() runs before any weight is uploaded, so a model larger
// than the device gets one sentence instead of an allocation failure half-way
// through the upload. The weights are compared with CL_DEVICE_GLOBAL_MEM_SIZE
// and the largest buffer the engine makes from them (the stacked Q/K/V rows
// of a layer, or the embedding) with CL_DEVICE_MAX_MEM_ALLOC_SIZE.
//
// When an OpenCL failure could go away on another device (out of memory or
// resources, a model that does not fit, a program the compiler rejects),
// with_device_hint() adds the other devices and how to select one.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cl/runtime.h"
#include "engine/model/model.h"

namespace clchat {

class ModelTooLargeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WeightFootprint {
  uint64_t total_bytes = 0;  // all weights as uploaded
  uint64_t largest_buffer_bytes = 0;
};
// On a CPU device (cpu_device) or another: the types differ (device_type).
WeightFootprint weight_footprint(const Model& model, bool cpu_device);

// Throws ModelTooLargeError when the weights cannot fit `device`.
void check_model_fits(const Model& model, const DeviceInfo& device);

// "context reduced from WANTED to GOT tokens to fit DEVICE": what the user is
// told, once, when ClForward had to shrink the KV cache (it only logs it at
// info level, so line mode does not print it twice).
std::string context_reduced_note(int wanted, int got, const std::string& device_name);

// "; other OpenCL devices: 1: NVIDIA H100 (gpu); select one with --device INDEX"
// for the devices other than `current`; "" when there are none.
std::string other_devices_hint(const std::vector<DeviceInfo>& devices, int current);

// Call inside a catch block: rethrows the exception being handled, its
// message extended by other_devices_hint(list_devices(), ...) when another
// device might succeed (ModelTooLargeError, ClError with an out-of-memory,
// out-of-resources or build failure code); unchanged otherwise.
[[noreturn]] void rethrow_with_device_hint(const DeviceInfo& current);

}  // namespace clchat
