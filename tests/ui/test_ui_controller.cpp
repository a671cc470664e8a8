// The controller without an engine: posted commands are recorded, events are
// fed by hand. Covers the turn cycle, stop, /regen, /save + /load round trip
// through files, autosave (and its failures), and Ctrl-C twice.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <clocale>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "ui/controller.h"
#include "ui/status.h"

namespace ui = clchat::ui;
namespace ev = clchat::ev;
namespace cmd = clchat::cmd;

namespace {
struct Utf8Locale {
  Utf8Locale() { std::setlocale(LC_ALL, "C.UTF-8"); }
} g_locale;

struct Harness {
  ui::State state;
  std::vector<clchat::Command> posted;
  int cancels = 0;
  ui::Controller c{state, [this](clchat::Command x) { posted.push_back(std::move(x)); },
                   [this] { ++cancels; }};
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("clchat-ui-test-" + std::to_string(::getpid()));
  Harness() {
    std::filesystem::create_directories(dir);
    ev::Ready ready;
    ready.model_name = "tiny";
    ready.quant = "F32";
    ready.device_name = "cpu";
    ready.n_layer = 5;
    ready.n_ctx = 512;
    ready.backend = "opencl";
    ready.chat_template = "chatml";
    ready.system_prompt = "Be nice.";
    c.on_event(ready);
  }
  ~Harness() { std::filesystem::remove_all(dir); }
  void reply(const std::string& text, ev::FinishReason r = ev::FinishReason::Eos) {
    c.on_event(ev::TokenText{text});
    c.on_event(ev::TurnFinished{r, text});
  }
};
}  // namespace

TEST(UiController, TurnCycleAndConversationMirror) {
  Harness h;
  h.c.on_submit("hi", false);
  EXPECT_TRUE(h.state.generating);
  ASSERT_EQ(h.posted.size(), 1u);
  EXPECT_EQ(std::get<cmd::SubmitTurn>(h.posted[0]).text, "hi");
  h.reply("hello");
  EXPECT_FALSE(h.state.generating);
  ASSERT_EQ(h.state.conversation.turns.size(), 2u);
  EXPECT_EQ(h.state.conversation.system, "Be nice.");
  EXPECT_EQ(h.state.conversation.turns[1].text, "hello");
}

TEST(UiController, BusyWhileGenerating) {
  Harness h;
  h.c.on_submit("one", false);
  h.c.on_submit("two", false);
  EXPECT_EQ(h.posted.size(), 1u);
  EXPECT_NE(h.state.hint.find("wait for the reply"), std::string::npos);
  // Not lost: it goes back into the input line.
  ASSERT_TRUE(h.state.input_back.has_value());
  EXPECT_EQ(h.state.input_back->text, "two");
}

TEST(UiController, RefusedTurnComesBackIntoTheInputLine) {
  Harness h;
  h.c.on_submit("a very long question", false);
  h.c.on_event(ev::TurnFinished{ev::FinishReason::ContextFull, ""});
  ASSERT_TRUE(h.state.input_back.has_value());
  EXPECT_EQ(h.state.input_back->text, "a very long question");
  EXPECT_TRUE(h.state.conversation.turns.empty());
}

TEST(UiController, CtrlCStopsAndKeepsTheReplyMarked) {
  Harness h;
  h.c.on_submit("long story", false);
  h.c.on_interrupt(std::chrono::steady_clock::now());
  EXPECT_EQ(h.cancels, 1);
  h.c.on_event(ev::TokenText{"Once"});  // a cancel that raced the turn start is repeated
  EXPECT_EQ(h.cancels, 2);
  h.c.on_event(ev::TurnFinished{ev::FinishReason::Cancelled, "Once"});
  EXPECT_FALSE(h.state.quit);
  EXPECT_TRUE(h.state.conversation.turns.back().stopped);
  EXPECT_EQ(h.state.transcript.entries().back().footnote, "stopped");
}

TEST(UiController, CtrlCTwiceWhenIdleQuits) {
  Harness h;
  const auto t0 = std::chrono::steady_clock::now();
  h.c.on_interrupt(t0);
  EXPECT_FALSE(h.state.quit);
  h.c.on_interrupt(t0 + std::chrono::milliseconds(500));
  EXPECT_TRUE(h.state.quit);
}

TEST(UiController, FailedTurnIsNotKept) {
  Harness h;
  h.c.on_submit("q", false);
  h.c.on_event(ev::Error{"too long"});
  h.c.on_event(ev::TurnFinished{ev::FinishReason::Error, ""});
  EXPECT_TRUE(h.state.conversation.turns.empty());
}

