// Bounded reads of regular files (see input_file.h).
#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace clchat {

namespace {

std::string size_text(uint64_t bytes) {
  return bytes % k_mib == 0 ? std::to_string(bytes / k_mib) + " MiB"
                            : std::to_string(bytes) + " bytes";
}

// Closes the descriptor on every path out of read_regular_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* file_kind_name(unsigned mode) {
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISREG(mode)) return "regular file";
  return "special file";
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  const std::string name(what);
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) throw InputFileError(path + ": cannot open " + name + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) {
    throw InputFileError(path + ": cannot read " + name + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw InputFileError(path + ": a " + file_kind_name(st.st_mode) + ", not a regular " + name);
  }
  const std::string too_big =
      path + ": the " + name + " is over its " + size_text(max_bytes) + " limit";
  if (uint64_t(st.st_size) > max_bytes) throw InputFileError(too_big);
  std::string bytes;
  bytes.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputFileError(path + ": cannot read " + name + ": " + std::strerror(errno));
    if (n == 0) break;
    bytes.append(buf, size_t(n));
    // The file may grow while it is read.
    if (bytes.size() > max_bytes) throw InputFileError(too_big);
  }
  return bytes;
}

}  // namespace clchat
