// A chat screen in a real terminal for the end-to-end tests: tmux runs clchat
// on stories260K (or `model`, a file under the shared folder), greedy
// (--temp 0) unless `greedy` is false, on PoCL (--device cpu) under `sh -c "clchat ...; echo
// CLCHAT_EXIT=$?; sleep 600"`, the tests type with send-keys and read the
// screen with capture-pane. Each session has its own tmux server and a
// temporary HOME/XDG tree, so nothing touches the user's files. Waits poll the
// screen for up to 3 minutes (CI machines are slow and PoCL compiles the
// kernels on first use); nothing asserts on timing.
//
// Header-only: each tests/test_*.cpp is its own binary, and the tmux ones
// (test_tui_*) include this.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace clchat::test {

inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The rows of a captured screen.
inline std::vector<std::string> screen_lines(const std::string& screen) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = screen.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(screen.substr(start, nl - start));
  }
  return lines;
}

class TmuxSession {
 public:
  // `prepare` runs on the temporary HOME before clchat starts.
  TmuxSession(int cols, int rows, const std::string& extra_args = "",
              const std::function<void(const std::filesystem::path&)>& prepare = {},
              const std::string& model_file = "models/stories260K.gguf", bool greedy = true) {
    static int counter = 0;
    socket_ = "clchat-tui-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    dir_ = std::filesystem::temp_directory_path() / socket_;
    std::filesystem::create_directories(dir_);
    if (prepare) prepare(dir_);
    const std::string model = clchat::test::shared_file(model_file);
    const std::string d = dir_.string();
    const std::string env = "env -i PATH=/usr/bin:/bin HOME=" + d + " XDG_STATE_HOME=" + d +
                            "/state XDG_CONFIG_HOME=" + d + "/config XDG_CACHE_HOME=" + d +
                            "/cache LANG=C.UTF-8 TERM=tmux-256color";
    const std::string cmd = env + " " + quote(CLCHAT_BINARY) + " -m " + quote(model) +
                            " --device cpu " + (greedy ? "--temp 0 " : "") + extra_args +
                            "; echo CLCHAT_EXIT=$?; sleep 600";
    tmux("-f /dev/null new-session -d -x " + std::to_string(cols) + " -y " + std::to_string(rows) +
         " -s t " + quote(cmd));
  }
  ~TmuxSession() {
    tmux("kill-server");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::filesystem::path& dir() const { return dir_; }

  clchat::test::CommandResult tmux(const std::string& args) const {
    return clchat::test::run_command("tmux -L " + socket_ + " " + args);
  }
  // Literal text (no key names), then optional keys such as "Enter".
  void type(const std::string& text, const std::string& keys = "Enter") const {
    tmux("send-keys -t t -l " + quote(text));
    if (!keys.empty()) this->keys(keys);
  }
  void keys(const std::string& keys) const { tmux("send-keys -t t " + keys); }
  std::string screen() const { return tmux("capture-pane -p -t t").out; }
  std::string format(const std::string& f) const {
    auto out = tmux("display-message -p -t t " + quote(f)).out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // Polls the screen until `ok` holds; on timeout fails with the last screen.
  bool wait_for(const std::function<bool(const std::string&)>& ok, const std::string& what,
                int seconds = 180) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::string s;
    while (std::chrono::steady_clock::now() < end) {
      s = screen();
      if (ok(s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; screen:\n" << s;
    return false;
  }
  bool wait_text(const std::string& text, int seconds = 180) const {
    return wait_for([&](const std::string& s) { return s.find(text) != std::string::npos; },
                    "\"" + text + "\"", seconds);
  }
  // The status bar names the model once the engine is ready (stories260K: "llama").
  bool wait_ready() const { return wait_text("clchat │ llama │"); }
  // Any model: its banner is in the transcript.
  bool wait_banner() const { return wait_text("/help lists the commands"); }

  // The pid of clchat: the child of the pane's shell named clchat, or -1.
  pid_t clchat_pid() const {
    const std::string shell = format("#{pane_pid}");
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      std::ifstream stat(e.path() / "stat");
      std::string pid, comm, state, ppid;
      if (stat >> pid >> comm >> state >> ppid && ppid == shell && comm == "(clchat)") {
        return static_cast<pid_t>(std::stol(pid));
      }
    }
    return -1;
  }

 private:
  std::string socket_;
  std::filesystem::path dir_;
};

}  // namespace clchat::test
