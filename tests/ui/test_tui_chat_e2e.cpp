// The chat on the default model (SmolLM2-135M-Instruct) in a real terminal
// (tmux, see tests/tmux_session.h): its sampling defaults do not loop, a long
// prompt shows its progress and stops at Ctrl-C, and /show tells the model
// and every setting.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "tests/ui/tmux_session.h"

using clchat::test::TmuxSession;

namespace {

const char* k_smollm2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// The words of the transcript after the line holding `question`, up to the
// hint line (a rule of '─'): the reply.
std::vector<std::string> reply_words(const std::string& screen, const std::string& question) {
  const auto at = screen.find(question);
  if (at == std::string::npos) return {};
  std::istringstream lines(screen.substr(screen.find('\n', at) + 1));
  std::vector<std::string> words;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("──") != std::string::npos) break;
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
  }
  return words;
}

// The most times one run of `n` words occurs.
int most_repeated_ngram(const std::vector<std::string>& words, size_t n) {
  std::map<std::string, int> count;
  int most = 0;
  for (size_t i = 0; i + n <= words.size(); ++i) {
    std::string key;
    for (size_t j = i; j < i + n; ++j) key += words[j] + " ";
    most = std::max(most, ++count[key]);
  }
  return most;
}

bool reply_done(const std::string& s, const std::string& question) {
  return s.find(question) != std::string::npos && s.find("Ctrl-C stops") == std::string::npos &&
         s.find("stopping") == std::string::npos;
}

}  // namespace

// Greedy decoding made this "a delicate beauty, a delicate beauty, ...".
TEST(TuiChat, DefaultSamplingWritesAPoemThatDoesNotLoop) {
  TmuxSession t(99, 60, "-n 200", {}, k_smollm2, /*greedy=*/false);
  ASSERT_TRUE(t.wait_banner());
  EXPECT_NE(t.screen().find("│ temp 0.80"), std::string::npos) << t.screen();
  const std::string q = "Write a short poem about the sea.";
  t.type(q);
  ASSERT_TRUE(t.wait_text("› " + q));
  ASSERT_TRUE(t.wait_for([&](const std::string& s) { return reply_done(s, q); }, "the poem"));
  const auto words = reply_words(t.screen(), "› " + q);
  ASSERT_GE(words.size(), 10u) << t.screen();
  EXPECT_LT(most_repeated_ngram(words, 8), 4) << t.screen();
}

// A long conversation, then a message: its prompt is processed in chunks
// that count up on the hint line, and Ctrl-C stops it (an empty reply, kept
// and marked stopped); /quit then leaves at once.
TEST(TuiChat, CtrlCStopsALongPromptAndItsProgressShows) {
  TmuxSession t(
      99, 40, "-n 16",
      [](const std::filesystem::path& home) {
        std::string turns;
        for (int i = 0; i < 12; ++i) {
          std::string text;
          for (int j = 0; j < 8; ++j) {
            text += "Turn " + std::to_string(i) + " sentence " + std::to_string(j) +
                    ": the harbour lights were bright over the quiet water tonight. ";
          }
          turns += std::string(i ? "," : "") + R"({"role":")" + (i % 2 ? "assistant" : "user") +
                   R"(","text":")" + text + R"("})";
        }
        std::ofstream(home / "long.json")
            << R"({"format":"clchat-conversation","version":1,"model":"m","system":"",)"
            << R"("turns":[)" << turns << "]}";
      },
      k_smollm2);
  ASSERT_TRUE(t.wait_banner());
  t.type("/load " + (t.dir() / "long").string());
  ASSERT_TRUE(t.wait_text("Turn 11 sentence"));
  t.type("Summarise that.");
  ASSERT_TRUE(t.wait_for(
      [](const std::string& s) {
        return s.find("tokens · Ctrl-C stops") != std::string::npos &&
               s.find("── prompt ") != std::string::npos;
      },
      "prompt progress on the hint line"));
  t.keys("C-c");
  ASSERT_TRUE(t.wait_text("[stopped]"));
  t.type("/quit");
  ASSERT_TRUE(t.wait_text("CLCHAT_EXIT=0"));
}

TEST(TuiChat, ShowTellsTheModelAndEverySetting) {
  TmuxSession t(120, 50);
  ASSERT_TRUE(t.wait_ready());
  t.type("/set top_k 7");
  t.type("/show");
  ASSERT_TRUE(t.wait_text("settings (/set KEY VALUE)"));
  const std::string s = t.screen();
  for (const char* part :
       {"architecture       llama", "parameters", "weight types", "context", "template",
        "temp               0.00 (greedy)", "top_k              7", "repeat_penalty",
        "frequency_penalty", "presence_penalty", "seed", "max_tokens"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << "\n" << s;
  }
}
