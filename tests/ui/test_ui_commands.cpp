// Slash-command parsing: every command, bad arguments, unknown commands, and
// the rule that only a typed '/' starts a command.
#include <gtest/gtest.h>

#include "ui/commands.h"

namespace ui = clchat::ui;
namespace command = clchat::ui::command;

namespace {
template <typename T>
const T& as(const ui::Input& in) {
  EXPECT_TRUE(std::holds_alternative<T>(in)) << "variant index " << in.index();
  static const T empty{};
  const T* p = std::get_if<T>(&in);
  return p ? *p : empty;
}
}  // namespace

TEST(UiCommands, MessagesAndEmptyLines) {
  EXPECT_EQ(as<ui::Message>(ui::parse_input("hello")).text, "hello");
  EXPECT_TRUE(std::holds_alternative<ui::Nothing>(ui::parse_input("   ")));
  EXPECT_EQ(as<ui::Message>(ui::parse_input("//etc/passwd")).text, "/etc/passwd");
}

TEST(UiCommands, PastedSlashIsNotACommand) {
  EXPECT_EQ(as<ui::Message>(ui::parse_input("/quit\nmore", true)).text, "/quit\nmore");
  EXPECT_TRUE(std::holds_alternative<command::Quit>(ui::parse_input("/quit", false)));
}

TEST(UiCommands, SimpleCommands) {
  as<command::Help>(ui::parse_input("/help"));
  as<command::Clear>(ui::parse_input("/clear"));
  as<command::Regen>(ui::parse_input("/regen"));
  as<command::Stats>(ui::parse_input("/stats"));
  as<command::Quit>(ui::parse_input("/quit"));
  as<command::Quit>(ui::parse_input("/exit"));
  EXPECT_NE(as<command::Invalid>(ui::parse_input("/clear now")).hint.find("no arguments"),
            std::string::npos);
}

TEST(UiCommands, SystemSaveLoad) {
  EXPECT_EQ(as<command::System>(ui::parse_input("/system  Be brief.  ")).text, "Be brief.");
  EXPECT_EQ(as<command::System>(ui::parse_input("/system")).text, "");
  EXPECT_EQ(as<command::Save>(ui::parse_input("/save")).path, "");
  EXPECT_EQ(as<command::Save>(ui::parse_input("/save chat.md")).path, "chat.md");
  EXPECT_EQ(as<command::Load>(ui::parse_input("/load chat.json")).path, "chat.json");
  as<command::Invalid>(ui::parse_input("/load"));
}

TEST(UiCommands, SetValuesAndRanges) {
  auto s = as<command::Set>(ui::parse_input("/set temp 0.8"));
  EXPECT_EQ(s.key, "temp");
  EXPECT_DOUBLE_EQ(s.value, 0.8);
  EXPECT_EQ(as<command::Set>(ui::parse_input("/set temperature 1")).key, "temp");
  EXPECT_EQ(as<command::Set>(ui::parse_input("/set top_k 20")).value, 20);
  EXPECT_EQ(as<command::Set>(ui::parse_input("/set max_tokens 64")).key, "max_tokens");
  EXPECT_EQ(as<command::Set>(ui::parse_input("/set seed 42")).value, 42);
  as<command::SetGreedy>(ui::parse_input("/set greedy"));
  // The config file's rules (config/number_rules.h), with their words.
  EXPECT_EQ(as<command::Invalid>(ui::parse_input("/set top_p 2")).hint,
            "/set top_p: must be between 0 and 1");
  EXPECT_EQ(as<command::Invalid>(ui::parse_input("/set top_k 2000000")).hint,
            "/set top_k: must be between 0 and 1048576");
  EXPECT_EQ(as<command::Invalid>(ui::parse_input("/set temp nan")).hint,
            "/set temp: must be between 0 and 100");
  EXPECT_EQ(as<command::Set>(ui::parse_input("/set seed -1")).value, -1);
  EXPECT_NE(as<command::Invalid>(ui::parse_input("/set top_k 1.5")).hint.find("whole number"),
            std::string::npos);
  EXPECT_NE(as<command::Invalid>(ui::parse_input("/set temp hot")).hint.find("expected a number"),
            std::string::npos);
  EXPECT_NE(as<command::Invalid>(ui::parse_input("/set color red")).hint.find("usage"),
            std::string::npos);
  as<command::Invalid>(ui::parse_input("/set"));
}

TEST(UiCommands, ApplySetAndSummary) {
  clchat::SamplingParams p;
  EXPECT_EQ(ui::sampling_summary(p), "greedy");
  clchat::SamplingFields from_model{true, true, true, true, true, true};
  ui::apply_set(p, {"temp", 0.7}, from_model);
  ui::apply_set(p, {"top_k", 20}, from_model);
  ui::apply_set(p, {"max_tokens", 99}, from_model);
  ui::apply_set(p, {"seed", 5}, from_model);
  ui::apply_set(p, {"presence_penalty", 0.5}, from_model);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FALSE(from_model.temperature);  // the user's now
  EXPECT_FALSE(from_model.top_k);
  EXPECT_TRUE(from_model.top_p);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.max_tokens, 99);
  EXPECT_EQ(p.seed, 5u);
  EXPECT_EQ(ui::sampling_summary(p), "temp 0.70 top-k 20 top-p 0.95 min-p 0.05");
}

TEST(UiCommands, DebugOnOff) {
  EXPECT_TRUE(as<command::Debug>(ui::parse_input("/debug on")).on);
  EXPECT_FALSE(as<command::Debug>(ui::parse_input("/debug off")).on);
  as<command::Invalid>(ui::parse_input("/debug maybe"));
}

TEST(UiCommands, UnknownCommandGivesOneLineHint) {
  const auto hint = as<command::Invalid>(ui::parse_input("/frobnicate x")).hint;
  EXPECT_NE(hint.find("unknown command /frobnicate"), std::string::npos);
  EXPECT_EQ(hint.find('\n'), std::string::npos);
}
