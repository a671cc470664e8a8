// XDG directory lookup (see xdg.h).
#include "config/xdg.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <system_error>

namespace clchat::config {

namespace {

// $VAR when it holds an absolute path, else $HOME/<fallback>, else a relative
// fallback so a HOME-less process (cron, containers) still gets somewhere.
std::filesystem::path base_dir(const char* var, const char* fallback) {
  if (const char* v = std::getenv(var); v && v[0] == '/') return v;
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / fallback;
  }
  return std::filesystem::path(fallback);
}

}  // namespace

std::filesystem::path config_dir() { return base_dir("XDG_CONFIG_HOME", ".config") / "clchat"; }

std::filesystem::path state_dir() { return base_dir("XDG_STATE_HOME", ".local/state") / "clchat"; }

bool ensure_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return true;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  // Conversations and history are private; the spec asks for 0700.
  ::chmod(dir.c_str(), 0700);
  return true;
}

}  // namespace clchat::config
