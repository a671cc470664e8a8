// First error line of an OpenCL build log (see cl_build_error.h).
#include "engine/cl/build_error.h"

#include <cctype>

namespace clchat {

std::string first_build_error(const std::string& log, size_t max_chars) {
  std::string first;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(start, end - start);
    start = end + 1;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (line.empty()) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos) {
      first = line;
      break;
    }
  }
  if (first.size() > max_chars) first = first.substr(0, max_chars) + "...";
  return first;
}

}  // namespace clchat
