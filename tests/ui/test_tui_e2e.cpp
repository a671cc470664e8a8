// End-to-end tests of the chat screen in a real terminal (tmux, see
// tests/tmux_session.h): streaming and the panel, debug readback, Ctrl-C,
// /save and /load, resizing, pastes, a clean exit and --resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/test_support.h"
#include "tests/ui/tmux_session.h"

using clchat::test::quote;
using clchat::test::TmuxSession;

namespace {

double number_after(const std::string& screen, const std::string& label) {
  std::smatch m;
  const std::regex re(label + R"(\s+([0-9]+\.[0-9]+) tok/s)");
  if (!std::regex_search(screen, m, re)) return -1;
  return std::stod(m[1]);
}

}  // namespace

// A first start (each session has an empty kernel cache) says what it is
// doing while it compiles, not only "loading…".
TEST(Tui, FirstStartSaysWhatItCompiles) {
  TmuxSession t(120, 30);
  ASSERT_TRUE(t.wait_text("loading: compiling kernels "));
  ASSERT_TRUE(t.wait_ready());
}

TEST(Tui, ReplyStreamsAndPanelShowsSpeedAndOneBarPerLayer) {
  TmuxSession t(120, 40, "-n 64");
  ASSERT_TRUE(t.wait_ready());
  std::string s = t.screen();
  EXPECT_NE(s.find("Performance"), std::string::npos);  // panel on at 120 columns
  EXPECT_NE(s.find("F2 panel"), std::string::npos);
  t.type("Once upon a time");
  ASSERT_TRUE(t.wait_text("› Once upon a time"));
  ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
  // Layer timings are sampled every few tokens; 64 tokens give several samples.
  ASSERT_TRUE(t.wait_text("total "));
  s = t.screen();
  EXPECT_GT(number_after(s, "decode"), 0.0) << s;
  EXPECT_GT(number_after(s, "prefill"), 0.0) << s;
  for (int il = 0; il < 5; ++il) {
    EXPECT_TRUE(std::regex_search(s, std::regex("│ L" + std::to_string(il) + " +█")))
        << "no bar for layer " << il << "\n"
        << s;
  }
  EXPECT_EQ(s.find("│ L5 "), std::string::npos);  // stories260K has 5 layers
  EXPECT_TRUE(std::regex_search(s, std::regex(R"(KV cache .* [1-9][0-9]*/[0-9]+)"))) << s;
}

TEST(Tui, F3ShowsDebugStatistics) {
  TmuxSession t(120, 40, "-n 16");
  ASSERT_TRUE(t.wait_ready());
  t.keys("F3");
  ASSERT_TRUE(t.wait_text("debug readback on"));
  t.type("The cat");
  ASSERT_TRUE(t.wait_text("top-5"));
  ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
  const std::string s = t.screen();
  EXPECT_NE(s.find("layer    rms"), std::string::npos) << s;
  EXPECT_TRUE(std::regex_search(s, std::regex(R"(│ L4 +[0-9]+\.[0-9]+)"))) << s;
  EXPECT_TRUE(std::regex_search(s, std::regex(R"(│  [01]\.[0-9]{3}  ")"))) << s;
  t.type("/debug off");
  ASSERT_TRUE(t.wait_text("debug readback off"));
}

TEST(Tui, CtrlCStopsALongReply) {
  TmuxSession t(100, 30, "-n 100000");
  ASSERT_TRUE(t.wait_ready());
  // Enter and Ctrl-C in one burst: the stop must hold even if it reaches the
  // engine before the turn has started.
  t.type("Tell me a long story", "Enter C-c");
  ASSERT_TRUE(t.wait_text("[stopped]"));
  EXPECT_EQ(t.screen().find("[context full]"), std::string::npos);
  // Not quit: the screen still takes input.
  t.type("/help");
  ASSERT_TRUE(t.wait_text("/regen"));
}

TEST(Tui, SaveWritesFilesThatLoadRestores) {
  TmuxSession t(80, 24, "-n 24");
  ASSERT_TRUE(t.wait_ready());
  EXPECT_EQ(t.screen().find("Performance"), std::string::npos);  // panel off at 80 columns
  t.type("Lily had a red ball");
  ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
  const auto base = t.dir() / "saved";
  t.type("/save " + base.string());
  ASSERT_TRUE(t.wait_text("saved "));
  ASSERT_TRUE(std::filesystem::exists(base.string() + ".json"));
  const std::string md = clchat::test::read_file(base.string() + ".md");
  EXPECT_NE(md.find("## User\n\nLily had a red ball"), std::string::npos) << md;
  t.type("/clear");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) { return s.find("Lily had a red ball") == std::string::npos; },
      "/clear to empty the transcript"));
  // The name /save was given, as it was given: /save wrote saved.md and saved.json.
  t.type("/load " + base.string());
  ASSERT_TRUE(t.wait_text("› Lily had a red ball"));
  // The restored conversation continues: the model answers the next turn.
  t.type("Then what?");
  ASSERT_TRUE(t.wait_text("› Then what?"));
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) {
        const auto asked = s.find("› Then what?\n\n");  // in the transcript, not the input
        const auto done = s.rfind("[max_tokens reached]");
        return asked != std::string::npos && done != std::string::npos && done > asked;
      },
      "the reply after /load"));
  // The autosave holds all four turns.
  bool found = false;
  std::string files;
  for (const auto& e :
       std::filesystem::directory_iterator(t.dir() / "state/clchat/conversations")) {
    const std::string text = clchat::test::read_file(e.path().string());
    files += e.path().string() + ":\n" + text + "\n";
    found |= text.find("Then what?") != std::string::npos;
  }
  EXPECT_TRUE(found) << files;
}

