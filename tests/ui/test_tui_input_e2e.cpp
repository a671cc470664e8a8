// Bad input at the chat screen, end to end in a real terminal (tmux, see
// tests/tmux_session.h): invalid UTF-8 and control bytes typed or pasted must
// not crash or corrupt the screen, never reach the prompt raw, and the next
// message is answered; and an unknown $TERM ends clchat with one message on
// the terminal instead of ncurses exiting silently.
#include <gtest/gtest.h>

#include <string>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"
#include "tests/ui/tmux_session.h"

using clchat::test::quote;
using clchat::test::TmuxSession;

namespace {

// Bytes as `tmux send-keys -H` takes them: each byte as two hex digits.
void send_bytes(const TmuxSession& t, const std::string& hex) { t.keys("-H " + hex); }

// No C0 control but newline, no DEL, in what the pane shows.
bool printable(const std::string& screen) {
  for (unsigned char c : screen) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
  }
  return true;
}

TEST(TuiInput, BadBytesTypedOrPastedAreDroppedOrReplaced) {
  TmuxSession t(100, 30, "-n 8");
  ASSERT_TRUE(t.wait_ready());
  // Typed: ^A and ^E (readline moves), a lone continuation byte, an overlong
  // '/', an escape sequence no key is bound to, a surrogate, DEL.
  send_bytes(t, "61 01 05 80 62 c0 af 63 1b 5b 39 39 7e 64 ed a0 80 65 7f");
  // Pasted (bracketed): a control, ESC, invalid bytes and a C1 control.
  send_bytes(t, "1b 5b 32 30 30 7e 70 01 71 1b 72 ff 73 c2 85 74 1b 5b 32 30 31 7e");
  t.type(" Once upon a time");
  ASSERT_TRUE(t.wait_text("Once upon a time"));
  ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
  const std::string s = t.screen();
  EXPECT_TRUE(printable(s)) << s;
  // The letters arrive in order; every bad byte is gone or became U+FFFD.
  const auto sent = s.find("› a");
  ASSERT_NE(sent, std::string::npos) << s;
  std::string letters;
  const size_t end = s.find(" Once upon a time", sent);
  ASSERT_NE(end, std::string::npos) << s;
  for (size_t i = sent + 4; i < end; ++i) {
    if (s[i] >= 'a' && s[i] <= 'z') letters += s[i];
  }
  EXPECT_EQ(letters, "abcdpqrst") << s;
  EXPECT_EQ(s.find("CLCHAT_EXIT"), std::string::npos) << s;  // still running
  // And the session goes on.
  t.type("/help");
  ASSERT_TRUE(t.wait_text("/regen"));
}

TEST(TuiInput, UnknownTermIsSaidOnTheTerminal) {
  const std::string model = clchat::test::shared_file("models/stories260K.gguf");
  clchat::test::TempDir home;
  // `script` gives clchat a terminal on stdin and stdout.
  const auto r = clchat::test::run_command(
      "env -i PATH=/usr/bin:/bin HOME=" + home.path() + " LANG=C.UTF-8 TERM=nonexistent-term " +
      "script -qec " + quote(quote(CLCHAT_BINARY) + " -m " + quote(model) + " --device cpu") +
      " /dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("clchat: terminal type 'nonexistent-term' is not in the terminfo database"),
            std::string::npos)
      << r.out << r.err;
}

}  // namespace