TEST(UiController, RegenDropsTheLastReply) {
  Harness h;
  h.c.on_submit("q", false);
  h.reply("a1");
  h.c.on_submit("/regen", false);
  EXPECT_TRUE(std::holds_alternative<cmd::Regenerate>(h.posted.back()));
  EXPECT_EQ(h.state.conversation.turns.size(), 1u);
  h.reply("a2");
  EXPECT_EQ(h.state.conversation.turns.back().text, "a2");
}

// The engine keeps the old reply when a regeneration fails; so must /save.
TEST(UiController, FailedRegenKeepsTheOldReply) {
  Harness h;
  h.c.on_submit("q", false);
  h.reply("a1");
  h.c.on_submit("/regen", false);
  h.c.on_event(ev::Error{"device lost"});
  h.c.on_event(ev::TurnFinished{ev::FinishReason::Error, ""});
  ASSERT_EQ(h.state.conversation.turns.size(), 2u);
  EXPECT_EQ(h.state.conversation.turns[0].text, "q");
  EXPECT_EQ(h.state.conversation.turns[1].text, "a1");
}

TEST(UiController, UnknownCommandSendsNothing) {
  Harness h;
  h.c.on_submit("/nope", false);
  EXPECT_TRUE(h.posted.empty());
  EXPECT_NE(h.state.hint.find("unknown command"), std::string::npos);
}

TEST(UiController, SetAndDebugPostToTheEngine) {
  Harness h;
  h.c.on_submit("/set temp 0.5", false);
  EXPECT_FLOAT_EQ(std::get<cmd::SetSampling>(h.posted.back()).params.temperature, 0.5f);
  h.c.on_submit("/set greedy", false);
  EXPECT_TRUE(std::get<cmd::SetSampling>(h.posted.back()).params.greedy());
  h.c.on_submit("/debug on", false);
  EXPECT_TRUE(std::get<cmd::SetDebug>(h.posted.back()).on);
  EXPECT_TRUE(h.state.debug);
}

