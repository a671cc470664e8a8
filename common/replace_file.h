// Replaces a file's contents in one step: the bytes go to a temporary file
// beside it (unique per process and call), which is then renamed over it, so
// a reader sees the old file or the new one, never half of one. For caches:
// a failure is returned (the temporary file removed), not thrown.
#pragma once

#include <filesystem>
#include <string_view>
#include <system_error>

namespace clchat {

// Creates the parent folders as needed.
std::error_code replace_file(const std::filesystem::path& path, std::string_view bytes);

}  // namespace clchat
