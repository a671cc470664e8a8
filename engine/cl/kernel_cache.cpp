// Reading and writing kernel cache files (see kernel_cache.h).
#include "engine/cl/kernel_cache.h"

#include <spdlog/spdlog.h>

#include "common/input_file.h"
#include "common/replace_file.h"
#include "engine/cl/kernel_cache_entry.h"

namespace clchat {

namespace {

// Far above any program binary (NVIDIA's largest here are a few MiB).
constexpr uint64_t k_max_entry_bytes = 256 * k_mib;

}  // namespace

void drop_kernel_cache(const std::filesystem::path& path, const std::string& why) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  spdlog::warn("kernel cache entry {} {}; {}, rebuilding from source", path.string(), why,
               ec ? "could not delete it (" + ec.message() + ")" : std::string("deleted it"));
}

std::optional<std::string> read_kernel_cache(const std::filesystem::path& path, uint64_t key) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::string entry;
  try {
    entry = read_regular_file(path.string(), k_max_entry_bytes, "kernel cache entry");
  } catch (const InputFileError& e) {
    spdlog::warn("{}; rebuilding from source", e.what());
    return std::nullopt;
  }
  const auto decoded = decode_kernel_cache_entry(key, entry);
  if (const auto* reject = std::get_if<KernelCacheReject>(&decoded)) {
    drop_kernel_cache(path, "is damaged (" + reject->reason + ")");
    return std::nullopt;
  }
  return std::string(std::get<std::string_view>(decoded));
}

void write_kernel_cache(const std::filesystem::path& path, uint64_t key, std::string_view binary) {
  const std::error_code ec = replace_file(path, encode_kernel_cache_entry(key, binary));
  if (ec) spdlog::debug("could not cache kernel binary {}: {}", path.string(), ec.message());
}

}  // namespace clchat