TEST(Tui, ResizeRedrawsAndTooSmallIsSaid) {
  TmuxSession t(120, 40);
  ASSERT_TRUE(t.wait_ready());
  t.tmux("resize-window -t t -x 80 -y 24");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) {
        // 24 lines, the status bar last, and no line wider than 80 columns.
        const auto lines = clchat::test::screen_lines(s);
        return lines.size() == 24 && lines.back().find(" clchat │") == 0;
      },
      "a redraw at 80x24"));
  t.tmux("resize-window -t t -x 20 -y 5");
  ASSERT_TRUE(t.wait_text("terminal too"));
  t.tmux("resize-window -t t -x 110 -y 30");
  ASSERT_TRUE(t.wait_text("F2 panel"));
  EXPECT_EQ(t.screen().find("terminal too"), std::string::npos);
}

// The panel follows the width at every resize (100 columns or more).
TEST(Tui, PanelIsDecidedOnEveryResize) {
  TmuxSession t(120, 30);
  ASSERT_TRUE(t.wait_ready());
  EXPECT_NE(t.screen().find("Performance"), std::string::npos);
  t.tmux("resize-window -t t -x 80 -y 30");
  ASSERT_TRUE(
      t.wait_for([](const std::string& s) { return s.find("Performance") == std::string::npos; },
                 "no panel at 80 columns"));
  t.tmux("resize-window -t t -x 200 -y 30");
  ASSERT_TRUE(t.wait_text("Performance"));
}

// An F2 choice sticks through resizes.
TEST(Tui, F2ChoiceSticksThroughResizes) {
  TmuxSession t(80, 30);
  ASSERT_TRUE(t.wait_ready());
  EXPECT_EQ(t.screen().find("Performance"), std::string::npos);
  t.keys("F2");  // the user wants it even at 80 columns
  ASSERT_TRUE(t.wait_text("Performance"));
  t.tmux("resize-window -t t -x 90 -y 30");
  // A key typed after the resize is drawn only once clchat has taken the
  // resize (signals before keys): then the panel must still be there.
  t.type("x", "");
  ASSERT_TRUE(t.wait_text("› x"));
  EXPECT_NE(t.screen().find("│ Performance"), std::string::npos) << t.screen();
}

TEST(Tui, PastedSlashLineIsAMessage) {
  TmuxSession t(100, 30, "-n 8");
  ASSERT_TRUE(t.wait_ready());
  t.tmux("set-buffer -b p " + quote("/quit is not a command\nsecond line"));
  t.tmux("paste-buffer -p -b p -t t");  // -p: bracketed, as a terminal pastes
  t.keys("Enter");
  ASSERT_TRUE(t.wait_text("› /quit is not a command"));
  EXPECT_NE(t.screen().find("  second line"), std::string::npos);
  EXPECT_EQ(t.screen().find("CLCHAT_EXIT"), std::string::npos);
}

TEST(Tui, QuitLeavesACleanTerminal) {
  TmuxSession t(100, 30);
  ASSERT_TRUE(t.wait_ready());
  t.type("/quit");
  ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=0"));
  const std::string s = t.screen();
  EXPECT_EQ(s.find("F2 panel"), std::string::npos) << s;  // the alternate screen is gone
  EXPECT_EQ(t.format("#{alternate_on}"), "0");
  EXPECT_EQ(t.format("#{mouse_any_flag}"), "0");
  EXPECT_EQ(t.format("#{cursor_flag}"), "1");
  // The history file kept the line.
  EXPECT_NE(clchat::test::read_file((t.dir() / "state/clchat/history").string()).find("/quit"),
            std::string::npos);
}

TEST(Tui, CtrlDOnEmptyLineQuitsAndResumeReopens) {
  const auto saved =
      std::filesystem::temp_directory_path() / ("clchat-resume-" + std::to_string(::getpid()));
  {
    TmuxSession t(100, 30, "-n 8");
    ASSERT_TRUE(t.wait_ready());
    t.type("Remember the blue kite");
    ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
    t.keys("C-d");
    ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=0"));
    std::filesystem::copy(t.dir() / "state", saved, std::filesystem::copy_options::recursive);
  }
  TmuxSession r(100, 30, "--resume", [&](const std::filesystem::path& home) {
    std::filesystem::copy(saved, home / "state", std::filesystem::copy_options::recursive);
  });
  std::filesystem::remove_all(saved);
  ASSERT_TRUE(r.wait_text("› Remember the blue kite"));
  ASSERT_TRUE(r.wait_ready());
}

// A state folder that cannot be written (XDG_STATE_HOME is a file): no log
// file and no autosave. The screen says both, and nothing goes to fd 2, the
// terminal the screen owns (a file here, so that the test can read it); it
// used to get the log's warnings.
TEST(Tui, UnwritableStateIsSaidOnTheScreenNotOnStderr) {
  const auto err =
      std::filesystem::temp_directory_path() / ("clchat-stderr-" + std::to_string(::getpid()));
  {
    TmuxSession t(120, 30, "-n 8 2>" + quote(err.string()), [](const std::filesystem::path& home) {
      std::ofstream(home / "state") << "a file where the state folder should be";
    });
    ASSERT_TRUE(t.wait_ready());
    ASSERT_TRUE(t.wait_text("logging is off"));
    t.type("Once upon a time");
    ASSERT_TRUE(t.wait_text("[max_tokens reached]"));
    ASSERT_TRUE(t.wait_text("AUTOSAVE FAILED"));
    t.type("/quit");
    ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=0"));
  }
  const std::string written = clchat::test::read_file(err.string());
  std::filesystem::remove(err);
  EXPECT_EQ(written, "");
}
