// Where clchat keeps its files, after the XDG Base Directory specification:
// settings in $XDG_CONFIG_HOME/clchat (default ~/.config/clchat), history,
// autosaved conversations and the log in $XDG_STATE_HOME/clchat (default
// ~/.local/state/clchat). Relative or empty XDG variables are ignored, as the
// specification asks.
#pragma once

#include <filesystem>

namespace clchat::config {

std::filesystem::path config_dir();
std::filesystem::path state_dir();

// Creates the directory (and parents) with mode 0700 where it is new; returns
// false when it cannot be created, so callers can run without persistence.
bool ensure_dir(const std::filesystem::path& dir);

}  // namespace clchat::config
