// spdlog file sink and the fd-2 redirection (see logging.h).
#include "config/logging.h"

#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "config/xdg.h"

namespace clchat::config {

std::filesystem::path default_log_path() { return state_dir() / "clchat.log"; }

bool start_file_log(const std::filesystem::path& path, const std::string& level) {
  if (path.has_parent_path()) ensure_dir(path.parent_path());
  try {
    auto logger = spdlog::basic_logger_mt("clchat", path.string());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
    logger->set_level(spdlog::level::from_str(level));
    // Warnings must reach the file even if clchat is killed a moment later.
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::from_str(level));
    spdlog::flush_every(std::chrono::seconds(2));
    return true;
  } catch (const spdlog::spdlog_ex&) {
    return false;
  }
}

void discard_log() {
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("clchat", std::make_shared<spdlog::sinks::null_sink_mt>()));
}

int redirect_stderr(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  return saved;
}

void restore_stderr(int saved_fd) {
  if (saved_fd < 0) return;
  ::dup2(saved_fd, STDERR_FILENO);
  ::close(saved_fd);
}

}  // namespace clchat::config
