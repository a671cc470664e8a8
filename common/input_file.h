// Whole-file reads of user-named inputs (config files, text files, cache
// entries) that cannot hang or exhaust memory: the path must be a regular
// file (a FIFO is opened without blocking and refused, as are directories and
// devices such as /dev/zero) and at most a stated size.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace clchat {

// Why an input file was not read; what() is one line naming the path.
class InputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr uint64_t k_mib = uint64_t{1} << 20;

// The bytes of `path`, a regular file of at most `max_bytes` bytes. `what`
// names the input in messages ("config file", "text file"): "PATH: a FIFO,
// not a regular text file", "PATH: the text file is over its 256 MiB limit".
std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what);

// "directory", "FIFO", "character device", ... for an st_mode.
const char* file_kind_name(unsigned mode);

}  // namespace clchat
