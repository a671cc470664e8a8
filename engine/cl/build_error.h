// A program build that the OpenCL compiler rejected. what() is one line (the
// program, the device, the error code and the log's first error); log() is
// the whole build log, for the log file.
#pragma once

#include <string>

#include "engine/cl/runtime.h"

namespace clchat {

class ClBuildError : public ClError {
 public:
  ClBuildError(const std::string& what, cl_int code, std::string log)
      : ClError(what, code), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

// The first line of a build log that names an error (else its first
// non-empty line), trimmed to `max_chars`.
std::string first_build_error(const std::string& log, size_t max_chars = 160);

}  // namespace clchat
