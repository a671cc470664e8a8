// Helpers shared by the tests: where the shared models and vectors live, and
// random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace clchat::test {

// Directory with models/, tokenizer-vectors/, reference/: $CLCHAT_SHARED_DIR,
// else ../shared beside the checkout.
std::string shared_dir();
// Full path of a file under shared_dir(); the calling test fails (it does not
// skip) when the file is missing.
std::string shared_file(const std::string& relative);
// The Gemma 3 270M file (gemma-3-270m-q4_k_m.gguf), which ../shared does not
// hold: found in $CLCHAT_MODELS_DIR, shared_dir()/models or the checkout's
// assets/models/ (where `.ci/fetch-model gemma3-270m` puts it); "" when none
// has it. Tests skip with kGemma3Missing then; CI fetches the file first.
std::string gemma3_model();
inline constexpr const char* kGemma3Missing =
    "gemma-3-270m-q4_k_m.gguf not found: run .ci/fetch-model gemma3-270m";
// Path of the built clchat executable.
std::string clchat_binary();

std::string read_file(const std::string& path);
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// GGUF bytes of a rows x n_in matrix of a quantized `type` (n_in a whole
// number of its blocks): random payloads, so every code and bit pattern
// occurs, and random finite fp16 scales of either sign sized so that the
// values stay within about [-1, 1]. Not the product of a quantizer.
std::vector<uint8_t> random_blocks(GgmlType type, uint64_t n_in, uint64_t rows, uint32_t seed);

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
