// Conversation JSON/Markdown and the autosave directory (see conversation_file.h).
#include "ui/conversation_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/xdg.h"

namespace clchat::ui {

namespace {

constexpr const char* k_format = "clchat-conversation";

const char* role_name(Role r) {
  switch (r) {
    case Role::System:
      return "system";
    case Role::User:
      return "user";
    case Role::Assistant:
      return "assistant";
  }
  return "user";
}

std::string timestamp(const char* fmt) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}

}  // namespace

std::string to_json(const Conversation& c) {
  nlohmann::json j;
  j["format"] = k_format;
  j["version"] = 1;
  j["model"] = c.model;
  j["system"] = c.system;
  j["turns"] = nlohmann::json::array();
  for (const auto& t : c.turns) {
    nlohmann::json turn{{"role", role_name(t.role)}, {"text", t.text}};
    if (t.stopped) turn["stopped"] = true;
    j["turns"].push_back(std::move(turn));
  }
  // Invalid UTF-8 from a model (it should not happen) is replaced, not fatal.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Conversation from_json(const std::string& text) {
  Conversation c;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("format", "") != k_format) {
      throw ConversationFileError("not a clchat conversation (no \"format\": \"" +
                                  std::string(k_format) + "\")");
    }
    c.model = j.value("model", "");
    c.system = j.value("system", "");
    for (const auto& t : j.at("turns")) {
      SavedTurn turn;
      const std::string role = t.at("role").get<std::string>();
      if (role == "user") {
        turn.role = Role::User;
      } else if (role == "assistant") {
        turn.role = Role::Assistant;
      } else {
        throw ConversationFileError("turn role \"" + role + "\" is not user or assistant");
      }
      turn.text = t.at("text").get<std::string>();
      turn.stopped = t.value("stopped", false);
      c.turns.push_back(std::move(turn));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConversationFileError(std::string("bad conversation JSON: ") + e.what());
  }
  return c;
}

std::string to_markdown(const Conversation& c) {
  std::ostringstream md;
  md << "# clchat conversation\n\n";
  if (!c.model.empty()) md << "Model: `" << c.model << "`\n\n";
  if (!c.system.empty()) md << "**System:** " << c.system << "\n\n";
  for (const auto& t : c.turns) {
    md << (t.role == Role::User ? "## User\n\n" : "## Assistant\n\n") << t.text << "\n\n";
    if (t.stopped) md << "*(stopped)*\n\n";
  }
  return md.str();
}

namespace {

// "cannot write PATH: REASON".
ConversationFileError write_error(const std::filesystem::path& path, int error) {
  return ConversationFileError("cannot write " + path.string() + ": " + std::strerror(error));
}

// Writes all of `text` to a new file `tmp` and syncs it; on any failure the
// file is removed (a full disk must not leave a 0-byte temp file behind).
void write_new_file(const std::filesystem::path& tmp, const std::string& text) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw write_error(tmp, errno);
  int error = 0;
  for (size_t done = 0; done < text.size() && !error;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += size_t(n);
    } else if (n == 0) {
      error = EIO;
    } else if (errno != EINTR) {
      error = errno;
    }
  }
  // ENOSPC may show only at fsync or close (NFS, delayed allocation).
  if (!error && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && !error) error = errno;
  if (error) {
    ::unlink(tmp.c_str());
    throw write_error(tmp, error);
  }
}

}  // namespace

void write_file(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  write_new_file(tmp, text);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw ConversationFileError("cannot write " + path.string() + ": " + ec.message());
  }
}

Conversation read_conversation(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConversationFileError("cannot open " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return from_json(text.str());
  } catch (const ConversationFileError& e) {
    throw ConversationFileError(path.string() + ": " + e.what());
  }
}

SavePaths save_paths(const std::string& arg) {
  std::filesystem::path base = arg.empty() ? "clchat-" + timestamp("%Y%m%d-%H%M%S") : arg;
  if (base.extension() == ".md" || base.extension() == ".json") base.replace_extension();
  auto md = base, json = base;
  md += ".md";
  json += ".json";
  return {md, json};
}

std::filesystem::path load_path(const std::string& arg) {
  // The JSON file /save ARG wrote: ARG, ARG.md and ARG.json all name it, as in
  // save_paths(). A file named exactly ARG (an autosave, a renamed copy) wins.
  std::filesystem::path p = arg;
  if (p.extension() == ".md") return p.replace_extension(".json");
  std::error_code ec;
  if (p.extension() == ".json" || std::filesystem::is_regular_file(p, ec)) return p;
  p += ".json";
  return p;
}

std::filesystem::path autosave_dir() { return config::state_dir() / "conversations"; }

std::filesystem::path new_autosave_path() {
  // Seconds are not unique enough for tests that start twice a second.
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count() %
                  1000000;
  return autosave_dir() / (timestamp("%Y%m%d-%H%M%S") + "-" + std::to_string(us) + ".json");
}

std::optional<std::filesystem::path> latest_autosave() {
  std::error_code ec;
  std::optional<std::filesystem::path> best;
  std::filesystem::file_time_type best_time{};
  for (const auto& e : std::filesystem::directory_iterator(autosave_dir(), ec)) {
    if (e.path().extension() != ".json") continue;
    const auto t = e.last_write_time(ec);
    if (ec) continue;
    if (!best || t > best_time || (t == best_time && e.path() > *best)) {
      best = e.path();
      best_time = t;
    }
  }
  return best;
}

}  // namespace clchat::ui