TEST(UiController, SaveThenLoadRestores) {
  Harness h;
  h.c.on_submit("q1", false);
  h.reply("a1");
  h.c.on_submit("q2", false);
  h.c.on_interrupt(std::chrono::steady_clock::now());
  h.reply("a2 partial", ev::FinishReason::Cancelled);
  h.c.on_submit("/save " + (h.dir / "chat").string(), false);
  ASSERT_TRUE(std::filesystem::exists(h.dir / "chat.md"));
  ASSERT_TRUE(std::filesystem::exists(h.dir / "chat.json"));
  std::ifstream md(h.dir / "chat.md");
  const std::string text((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(text.find("## User\n\nq1"), std::string::npos);
  EXPECT_NE(text.find("*(stopped)*"), std::string::npos);

  Harness other;
  other.c.on_submit("/load " + (h.dir / "chat.md").string(), false);
  ASSERT_FALSE(other.posted.empty()) << other.state.hint;
  const auto& load = std::get<cmd::LoadConversation>(other.posted.back());
  EXPECT_EQ(load.system, "Be nice.");
  ASSERT_EQ(load.turns.size(), 4u);
  EXPECT_EQ(load.turns[3].text, "a2 partial");
  EXPECT_EQ(load.turns[3].role, clchat::Role::Assistant);
  EXPECT_TRUE(other.state.conversation.turns[3].stopped);
  EXPECT_EQ(other.state.transcript.entries().back().footnote, "stopped");
}

// /load takes the same argument /save took: "/save chat" then "/load chat".
TEST(UiController, LoadAcceptsTheNameSaveWasGiven) {
  Harness h;
  h.c.on_submit("q1", false);
  h.reply("a1");
  h.c.on_submit("/save " + (h.dir / "chat").string(), false);
  Harness other;
  other.c.on_submit("/load " + (h.dir / "chat").string(), false);
  ASSERT_FALSE(other.posted.empty()) << other.state.hint;
  const auto& load = std::get<cmd::LoadConversation>(other.posted.back());
  ASSERT_EQ(load.turns.size(), 2u);
  EXPECT_EQ(load.turns[1].text, "a1");
  EXPECT_NE(other.state.hint.find("chat.json"), std::string::npos) << other.state.hint;
}

TEST(UiController, LoadOfABadFileIsAHint) {
  Harness h;
  std::ofstream(h.dir / "bad.json") << "{\"turns\": []}";
  h.c.on_submit("/load " + (h.dir / "bad.json").string(), false);
  EXPECT_NE(h.state.hint.find("not a clchat conversation"), std::string::npos);
  EXPECT_TRUE(h.posted.empty());
}

TEST(UiController, AutosaveAfterEveryTurn) {
  Harness h;
  h.state.autosave = h.dir / "auto.json";
  h.c.on_submit("q", false);
  h.reply("a");
  const auto c = ui::read_conversation(h.dir / "auto.json");
  ASSERT_EQ(c.turns.size(), 2u);
  EXPECT_EQ(c.turns[1].text, "a");
}

// A failing autosave (here its folder cannot be made: its parent is a file)
// is on the screen, in the hint and the status bar, and is tried again after
// the next turn, which then writes the whole conversation.
TEST(UiController, FailedAutosaveIsShownAndRetried) {
  Harness h;
  const auto blocker = h.dir / "blocked";
  std::ofstream(blocker) << "a file where the folder should be";
  h.state.autosave = blocker / "auto.json";
  h.c.on_submit("q1", false);
  h.reply("a1");
  EXPECT_NE(h.state.autosave_error.find("cannot create"), std::string::npos)
      << h.state.autosave_error;
  EXPECT_NE(h.state.hint.find("autosave failed"), std::string::npos) << h.state.hint;
  EXPECT_EQ(h.state.hint_style, ui::Style::Warning);
  EXPECT_NE(ui::build_status_line(h.state, 200).text().find("AUTOSAVE FAILED"), std::string::npos);
  // Still failing: still said.
  h.c.on_submit("q2", false);
  h.reply("a2");
  EXPECT_FALSE(h.state.autosave_error.empty());
  // The disk has room again: the next turn saves all four turns.
  std::filesystem::remove(blocker);
  h.c.on_submit("q3", false);
  h.reply("a3");
  EXPECT_TRUE(h.state.autosave_error.empty()) << h.state.autosave_error;
  EXPECT_NE(h.state.hint.find("autosave works again"), std::string::npos) << h.state.hint;
  EXPECT_EQ(ui::build_status_line(h.state, 200).text().find("AUTOSAVE FAILED"), std::string::npos);
  EXPECT_EQ(ui::read_conversation(blocker / "auto.json").turns.size(), 6u);
}

// A write that fails part way (as on a full disk; here the file size limit)
// throws with the reason and leaves neither a temp file nor a changed file.
TEST(UiConversationFile, FailedWriteLeavesNoTempFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("clchat-write-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "c.json";
  ui::write_file(path, "old");
  struct rlimit old_limit {};
  ::getrlimit(RLIMIT_FSIZE, &old_limit);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 16;
  ::setrlimit(RLIMIT_FSIZE, &small);
  std::string error;
  try {
    ui::write_file(path, std::string(4096, 'x'));
  } catch (const ui::ConversationFileError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find("cannot write"), std::string::npos) << error;
  EXPECT_NE(error.find("too large"), std::string::npos) << error;  // EFBIG's text
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"c.json"});
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "old");
  std::filesystem::remove_all(dir);
}

TEST(UiConversationFile, JsonRoundTripAndPaths) {
  ui::Conversation c{
      "m",
      "sys",
      {{clchat::Role::User, "日本 \"q\"\n", false}, {clchat::Role::Assistant, "a", true}}};
  const auto back = ui::from_json(ui::to_json(c));
  EXPECT_EQ(back.system, "sys");
  ASSERT_EQ(back.turns.size(), 2u);
  EXPECT_EQ(back.turns[0].text, "日本 \"q\"\n");
  EXPECT_TRUE(back.turns[1].stopped);
  EXPECT_EQ(ui::save_paths("x/chat.json").markdown, "x/chat.md");
  EXPECT_EQ(ui::save_paths("chat").json, "chat.json");
  EXPECT_EQ(ui::load_path("a.md"), "a.json");
  EXPECT_EQ(ui::load_path("a"), "a.json");  // no file "a": /save a wrote a.json
  EXPECT_EQ(ui::load_path("a.json"), "a.json");
  EXPECT_THROW(ui::from_json("not json"), ui::ConversationFileError);
  EXPECT_THROW(
      ui::from_json(R"({"format":"clchat-conversation","turns":[{"role":"tool","text":""}]})"),
      ui::ConversationFileError);
}
