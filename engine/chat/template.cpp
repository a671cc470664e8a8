// Hand-written equivalents of the chat templates models ship with. Each
// style below cites the template it reproduces; the leading BOS that those
// templates start with is left to the tokenizer (render() writes it for
// `clchat template`).
#include "engine/chat/template.h"

#include <array>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace clchat {

namespace {

// Mistral's templates put the system prompt before the last user message.
bool puts_system_last(TemplateStyle style) {
  return style == TemplateStyle::MistralV3 || style == TemplateStyle::MistralTekken;
}

constexpr std::string_view k_space = " \t\n\r\v\f";

// Jinja's `trim` filter (Python's str.strip() on ASCII whitespace).
std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(k_space);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(k_space) + 1 - begin);
}

// Python's str.rstrip() and str.lstrip(chars).
std::string_view rstrip(std::string_view s) {
  const size_t end = s.find_last_not_of(k_space);
  return end == std::string_view::npos ? std::string_view() : s.substr(0, end + 1);
}

std::string_view lstrip(std::string_view s, std::string_view chars) {
  const size_t begin = s.find_first_not_of(chars);
  return begin == std::string_view::npos ? std::string_view() : s.substr(begin);
}

std::string erase_all(std::string s, std::string_view from) {
  for (size_t at; (at = s.find(from)) != std::string::npos;) s.erase(at, from.size());
  return s;
}

// Today as strftime "%d %b %Y" in the C locale ("05 Mar 2026"), what
// llama.cpp's strftime_now gives Llama 3.1's template.
std::string today() {
  static constexpr std::array<const char*, 12> months = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::snprintf(text, sizeof(text), "%02d %s %d", tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900);
  return text;
}

// SmolLM3's template (HuggingFaceTB/SmolLM3-3B, chat_template.jinja): the
// reasoning mode is "/think" unless the system prompt says "/no_think".
bool smollm3_no_think(std::string_view system) {
  return system.find("/no_think") != std::string_view::npos;
}

// Its instructions when the system prompt has none, per reasoning mode.
constexpr std::string_view k_smollm3_think_instructions =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an "
    "assistant involves thoroughly exploring questions through a systematic thinking process "
    "before providing the final precise and accurate solutions. This requires engaging in a "
    "comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, "
    "backtracking, and iteration to develop well-considered thinking process. Please structure "
    "your response into two main sections: Thought and Solution using the specified format: "
    "<think> Thought section </think> Solution section. In the Thought section, detail your "
    "reasoning process in steps. Each step should include detailed considerations such as "
    "analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the "
    "accuracy of the current steps, refining any errors, and revisiting previous steps. In the "
    "Solution section, based on various attempts, explorations, and reflections from the Thought "
    "section, systematically present the final solution that you deem correct. The Solution "
    "section should be logical, accurate, and concise and detail necessary steps needed to reach "
    "the conclusion.\n\n";
constexpr std::string_view k_smollm3_no_think_instructions =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";

ChatText smollm3_system(std::string_view system) {
  const bool no_think = smollm3_no_think(system);
  ChatText out;
  out.markup("<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n");
  out.markup(no_think ? "Reasoning Mode: /no_think\n\n" : "Reasoning Mode: /think\n\n");
  out.markup("## Custom Instructions\n\n");
  const std::string custom =
      std::string(rstrip(erase_all(erase_all(std::string(system), "/no_think"), "/think")));
  if (!custom.empty()) {
    out.message(custom).markup("\n\n");
  } else {
    out.markup(no_think ? k_smollm3_no_think_instructions : k_smollm3_think_instructions);
  }
  return out.markup("<|im_end|>\n");
}

ChatText markup(std::string_view s) { return ChatText().markup(s); }

}  // namespace

ChatText& ChatText::markup(std::string_view s) {
  text += s;
  return *this;
}

ChatText& ChatText::message(std::string_view s) {
  content.push_back({text.size(), text.size() + s.size()});
  text += s;
  return *this;
}

