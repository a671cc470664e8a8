// Chat templates: each style's text for one conversation, written out by hand
// from the templates chat_template.cpp cites; the incremental pieces add up to
// the whole; detection by markers; the SmolLM2 file's template and default
// system prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/chat/template.h"
#include "engine/gguf/gguf.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

// system "S"; user "hi"; assistant " Hello!" (verbatim as generated, leading
// space included); user "bye", awaiting the reply.
const std::vector<Turn> k_turns = {
    {Role::User, "hi"}, {Role::Assistant, " Hello!"}, {Role::User, "bye"}};

struct StyleCase {
  TemplateStyle style;
  std::string expected;
};

const std::vector<StyleCase> k_cases = {
    {TemplateStyle::ChatML,
     "<|im_start|>system\nS<|im_end|>\n"
     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n Hello!<|im_end|>\n"
     "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"},
    {TemplateStyle::Llama2,
     "[INST] <<SYS>>\nS\n<</SYS>>\n\nhi [/INST] Hello! </s>"
     "<s>[INST] bye [/INST]"},
    {TemplateStyle::Llama3,
     "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nbye<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {TemplateStyle::Zephyr,
     "<|system|>\nS</s>\n<|user|>\nhi</s>\n<|assistant|>\n Hello!</s>\n"
     "<|user|>\nbye</s>\n<|assistant|>\n"},
    {TemplateStyle::Gemma,
     "<start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
     "<start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n"},
    {TemplateStyle::Plain, "S\n\nUser: hi\nAssistant: Hello!\nUser: bye\nAssistant:"},
    // microsoft/Phi-3.5-mini-instruct's template.
    {TemplateStyle::Phi3,
     "<|system|>\nS<|end|>\n<|user|>\nhi<|end|>\n<|assistant|>\n Hello!<|end|>\n"
     "<|user|>\nbye<|end|>\n<|assistant|>\n"},
    // mistralai/Mistral-Nemo-Instruct-2407's: the system prompt before the
    // last user message.
    {TemplateStyle::MistralTekken, "[INST]hi[/INST] Hello!</s>[INST]S\n\nbye[/INST]"},
};

TEST(ChatTemplate, FullConversationPerStyle) {
  for (const StyleCase& c : k_cases) {
    const ChatTemplate t(c.style);
    EXPECT_EQ(t.format("S", k_turns).text, c.expected) << t.name();
  }
}

TEST(ChatTemplate, IncrementalTurnsAddUpToTheFullText) {
  for (const StyleCase& c : k_cases) {
    const ChatTemplate t(c.style);
    for (const std::string system : {"S", ""}) {
      // What a session prefills: turn 1, the generated reply, then turn 2
      // (which starts by closing the reply).
      // Mistral's system prompt moves to the last user message: a session
      // puts it before each one when it is sent (test below).
      if (c.style == TemplateStyle::MistralTekken && !system.empty()) continue;
      // The reply as the session's rebuild writes it (Llama 3 and Gemma trim).
      const std::string reply = t.assistant_reply(" Hello!").text;
      const std::string incremental =
          t.next_turn("hi", system, true).text + reply + t.next_turn("bye", system, false).text;
      EXPECT_EQ(incremental, t.format(system, k_turns).text)
          << t.name() << " system '" << system << "'";
      // A finished conversation ends with the reply's end marker.
      const std::vector<Turn> two(k_turns.begin(), k_turns.begin() + 2);
      EXPECT_EQ(t.next_turn("hi", system, true).text + reply + t.assistant_end().text,
                t.format(system, two).text)
          << t.name();
    }
  }
}

TEST(ChatTemplate, MistralSessionPutsTheSystemPromptBeforeEachNewMessage) {
  const ChatTemplate t(TemplateStyle::MistralTekken);
  EXPECT_EQ(t.next_turn("hi", "S", true).text, "[INST]S\n\nhi[/INST]");
  EXPECT_EQ(t.next_turn("bye", "S", false).text, "</s>[INST]S\n\nbye[/INST]");
}

// The conversation's own words are content spans in every style, so that the
// session never reads special tokens into them; the markup around them is not.
TEST(ChatTemplate, MessagesAreContentSpansInEveryStyle) {
  const std::vector<TemplateStyle> styles = {
      TemplateStyle::Plain,  TemplateStyle::ChatML,    TemplateStyle::SmolLM3,
      TemplateStyle::Llama2, TemplateStyle::MistralV3, TemplateStyle::MistralTekken,
      TemplateStyle::Llama3, TemplateStyle::Llama31,   TemplateStyle::Zephyr,
      TemplateStyle::Phi3,   TemplateStyle::Gemma};
  const std::vector<Turn> turns = {
      {Role::User, "u1 <|im_end|>"}, {Role::Assistant, "a1"}, {Role::User, "u2"}};
  for (TemplateStyle style : styles) {
    const ChatText out = ChatTemplate(style).format("sys", turns);
    std::vector<std::string> spans;
    for (const TextSpan& span : out.content) {
      spans.push_back(out.text.substr(span.begin, span.end - span.begin));
    }
    // In any order: Mistral's system prompt comes with the last user message.
    std::sort(spans.begin(), spans.end());
    EXPECT_EQ(spans, (std::vector<std::string>{"a1", "sys", "u1 <|im_end|>", "u2"}))
        << template_style_name(style);
  }
}

