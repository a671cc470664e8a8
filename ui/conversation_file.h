// Conversations on disk. JSON is the format /load and --resume read back:
//
//   {"format": "clchat-conversation", "version": 1, "model": "...",
//    "system": "...", "turns": [{"role": "user", "text": "..."},
//                               {"role": "assistant", "text": "...", "stopped": true}]}
//
// /save also writes a Markdown transcript for people. Autosaves go to
// $XDG_STATE_HOME/clchat/conversations/<start time>.json, one file per
// conversation, rewritten (atomically: temp file + rename) after every turn.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/messages.h"

namespace clchat::ui {

class ConversationFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SavedTurn {
  Role role = Role::User;
  std::string text;
  bool stopped = false;  // a reply cut short with Ctrl-C
};

struct Conversation {
  std::string model;
  std::string system;
  std::vector<SavedTurn> turns;
};

std::string to_json(const Conversation& c);
Conversation from_json(const std::string& text);  // throws ConversationFileError
std::string to_markdown(const Conversation& c);

// Writes atomically (a temp file beside `path`, synced, then renamed); throws
// ConversationFileError "cannot write PATH: REASON" and leaves no temp file.
void write_file(const std::filesystem::path& path, const std::string& text);
Conversation read_conversation(const std::filesystem::path& path);

// /save ARG -> {markdown, json}: ARG without a .md/.json ending gets both; no
// ARG: clchat-YYYYMMDD-HHMMSS in the current directory.
struct SavePaths {
  std::filesystem::path markdown, json;
};
SavePaths save_paths(const std::string& arg);

// /load ARG: the JSON file that /save ARG wrote (ARG.json for a bare ARG, the
// .json sibling of a .md path); an existing file named ARG is read as it is.
std::filesystem::path load_path(const std::string& arg);

std::filesystem::path autosave_dir();
std::filesystem::path new_autosave_path();
// The most recently written autosave, if any.
std::optional<std::filesystem::path> latest_autosave();

}  // namespace clchat::ui
