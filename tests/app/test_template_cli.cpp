// `clchat template` against the models' own Jinja templates: for every
// ../shared/chat-templates/NAME.jinja, each conversation of NAME.expected.json
// (rendered by Python's jinja2, never by clchat) goes through
// `clchat template --template-file NAME.jinja -f CONVERSATION.json`, and the
// output must equal the rendering byte for byte; where jinja2 raised (an
// `error` entry), clchat must exit 2 with one line on stderr. Also: -m with a
// model file, and bad conversation files.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

namespace fs = std::filesystem;

// The date Llama 3.1+ templates write ("Today Date: ..."): the renderer fixed
// strftime_now to this day (every Llama 3.2 rendering in the expected file
// shows it); clchat takes it as the conversation's date_string.
constexpr const char* k_render_date = "15 Jan 2026";

std::vector<std::string> jinja_templates() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(test::shared_file("chat-templates"))) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

test::CommandResult clchat(const std::string& args) {
  return test::run_command(test::clchat_binary() + " " + args);
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

TEST(TemplateCli, EveryJinjaTemplateAndConversationMatchesJinja2) {
  const std::vector<std::string> names = jinja_templates();
  ASSERT_GE(names.size(), 6u) << "../shared/chat-templates holds fewer templates than expected";
  const test::TempDir dir;
  size_t checked = 0, refused = 0;
  for (const std::string& name : names) {
    const std::string jinja = test::shared_file("chat-templates/" + name + ".jinja");
    const auto expected = nlohmann::json::parse(
        test::read_file(test::shared_file("chat-templates/" + name + ".expected.json")));
    ASSERT_FALSE(expected["cases"].empty()) << name;
    for (const auto& c : expected["cases"]) {
      const std::string label = name + " / " + c["name"].get<std::string>();
      // The conversation as the renderer got it, with the file's tokens.
      const nlohmann::json conversation = {
          {"messages", c["messages"]},
          {"add_generation_prompt", c["add_generation_prompt"]},
          {"bos_token", expected["bos_token"]},
          {"eos_token", expected["eos_token"]},
          {"date_string", k_render_date},
      };
      const std::string path = dir.file("conversation.json");
      std::ofstream(path) << conversation.dump();
      const auto r = clchat("template --template-file " + jinja + " -f " + path);
      if (c.contains("error")) {
        EXPECT_EQ(r.exit_code, 2) << label << " (jinja2: " << c["error"] << ")\n" << r.out;
        EXPECT_EQ(count_lines(r.err), 1u) << label << ": " << r.err;
        EXPECT_EQ(r.out, "") << label;
        ++refused;
        continue;
      }
      ASSERT_EQ(r.exit_code, 0) << label << ": " << r.err;
      EXPECT_EQ(r.out, c["rendered"].get<std::string>()) << label;
      EXPECT_EQ(r.err, "") << label;
      ++checked;
    }
  }
  // Six templates of five conversations, two of them refused by Gemma 2's.
  EXPECT_GE(checked, 28u);
  EXPECT_GE(refused, 2u);
}

// Line 4 of ../shared/reference/prompts.txt (`\n` escaped there) is SmolLM2's
// template rendered for one user message, default system prompt included (the
// model adds no BOS): -m must print the same text.
TEST(TemplateCli, ModelFileTemplate) {
  std::istringstream lines(test::read_file(test::shared_file("reference/prompts.txt")));
  std::string line;
  for (int i = 0; i < 4; ++i) std::getline(lines, line);
  std::string expected;
  for (size_t at = 0; at < line.size(); ++at) {
    if (line.compare(at, 2, "\\n") == 0) {
      expected += '\n';
      ++at;
    } else {
      expected += line[at];
    }
  }
  ASSERT_NE(expected.find("What is the boiling point of water?"), std::string::npos) << expected;
  const test::TempDir dir;
  const std::string path = dir.file("c.json");
  std::ofstream(path) << R"({"messages": [{"role": "user",
                             "content": "What is the boiling point of water?"}],
                             "add_generation_prompt": true})";
  const auto r = clchat(
      "template -m " + test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf") + " -f " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected);
}

TEST(TemplateCli, BadConversationsAreOneLineAndExit2) {
  const test::TempDir dir;
  const std::string jinja = test::shared_file("chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {R"({"messages": 3})", "'messages' is missing or not an array"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "role 'tool'"},
      {R"({"messages": [{"role": "user"}]})", "needs 'role' and 'content'"},
      {R"({"messages": [{"role": "assistant", "content": "x"}]})", "roles must alternate"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})",
       "roles must alternate"},
  };
  for (const auto& [json, message] : cases) {
    const std::string path = dir.file("bad.json");
    std::ofstream(path) << json;
    const auto r = clchat("template --template-file " + jinja + " -f " + path);
    EXPECT_EQ(r.exit_code, 2) << json;
    EXPECT_EQ(count_lines(r.err), 1u) << json << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << json << ": " << r.err;
    EXPECT_EQ(r.out, "") << json;
  }
  const auto none = clchat("template -f " + dir.file("bad.json"));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("-m MODEL or --template-file FILE"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace clchat
