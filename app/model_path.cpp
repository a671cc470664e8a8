// Where the default model is looked for.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "app/commands.h"

namespace clchat::app {

namespace {
constexpr const char* k_default_model = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::filesystem::path executable_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}
}  // namespace

std::string default_model_path() {
  if (const char* env = std::getenv("CLCHAT_MODEL"); env && *env) return env;
  std::vector<std::filesystem::path> candidates = {std::filesystem::path("assets/models") /
                                                   k_default_model};
  const auto exe_dir = executable_dir();
  if (!exe_dir.empty()) {
    // build/clchat -> <repo>/assets/models
    candidates.push_back(exe_dir.parent_path() / "assets/models" / k_default_model);
  }
  for (const auto& path : candidates) {
    if (std::filesystem::exists(path)) return path.string();
  }
  throw UsageError(std::string("no model given and ") + k_default_model +
                   " not found in assets/models/; run `bash .ci/fetch-model` from the clchat "
                   "checkout to download it, or pass -m MODEL.gguf");
}

}  // namespace clchat::app
