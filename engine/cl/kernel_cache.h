// The compiled-kernel cache on disk: one file per program and cache key,
// each a self-checking entry (kernel_cache_entry.h), written to a temporary
// file and renamed into place so that a reader never sees half an entry.
// A missing entry is silent; a damaged or foreign one is logged, deleted and
// left for the caller to rebuild. Failures to write only cost time later.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace clchat {

// The program binary cached at `path` for `key`, or nullopt when there is
// none or it failed its check (then it is deleted, with a warning).
std::optional<std::string> read_kernel_cache(const std::filesystem::path& path, uint64_t key);

// Stores `binary` at `path` for `key` (temporary file + rename).
void write_kernel_cache(const std::filesystem::path& path, uint64_t key, std::string_view binary);

// Deletes the entry at `path` with a warning saying why (a validated entry
// the driver refused, or one that failed its check).
void drop_kernel_cache(const std::filesystem::path& path, const std::string& why);

}  // namespace clchat