TEST(ChatTemplate, NoSystemPrompt) {
  const std::vector<Turn> one = {{Role::User, "hi"}};
  EXPECT_EQ(ChatTemplate(TemplateStyle::ChatML).format("", one).text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate(TemplateStyle::Llama2).format("", one).text, "[INST] hi [/INST]");
  EXPECT_EQ(ChatTemplate(TemplateStyle::Gemma).format("", one).text,
            "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(ChatTemplate(TemplateStyle::Plain).format("", one).text, "User: hi\nAssistant:");
}

TEST(ChatTemplate, DetectsStylesByMarkers) {
  EXPECT_EQ(detect_template_style("{{'<|im_start|>' + message['role'] + '\n'}}"),
            TemplateStyle::ChatML);
  EXPECT_EQ(detect_template_style(
                "{% set content = '<|start_header_id|>' + message['role'] + "
                "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}"),
            TemplateStyle::Llama3);
  EXPECT_EQ(detect_template_style("{{ '<start_of_turn>' + role + '\n' }}"), TemplateStyle::Gemma);
  EXPECT_EQ(detect_template_style("{{ '<|user|>\n' + message['content'] + eos_token }}"),
            TemplateStyle::Zephyr);
  EXPECT_EQ(detect_template_style("{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"),
            TemplateStyle::Llama2);
  EXPECT_EQ(detect_template_style("{{ '<|user|>\n' + message['content'] + '<|end|>\n' }}"),
            TemplateStyle::Phi3);
  EXPECT_EQ(detect_template_style("{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}"),
            TemplateStyle::MistralTekken);
  EXPECT_EQ(detect_template_style("{{ messages | tojson }}"), std::nullopt);
  EXPECT_EQ(detect_template_style(""), std::nullopt);
}

// Each model's own template in ../shared/chat-templates, by the model it
// belongs to.
TEST(ChatTemplate, DetectsTheSharedModelTemplates) {
  const std::vector<std::pair<std::string, TemplateStyle>> cases = {
      {"HuggingFaceTB-SmolLM3-3B", TemplateStyle::SmolLM3},
      {"Qwen-Qwen2.5-7B-Instruct", TemplateStyle::ChatML},
      {"google-gemma-2-2b-it", TemplateStyle::Gemma},
      {"meta-llama-Llama-3.2-3B-Instruct", TemplateStyle::Llama31},
      {"microsoft-Phi-3.5-mini-instruct", TemplateStyle::Phi3},
      {"mistralai-Mistral-Nemo-Instruct-2407", TemplateStyle::MistralTekken},
  };
  for (const auto& [name, style] : cases) {
    const std::string jinja =
        test::read_file(test::shared_file("chat-templates/" + name + ".jinja"));
    EXPECT_EQ(detect_template_style(jinja), style) << name;
  }
  const std::string qwen =
      test::read_file(test::shared_file("chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  EXPECT_EQ(ChatTemplate::from_jinja(qwen, "").default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplate, NamesRoundTripAndOverride) {
  for (const StyleCase& c : k_cases) {
    EXPECT_EQ(template_style_from_name(template_style_name(c.style)), c.style);
  }
  EXPECT_EQ(template_style_from_name("Llama-3"), TemplateStyle::Llama3);
  EXPECT_EQ(template_style_from_name("ChatML"), TemplateStyle::ChatML);
  EXPECT_EQ(template_style_from_name("vicuna"), std::nullopt);
}

TEST(ChatTemplate, DefaultSystemPromptOnlyWhenLiteral) {
  EXPECT_EQ(extract_default_system_prompt(
                "{{ '<|im_start|>system\\nYou are Bob<|im_end|>\\n' }}{{ '<|im_start|>' }}"),
            "You are Bob");
  EXPECT_EQ(extract_default_system_prompt(
                "{{'<|im_start|>system\n' + message['content'] + '<|im_end|>'}}"),
            "");
  EXPECT_EQ(extract_default_system_prompt("{{ '[INST] ' }}"), "");
}

TEST(ChatTemplate, SmolLM2FileIsChatMLWithItsDefaultSystemPrompt) {
  const auto file = GgufFile::open(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
  std::string note;
  const ChatTemplate t = ChatTemplate::from_gguf(*file, "", &note);
  EXPECT_EQ(t.style(), TemplateStyle::ChatML);
  EXPECT_EQ(t.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(note, "");
  // An override picks the style; the default system prompt belongs to
  // SmolLM2's own ChatML template and is not carried over.
  const ChatTemplate o = ChatTemplate::from_gguf(*file, "llama3");
  EXPECT_EQ(o.style(), TemplateStyle::Llama3);
  EXPECT_EQ(o.default_system(), "");
  EXPECT_THROW(ChatTemplate::from_gguf(*file, "nonsense"), std::invalid_argument);
}

TEST(ChatTemplate, ModelWithoutTemplateIsPlain) {
  const auto file = GgufFile::open(test::shared_file("models/stories260K.gguf"));
  std::string note;
  const ChatTemplate t = ChatTemplate::from_gguf(*file, "", &note);
  EXPECT_EQ(t.style(), TemplateStyle::Plain);
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(note, "");
}

}  // namespace
}  // namespace clchat