ChatText& ChatText::operator+=(const ChatText& more) {
  for (const TextSpan& span : more.content) {
    content.push_back({span.begin + text.size(), span.end + text.size()});
  }
  text += more.text;
  return *this;
}

TemplateTokens template_tokens(const Tokenizer& tokenizer) {
  TemplateTokens tokens;
  const auto text = [&](int32_t id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  tokens.bos_token = text(tokenizer.bos_id());
  tokens.eos_token = text(tokenizer.eos_id());
  return tokens;
}

ChatTemplate::ChatTemplate(TemplateStyle style, std::string default_system)
    : style_(style), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_jinja(std::string_view jinja, std::string_view override_name,
                                      std::string* note) {
  std::optional<TemplateStyle> style;
  if (!override_name.empty()) {
    style = template_style_from_name(override_name);
    if (!style) throw std::invalid_argument(unknown_template_message(override_name));
  } else {
    style = detect_template_style(jinja);
    if (!style && !jinja.empty() && note) {
      *note = "the model's chat template is not recognised; using plain text turns";
    }
  }
  const TemplateStyle s = style.value_or(TemplateStyle::Plain);
  // What the Jinja text says beyond its style only holds in that style.
  const bool same_style = detect_template_style(jinja) == s;
  ChatTemplate out(s, same_style ? extract_default_system_prompt(jinja) : "");
  out.refuses_system_ =
      same_style && jinja.find("System role not supported") != std::string_view::npos;
  return out;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file, std::string_view override_name,
                                     std::string* note) {
  const std::string jinja = file.opt_string("tokenizer.chat_template").value_or("");
  return from_jinja(jinja, override_name, note);
}

bool ChatTemplate::writes_bos() const {
  switch (style_) {
    case TemplateStyle::Llama2:
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
    case TemplateStyle::Gemma:
      return true;
    default:
      return false;
  }
}

ChatText ChatTemplate::prefix(std::string_view system) const {
  ChatText out;
  switch (style_) {
    case TemplateStyle::ChatML:
      // SmolLM2-Instruct's and Qwen 2.5's tokenizer.chat_template and OpenAI's
      // ChatML description: <|im_start|>{role}\n{content}<|im_end|>\n
      if (system.empty()) return out;
      return out.markup("<|im_start|>system\n").message(system).markup("<|im_end|>\n");
    case TemplateStyle::SmolLM3:
      return smollm3_system(system);  // always there, defaults included
    case TemplateStyle::Llama3:
      // Meta's llama3 repo, llama/tokenizer.py ChatFormat: encode_header() is
      // <|start_header_id|>{role}<|end_header_id|>\n\n, encode_message() adds
      // the content (trimmed) and <|eot_id|>.
      if (system.empty()) return out;
      return out.markup("<|start_header_id|>system<|end_header_id|>\n\n")
          .message(trim(system))
          .markup("<|eot_id|>");
    case TemplateStyle::Llama31:
      // meta-llama/Llama-3.2-3B-Instruct's template: the system header is
      // always there, with the knowledge cutoff and today's date.
      out.markup("<|start_header_id|>system<|end_header_id|>\n\n");
      out.markup("Cutting Knowledge Date: December 2023\nToday Date: ");
      out.markup(tokens_.date_string.empty() ? today() : tokens_.date_string).markup("\n\n");
      return out.message(trim(system)).markup("<|eot_id|>");
    case TemplateStyle::Zephyr:
      // HuggingFaceH4/zephyr-7b-beta tokenizer_config.json chat_template:
      // '<|system|>\n' + content + eos_token, one message per line.
      if (system.empty()) return out;
      return out.markup("<|system|>\n").message(system).markup(tokens_.eos_token).markup("\n");
    case TemplateStyle::Phi3:
      // microsoft/Phi-3.5-mini-instruct's template: '<|system|>\n' + content
      // + '<|end|>\n' when the system message is not empty.
      if (system.empty()) return out;
      return out.markup("<|system|>\n").message(system).markup("<|end|>\n");
    case TemplateStyle::Plain:
      if (system.empty()) return out;
      return out.message(system).markup("\n\n");
    case TemplateStyle::Llama2:
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
    case TemplateStyle::Gemma:
      return out;  // inside a user message
  }
  return out;
}

ChatText ChatTemplate::user_message(std::string_view text, std::string_view system, bool first,
                                    bool with_system) const {
  ChatText out;
  switch (style_) {
    case TemplateStyle::ChatML:
    case TemplateStyle::SmolLM3:
      return out.markup("<|im_start|>user\n").message(text).markup("<|im_end|>\n");
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
      return out.markup("<|start_header_id|>user<|end_header_id|>\n\n")
          .message(trim(text))
          .markup("<|eot_id|>");
    case TemplateStyle::Zephyr:
      return out.markup("<|user|>\n").message(text).markup(tokens_.eos_token).markup("\n");
    case TemplateStyle::Phi3:
      return out.markup("<|user|>\n").message(text).markup("<|end|>\n");
    case TemplateStyle::Gemma:
      // google/gemma-2-2b-it's and gemma-3's templates: '<start_of_turn>' +
      // role + '\n' + content | trim + '<end_of_turn>\n', the assistant's role
      // being "model". Gemma 3's puts the system prompt and "\n\n" (not
      // trimmed) before the first user message.
      out.markup("<start_of_turn>user\n");
      if (first && !system.empty()) out.message(system).markup("\n\n");
      return out.message(trim(text)).markup("<end_of_turn>\n");
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
      // mistralai/Mistral-Nemo-Instruct-2407's template (v3-tekken):
      // "[INST]" + system_message + "\n\n" + content + "[/INST]" for the last
      // user message, "[INST]" + content + "[/INST]" for the others; v3
      // (Mistral-7B-Instruct-v0.3) writes "[INST] ".
      out.markup(style_ == TemplateStyle::MistralV3 ? "[INST] " : "[INST]");
      if (with_system && !system.empty()) out.message(system).markup("\n\n");
      return out.message(text).markup("[/INST]");
    case TemplateStyle::Llama2:
      // Meta's llama repo, llama/generation.py chat_completion():
      // B_INST/E_INST = "[INST]", "[/INST]"; B_SYS/E_SYS = "<<SYS>>\n",
      // "\n<</SYS>>\n\n" around the system prompt inside the first user
      // message; each exchange is "{bos}[INST] {user} [/INST] {answer} {eos}".
      out.markup(first ? "[INST] " : "<s>[INST] ");
      if (first && !system.empty()) {
        out.markup("<<SYS>>\n").message(system).markup("\n<</SYS>>\n\n");
      }
      return out.message(text).markup(" [/INST]");
    case TemplateStyle::Plain:
      return out.markup("User: ").message(text).markup("\n");
  }
  return out.message(text);
}

ChatText ChatTemplate::generation_prompt(std::string_view system) const {
  switch (style_) {
    case TemplateStyle::ChatML:
      return markup("<|im_start|>assistant\n");
    case TemplateStyle::SmolLM3:
      // Without reasoning the template writes an empty thought.
      return markup(smollm3_no_think(system) ? "<|im_start|>assistant\n<think>\n\n</think>\n"
                                             : "<|im_start|>assistant\n");
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
      return markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
    case TemplateStyle::Zephyr:
    case TemplateStyle::Phi3:
      return markup("<|assistant|>\n");
    case TemplateStyle::Gemma:
      return markup("<start_of_turn>model\n");
    case TemplateStyle::Plain:
      return markup("Assistant:");
    case TemplateStyle::Llama2:
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
      return {};  // the reply follows [/INST]
  }
  return {};
}

ChatText ChatTemplate::user_turn(std::string_view text, std::string_view system, bool first) const {
  // A new user message is the last one when it is sent: Mistral's system
  // prompt goes before it.
  const bool mistral = puts_system_last(style_);
  ChatText out = user_message(text, system, first, mistral || first);
  out += generation_prompt(system);
  return out;
}

ChatText ChatTemplate::assistant_reply(std::string_view text) const {
  switch (style_) {
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
    case TemplateStyle::Gemma:
      return ChatText().message(trim(text));
    case TemplateStyle::SmolLM3:
      return ChatText().message(lstrip(text, "\n"));
    case TemplateStyle::MistralV3:
      return ChatText().markup(" ").message(trim(text));
    default:
      return ChatText().message(text);
  }
}

ChatText ChatTemplate::assistant_end() const {
  switch (style_) {
    case TemplateStyle::ChatML:
    case TemplateStyle::SmolLM3:
      return markup("<|im_end|>\n");
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
      return markup("<|eot_id|>");
    case TemplateStyle::Zephyr:
      return markup(tokens_.eos_token).markup("\n");
    case TemplateStyle::Phi3:
      return markup("<|end|>\n");
    case TemplateStyle::Gemma:
      return markup("<end_of_turn>\n");
    case TemplateStyle::Llama2:
      return markup(" </s>");
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
      return markup(tokens_.eos_token);
    case TemplateStyle::Plain:
      return markup("\n");
  }
  return {};
}

ChatText ChatTemplate::next_turn(std::string_view text, std::string_view system, bool first) const {
  ChatText out = first ? prefix(system) : assistant_end();
  out += user_turn(text, system, first);
  return out;
}

ChatText ChatTemplate::format(std::string_view system, std::span<const Turn> turns,
                              bool add_generation_prompt) const {
  const bool mistral = puts_system_last(style_);
  size_t last_user = turns.size();
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == Role::User) last_user = i;
  }
  ChatText out = prefix(system);
  bool first = true;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& turn = turns[i];
    if (turn.role == Role::User) {
      out += user_message(turn.text, system, first, mistral ? i == last_user : first);
      if (i != last_user || add_generation_prompt) out += generation_prompt(system);
      first = false;
    } else if (turn.role == Role::Assistant) {
      out += assistant_reply(turn.text);
      out += assistant_end();
    }
  }
  // Phi-3's template ends a conversation without a generation prompt with
  // eos_token.
  if (!add_generation_prompt && style_ == TemplateStyle::Phi3) out.markup(tokens_.eos_token);
  return out;
}

