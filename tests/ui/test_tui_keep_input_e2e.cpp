// Nothing typed is lost, end to end in a real terminal (tmux, see
// tests/tmux_session.h): a message sent while a reply runs stays in the input
// line; a turn the engine refuses (too long for the context) comes back into
// the input line; multi-line and pasted messages reach the history (Up, and
// the history file).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_support.h"
#include "tests/ui/tmux_session.h"

using clchat::test::quote;
using clchat::test::TmuxSession;

namespace {

// The input area's rows: between the hint line (a rule of '─') and the status bar.
std::string input_area(const std::string& screen) {
  const auto lines = clchat::test::screen_lines(screen);
  std::string out;
  for (size_t i = lines.size() - 1; i-- > 0;) {
    if (lines[i].rfind("──", 0) == 0) break;
    out = lines[i] + "\n" + out;
  }
  return out;
}

TEST(TuiKeepInput, MessageSentDuringAReplyStaysInTheInputLine) {
  TmuxSession t(100, 30, "-n 100000");
  ASSERT_TRUE(t.wait_ready());
  t.type("Tell me a long story");
  ASSERT_TRUE(t.wait_text("Ctrl-C stops"));
  t.type("and then a second one");
  ASSERT_TRUE(t.wait_text("the line is kept in the input"));
  EXPECT_NE(input_area(t.screen()).find("› and then a second one"), std::string::npos)
      << t.screen();
  t.keys("C-c");
  ASSERT_TRUE(t.wait_text("[stopped]"));
  // Still there, and Enter sends it now.
  EXPECT_NE(input_area(t.screen()).find("› and then a second one"), std::string::npos)
      << t.screen();
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) { return input_area(s).find("second one") == std::string::npos; },
      "the kept line sent"));
  t.keys("C-c");
}

TEST(TuiKeepInput, TurnTooLongForTheContextComesBackIntoTheInputLine) {
  TmuxSession t(100, 30, "-c 64 -n 8");
  ASSERT_TRUE(t.wait_ready());
  std::string big;
  for (int i = 0; i < 40; ++i) big += "word" + std::to_string(i) + " ";
  t.tmux("set-buffer -b p " + quote(big + "END"));
  t.tmux("paste-buffer -p -b p -t t");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_text("back in the input line"));
  const std::string s = t.screen();
  EXPECT_NE(input_area(s).find("› word0 word1"), std::string::npos) << s;
  EXPECT_NE(input_area(s).find("END"), std::string::npos) << s;
}

TEST(TuiKeepInput, MultiLineAndPastedMessagesReachTheHistory) {
  TmuxSession t(100, 30, "-n 4");
  ASSERT_TRUE(t.wait_ready());
  t.type("first line", "M-Enter");
  t.type("second line");
  ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
  t.tmux("set-buffer -b p " + quote("pasted one\npasted two"));
  t.tmux("paste-buffer -p -b p -t t");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) {
        const auto first = s.find("[max_tokens reached]");
        return first != std::string::npos &&
               s.find("[max_tokens reached]", first + 1) != std::string::npos;
      },
      "the second reply"));
  t.keys("Up");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) { return input_area(s).find("  pasted two") != std::string::npos; },
      "the pasted message recalled"));
  t.keys("Up");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) {
        const std::string in = input_area(s);
        return in.find("› first line") != std::string::npos &&
               in.find("  second line") != std::string::npos;
      },
      "the multi-line message recalled"));
  t.keys("C-u");  // readline: kill to the start of the line (the whole of it, at the end)
  t.type("/quit");
  ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=0"));
  // One file entry per message, its newlines encoded.
  const std::string history = clchat::test::read_file((t.dir() / "state/clchat/history").string());
  EXPECT_NE(history.find("first line\x1esecond line\n"), std::string::npos) << history;
  EXPECT_NE(history.find("pasted one\x1epasted two\n"), std::string::npos) << history;
}

}  // namespace
