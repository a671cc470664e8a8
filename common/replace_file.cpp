// Replacing a file in one step (see replace_file.h).
#include "common/replace_file.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>

namespace clchat {

std::error_code replace_file(const std::filesystem::path& path, std::string_view bytes) {
  static std::atomic<unsigned> serial{0};
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::string tmp = path.string() + ".tmp" + std::to_string(::getpid()) + "-" +
                          std::to_string(serial.fetch_add(1));
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  ec.clear();
  if (out) {
    std::filesystem::rename(tmp, path, ec);
  } else {
    ec = std::make_error_code(std::errc::io_error);
  }
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  }
  return ec;
}

}  // namespace clchat
