// Signals to the chat screen (tmux, tests/tmux_session.h), each during a
// streamed reply: SIGKILL loses at most the turn in progress (the autosave of
// the turns before it is a valid file and --resume reopens them); SIGTERM and
// SIGHUP stop the reply, keep it marked stopped in the autosave, restore the
// terminal and exit with 128 + the signal. The long reply runs in a
// 32768-token context, so it is still streaming when the signal comes (with
// 8192 it lasted ~5 s on PoCL at ~1,600 tok/s, and once, on a loaded
// machine, no capture of the pane fell inside it).
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/ui/tmux_session.h"
#include "ui/conversation_file.h"

using clchat::test::TmuxSession;

namespace {

namespace fs = std::filesystem;

// The autosaved conversations under a state directory ($XDG_STATE_HOME), not
// the .tmp files a write in progress leaves.
std::vector<fs::path> autosaves(const fs::path& state) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state / "clchat/conversations", ec)) {
    if (e.path().extension() == ".json") out.push_back(e.path());
  }
  return out;
}

// Number of times `text` occurs on the screen.
size_t count(const std::string& screen, const std::string& text) {
  size_t n = 0;
  for (size_t at = screen.find(text); at != std::string::npos; at = screen.find(text, at + 1)) ++n;
  return n;
}

// The long reply's context size, and clchat's options for it.
const std::string k_ctx = "32768";
const std::string k_options = "-c " + k_ctx + " -n 8";

// The KV cache fill the panel shows (" KV cache  ███  N/32768"), or -1.
int cache_used(const std::string& screen) {
  std::smatch m;
  if (!std::regex_search(screen, m, std::regex(R"(KV cache\D*?([0-9]+)/)" + k_ctx))) return -1;
  return std::stoi(m[1]);
}

// Sends `question` with no length limit and waits until the reply streams:
// the status bar says so and the cache holds 200 tokens more than before.
bool start_long_reply(const TmuxSession& t, const std::string& question) {
  t.type("/set max_tokens 100000");
  if (!t.wait_text("sampling:")) return false;
  const int before = cache_used(t.screen());
  t.type(question);
  return t.wait_text("generating…") && t.wait_for(
                                           [&](const std::string& s) {
                                             return s.find("generating…") != std::string::npos &&
                                                    cache_used(s) > before + 200;
                                           },
                                           "200 tokens of the reply");
}

void send_signal(const TmuxSession& t, int sig) {
  const pid_t pid = t.clchat_pid();
  ASSERT_GT(pid, 0) << "no clchat process under the pane";
  ASSERT_EQ(::kill(pid, sig), 0);
}

TEST(TuiSignals, SigkillMidReplyLosesOnlyThatTurnAndResumeReopensTheRest) {
  const fs::path saved =
      fs::temp_directory_path() / ("clchat-sigkill-" + std::to_string(::getpid()));
  fs::remove_all(saved);
  {
    TmuxSession t(100, 30, k_options);
    ASSERT_TRUE(t.wait_ready());
    t.type("Remember the blue kite");
    ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
    t.type("The red ball bounced");
    ASSERT_TRUE(
        t.wait_for([](const std::string& s) { return count(s, "[max_tokens reached]") == 2; },
                   "the second reply"));
    ASSERT_TRUE(start_long_reply(t, "Tell me a very long story"));
    send_signal(t, SIGKILL);
    ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=137"));
    fs::copy(t.dir() / "state", saved, fs::copy_options::recursive);
  }
  // The autosave is whole and holds both finished turns; the killed one is lost.
  const auto files = autosaves(saved);
  ASSERT_EQ(files.size(), 1u);
  const clchat::ui::Conversation c = clchat::ui::read_conversation(files[0]);
  ASSERT_EQ(c.turns.size(), 4u);
  EXPECT_EQ(c.turns[0].text, "Remember the blue kite");
  EXPECT_EQ(c.turns[2].text, "The red ball bounced");
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.turns[i].role, i % 2 ? clchat::Role::Assistant : clchat::Role::User);
    EXPECT_FALSE(c.turns[i].text.empty());
    EXPECT_FALSE(c.turns[i].stopped);
  }

  TmuxSession r(100, 30, "-n 8 --resume", [&](const fs::path& home) {
    fs::copy(saved, home / "state", fs::copy_options::recursive);
  });
  fs::remove_all(saved);
  ASSERT_TRUE(r.wait_text("› Remember the blue kite"));
  ASSERT_TRUE(r.wait_text("› The red ball bounced"));
  ASSERT_TRUE(r.wait_ready());
  EXPECT_EQ(r.screen().find("Tell me a very long story"), std::string::npos);
  // The resumed conversation goes on.
  r.type("And then?");
  ASSERT_TRUE(r.wait_for([](const std::string& s) { return count(s, "[max_tokens reached]") == 1; },
                         "a reply after --resume"));
}

class TuiQuitSignal : public ::testing::TestWithParam<int> {};

TEST_P(TuiQuitSignal, StopsTheReplyAutosavesAndRestoresTheTerminal) {
  const int sig = GetParam();
  TmuxSession t(100, 30, k_options);
  ASSERT_TRUE(t.wait_ready());
  ASSERT_TRUE(start_long_reply(t, "Tell me a very long story"));
  send_signal(t, sig);
  ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=" + std::to_string(128 + sig)));
  const std::string s = t.screen();
  EXPECT_EQ(s.find("F2 panel"), std::string::npos) << s;  // the alternate screen is gone
  EXPECT_EQ(t.format("#{alternate_on}"), "0");
  EXPECT_EQ(t.format("#{mouse_any_flag}"), "0");
  EXPECT_EQ(t.format("#{cursor_flag}"), "1");
  // The stopped reply was kept and autosaved.
  const auto files = autosaves(t.dir() / "state");
  ASSERT_EQ(files.size(), 1u);
  const clchat::ui::Conversation c = clchat::ui::read_conversation(files[0]);
  ASSERT_EQ(c.turns.size(), 2u);
  EXPECT_EQ(c.turns[0].text, "Tell me a very long story");
  EXPECT_EQ(c.turns[1].role, clchat::Role::Assistant);
  EXPECT_TRUE(c.turns[1].stopped);
}

INSTANTIATE_TEST_SUITE_P(TermAndHup, TuiQuitSignal, ::testing::Values(SIGTERM, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == SIGTERM ? std::string("Sigterm")
                                                     : std::string("Sighup");
                         });

}  // namespace