ChatText ChatTemplate::render(std::span<const Turn> messages, bool add_generation_prompt) const {
  size_t begin = 0;
  std::string_view system = default_system_;
  if (!messages.empty() && messages[0].role == Role::System) {
    // Gemma 2's template: raise_exception('System role not supported').
    if (refuses_system_) throw TemplateRefused("the chat template refuses a system message");
    system = messages[0].text;
    begin = 1;
  }
  for (size_t i = begin; i < messages.size(); ++i) {
    const Role expected = (i - begin) % 2 == 0 ? Role::User : Role::Assistant;
    if (messages[i].role != expected) {
      throw TemplateRefused(
          "conversation roles must alternate user/assistant/user/... after an optional first "
          "system message (message " +
          std::to_string(i + 1) + ")");
    }
  }
  ChatText out;
  if (writes_bos()) out.markup(tokens_.bos_token);
  out += format(system, messages.subspan(begin), add_generation_prompt);
  return out;
}

std::vector<std::string> ChatTemplate::stop_markers() const {
  switch (style_) {
    case TemplateStyle::ChatML:
    case TemplateStyle::SmolLM3:
      return {"<|im_end|>"};
    case TemplateStyle::Llama3:
    case TemplateStyle::Llama31:
      return {"<|eot_id|>", "<|eom_id|>"};
    case TemplateStyle::Gemma:
      return {"<end_of_turn>"};
    case TemplateStyle::Phi3:
      return {"<|end|>", "<|endoftext|>"};
    case TemplateStyle::Zephyr:
    case TemplateStyle::MistralV3:
    case TemplateStyle::MistralTekken:
      return {tokens_.eos_token};
    case TemplateStyle::Llama2:
      return {"</s>"};
    case TemplateStyle::Plain:
      return {};
  }
  return {};
}

}  // namespace clchat
