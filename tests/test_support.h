// Helpers shared by the tests: where the shared models and vectors live, and
// random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace clchat::test {

// Directory with models/, tokenizer-vectors/, reference/: $CLCHAT_SHARED_DIR,
// else ../shared beside the checkout.
std::string shared_dir();
// Full path of a file under shared_dir(); the calling test fails (it does not
// skip) when the file is missing.
std::string shared_file(const std::string& relative);
// Path of the built clchat executable.
std::string clchat_binary();

std::string read_file(const std::string& path);
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// ||a - b|| / ||b|| in float64.
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

// Runs a shell command; returns its exit status and captures stdout/stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& command);

}  // namespace clchat::test
