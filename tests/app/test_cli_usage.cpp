// Bad usage through the real executable (issue 21, items 6-8 and 10): values
// the config file refuses are refused as flags too, unknown names are bad
// usage (exit status 2, one line), --config works after a subcommand,
// --resume is refused in line mode, a failed `run --chat` turn ends with
// exit status 1, and a reduced context is reported once. Runs the reference
// backend on stories260K where no device is needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::string stories() { return "'" + test::shared_file("models/stories260K.gguf") + "'"; }

// `clchat ARGS` with `input` on stdin (run_command gives /dev/null).
test::CommandResult clchat(const std::string& args, const std::string& input = "") {
  return test::run_command("( printf '" + input + "' | " + test::clchat_binary() + " " + args +
                           " )");
}

void expect_usage_error(const test::CommandResult& r, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("clchat: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
}

TEST(CliUsage, SamplingFlagsFollowTheConfigRules) {
  const std::string chat = "--backend reference -m " + stories() + " ";
  const std::pair<const char*, const char*> bad[] = {
      {"--temp nan", "--temp: must be between 0 and 100"},
      {"--temp inf", "--temp: must be between 0 and 100"},
      {"--top-p 2", "--top-p: must be between 0 and 1"},
      {"--min-p 5", "--min-p: must be between 0 and 1"},
      {"--repeat-penalty -1", "--repeat-penalty: must be between 0 and 100"},
      {"--top-k -5", "--top-k: must be between 0 and 1048576"},
      {"--top-k 1.5", "--top-k: expected a whole number"},
      {"--seed 18446744073709551616", "--seed: must be between -1 and 9223372036854775807"},
      {"-n 0", "must be between 1 and 16777216"},
  };
  for (const auto& [flags, phrase] : bad) {
    SCOPED_TRACE(flags);
    expect_usage_error(clchat(chat + flags), phrase);
  }
  expect_usage_error(clchat("run --chat " + chat + "--seed 18446744073709551616"), "--seed");
  // The limits themselves are allowed.
  const auto ok = clchat(chat +
                         "--temp 100 --top-p 1 --min-p 0 --repeat-penalty 0 --top-k 0 "
                         "--seed -1 -n 1");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(CliUsage, UnknownNamesAreBadUsage) {
  const test::TempDir dir;
  expect_usage_error(clchat("--backend reference -m " + stories() + " --chat-template bogus"),
                     "unknown chat template 'bogus'");
  std::ofstream(dir.file("template.toml")) << "chat_template = \"bogus\"\n";
  expect_usage_error(
      clchat("--backend reference -m " + stories() + " --config " + dir.file("template.toml")),
      "unknown chat template 'bogus'");
  expect_usage_error(clchat("bench --synthetic foo"), "unknown synthetic model 'foo'");
  expect_usage_error(clchat("synth --preset foo -o " + dir.file("x.gguf")),
                     "unknown synthetic model 'foo'");
}

// The file is read wherever --config stands, so every command accepts it.
TEST(CliUsage, ConfigFlagWorksAfterASubcommand) {
  const test::TempDir dir;
  std::ofstream(dir.file("good.toml")) << "[sampling]\ntemperature = 0\n";
  std::ofstream(dir.file("bad.toml")) << "[sampling]\ntemperature = \"hot\"\n";
  const std::string run = "run --backend reference -m " + stories() + " -p hi -n 1 --config ";
  const auto good = clchat(run + dir.file("good.toml"));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  const auto info = clchat("info -m " + stories() + " --config " + dir.file("good.toml"));
  EXPECT_EQ(info.exit_code, 0) << info.err;
  expect_usage_error(clchat(run + dir.file("bad.toml")), "sampling.temperature: expected a number");
}

// Line mode does not autosave, so it cannot resume: saying so beats starting
// a new conversation the user takes for the old one.
TEST(CliUsage, ResumeIsRefusedInLineMode) {
  expect_usage_error(clchat("--backend reference -m " + stories() + " --resume", "hi\\n"),
                     "--resume needs the chat screen");
}

// A turn that does not fit the context fails; the chat goes on and the exit
// status is 1, for `run --chat` as for plain line mode.
TEST(CliUsage, FailedTurnInRunChatExitsOne) {
  std::string long_turn;
  for (int i = 0; i < 100; ++i) long_turn += "once upon a time ";
  for (const std::string cmd : {"run --chat", ""}) {
    SCOPED_TRACE(cmd);
    const auto r = clchat(cmd + " --backend reference -m " + stories() + " -c 64 -n 4",
                          long_turn + "\\nhi\\n");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("clchat: "), std::string::npos) << r.err;
  }
}

// A context the device cannot hold is reduced and said once (it was a log
// warning and a notice). CLCHAT_FAULT makes the device small.
TEST(CliUsage, ReducedContextIsReportedOnce) {
  const std::string env = "CLCHAT_FAULT=device_mem=67108864 ";
  for (const std::string cmd : {"", "run -p hi -n 1"}) {
    SCOPED_TRACE(cmd);
    const auto e = test::run_command(env + test::clchat_binary() + " " + cmd + " -c 16777216 -m " +
                                     stories() + " --device cpu");
    EXPECT_EQ(e.exit_code, 0) << e.err;
    EXPECT_NE(e.err.find("clchat: context reduced from 16777216 to "), std::string::npos) << e.err;
    size_t n = 0;
    for (size_t at = e.err.find("16777216"); at != std::string::npos;
         at = e.err.find("16777216", at + 1)) {
      ++n;
    }
    EXPECT_EQ(n, 1u) << e.err;
  }
}

}  // namespace
}  // namespace clchat
