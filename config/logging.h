// The log file. clchat logs with spdlog into $XDG_STATE_HOME/clchat/clchat.log
// so nothing is ever written over the screen the chat UI owns. OpenCL drivers
// (PoCL) print compiler warnings straight to file descriptor 2, which spdlog
// cannot see, so the UI also points fd 2 at the same file.
#pragma once

#include <filesystem>
#include <string>

namespace clchat::config {

// The default log file: state_dir() / "clchat.log".
std::filesystem::path default_log_path();

// Makes a file logger the spdlog default at `level` (a name accepted by
// is_log_level). Returns false (and leaves the stderr logger) when the file
// cannot be opened.
bool start_file_log(const std::filesystem::path& path, const std::string& level);

// Makes a logger that drops every message the spdlog default: the chat
// screen's when its log file cannot be written, since the terminal it owns
// must never get log lines.
void discard_log();

// dup2()s the log file onto fd 2. Returns the saved original fd 2 (to restore
// with restore_stderr), or -1 when the file cannot be opened.
int redirect_stderr(const std::filesystem::path& path);
void restore_stderr(int saved_fd);

}  // namespace clchat::config
