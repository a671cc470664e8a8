#include "tests/test_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace clchat::test {

std::string shared_dir() {
  const char* env = std::getenv("CLCHAT_SHARED_DIR");
  return env && *env ? env : CLCHAT_SHARED_DIR_DEFAULT;
}

std::string shared_file(const std::string& relative) {
  std::string path = shared_dir() + "/" + relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing shared file " << path
                  << " (set CLCHAT_SHARED_DIR to the folder holding models/ and reference/)";
  }
  return path;
}

std::string clchat_binary() { return CLCHAT_BINARY; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (a.size() != b.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  char out_path[] = "/tmp/clchat-test-out-XXXXXX";
  char err_path[] = "/tmp/clchat-test-err-XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  close(out_fd);
  close(err_fd);
  std::string full = command + " >" + out_path + " 2>" + err_path + " </dev/null";
  int status = std::system(full.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  std::remove(out_path);
  std::remove(err_path);
  return result;
}

}  // namespace clchat::test
