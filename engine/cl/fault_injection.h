// Test hook: CLCHAT_FAULT makes OpenCL failures happen on demand that a
// healthy driver never produces (PoCL on a CPU compiles every kernel and has
// memory to spare), so the tests can check how each one is reported. The
// variable is read here and nowhere else; it is never set in normal use.
//
//   CLCHAT_FAULT=build         every program build fails: a syntax error is
//                              appended to the kernel source
//   CLCHAT_FAULT=alloc         buffer allocations and uploads report
//                              CL_MEM_OBJECT_ALLOCATION_FAILURE
//   CLCHAT_FAULT=enqueue       kernel launches report CL_OUT_OF_RESOURCES
//   CLCHAT_FAULT=device_mem=N  every device reports N bytes of global memory
//                              and of largest allocation
//   CLCHAT_FAULT=barrier_timeout=N
//                              the persistent decode kernel's N-th token
//                              (counted from 1, start-up check included)
//                              finds the barrier given up, as after a timeout
//
// Several faults are separated by commas. An unknown name throws
// std::invalid_argument at first use.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace clchat::fault {

struct Faults {
  bool build = false;
  bool alloc = false;
  bool enqueue = false;
  uint64_t device_mem = 0;       // 0: the device's own figures
  uint64_t barrier_timeout = 0;  // 0: none
};

// Parses a CLCHAT_FAULT value; throws std::invalid_argument naming the bad part.
Faults parse(std::string_view spec);
// The faults CLCHAT_FAULT asks for (parsed once).
const Faults& active();

// Text appended to every kernel source under CLCHAT_FAULT=build.
inline constexpr std::string_view k_build_breaker =
    "\n#line 1 \"clchat-fault-injection\"\nclchat fault injection: not OpenCL C\n";
// CL_MEM_OBJECT_ALLOCATION_FAILURE under CLCHAT_FAULT=alloc, else CL_SUCCESS.
cl_int alloc_error();
// CL_OUT_OF_RESOURCES under CLCHAT_FAULT=enqueue, else CL_SUCCESS.
cl_int enqueue_error();

}  // namespace clchat::fault
