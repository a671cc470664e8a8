// Hand-written equivalents of the chat templates llama-architecture models
// ship with. Each style below cites the template or code it reproduces; the
// leading BOS that those templates start with is left to the tokenizer.
#include "engine/chat/template.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace clchat {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Gemma has no system role: the system prompt leads the first user message.
ChatText with_system(std::string_view system, std::string_view text, bool first) {
  ChatText out;
  if (first && !system.empty()) out.message(system).markup("\n\n");
  return out.message(text);
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

std::string_view template_style_name(TemplateStyle style) {
  switch (style) {
    case TemplateStyle::Plain:
      return "plain";
    case TemplateStyle::ChatML:
      return "chatml";
    case TemplateStyle::Llama2:
      return "llama2";
    case TemplateStyle::Llama3:
      return "llama3";
    case TemplateStyle::Zephyr:
      return "zephyr";
    case TemplateStyle::Gemma:
      return "gemma";
  }
  return "plain";
}

std::optional<TemplateStyle> template_style_from_name(std::string_view name) {
  const std::string n = lower(name);
  if (n == "plain" || n == "none") return TemplateStyle::Plain;
  if (n == "chatml") return TemplateStyle::ChatML;
  if (n == "llama2" || n == "llama-2") return TemplateStyle::Llama2;
  if (n == "llama3" || n == "llama-3") return TemplateStyle::Llama3;
  if (n == "zephyr") return TemplateStyle::Zephyr;
  if (n == "gemma") return TemplateStyle::Gemma;
  return std::nullopt;
}

std::string unknown_template_message(std::string_view name) {
  return "unknown chat template '" + std::string(name) +
         "' (known: plain, chatml, llama2, llama3, zephyr, gemma)";
}

std::optional<TemplateStyle> detect_template_style(std::string_view jinja) {
  // Most specific markers first: a Llama-3 template never has <|im_start|>,
  // but a Zephyr-like one could mention [INST] in a comment, so [INST] is last.
  if (contains(jinja, "<|im_start|>")) return TemplateStyle::ChatML;
  if (contains(jinja, "<|start_header_id|>")) return TemplateStyle::Llama3;
  if (contains(jinja, "<start_of_turn>")) return TemplateStyle::Gemma;
  if (contains(jinja, "<|user|>")) return TemplateStyle::Zephyr;
  if (contains(jinja, "[INST]")) return TemplateStyle::Llama2;
  return std::nullopt;
}

std::string extract_default_system_prompt(std::string_view jinja) {
  // SmolLM2-Instruct's template emits, when messages[0] is not a system one,
  //   {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM,
  //       trained by Hugging Face<|im_end|>\n' }}
  // i.e. a string literal holding a whole system turn. We take its content
  // only when it is literal text (no Jinja expression or quote inside).
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t at = jinja.find(head);
    if (at == std::string_view::npos) continue;
    const size_t begin = at + head.size();
    const size_t end = jinja.find("<|im_end|>", begin);
    if (end == std::string_view::npos) continue;
    const std::string_view text = jinja.substr(begin, end - begin);
    if (text.empty() || text.find_first_of("{}'\"+") != std::string_view::npos) continue;
    return std::string(text);
  }
  return "";
}

ChatTemplate::ChatTemplate(TemplateStyle style, std::string default_system)
    : style_(style), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file, std::string_view override_name,
                                     std::string* note) {
  const std::string jinja = file.opt_string("tokenizer.chat_template").value_or("");
  std::optional<TemplateStyle> style;
  if (!override_name.empty()) {
    style = template_style_from_name(override_name);
    if (!style) {
      throw std::invalid_argument(unknown_template_message(override_name));
    }
  } else {
    style = detect_template_style(jinja);
    if (!style && !jinja.empty() && note) {
      *note = "the model's chat template is not recognised; using plain text turns";
    }
  }
  const TemplateStyle s = style.value_or(TemplateStyle::Plain);
  // The default system prompt only makes sense in the style that defined it.
  const bool same_style = detect_template_style(jinja) == s;
  return ChatTemplate(s, same_style ? extract_default_system_prompt(jinja) : "");
}

ChatText ChatTemplate::prefix(std::string_view system) const {
  ChatText out;
  if (system.empty()) return out;
  switch (style_) {
    case TemplateStyle::ChatML:
      // SmolLM2-Instruct's tokenizer.chat_template (see above) and OpenAI's
      // ChatML description: <|im_start|>{role}\n{content}<|im_end|>\n
      return out.markup("<|im_start|>system\n").message(system).markup("<|im_end|>\n");
    case TemplateStyle::Llama3:
      // Meta's llama3 repo, llama/tokenizer.py ChatFormat: encode_header() is
      // <|start_header_id|>{role}<|end_header_id|>\n\n, encode_message() adds
      // the content and <|eot_id|>.
      return out.markup("<|start_header_id|>system<|end_header_id|>\n\n")
          .message(system)
          .markup("<|eot_id|>");
    case TemplateStyle::Zephyr:
      // HuggingFaceH4/zephyr-7b-beta tokenizer_config.json chat_template:
      // '<|system|>\n' + content + eos_token, one message per line.
      return out.markup("<|system|>\n").message(system).markup("</s>\n");
    case TemplateStyle::Plain:
      return out.message(system).markup("\n\n");
    case TemplateStyle::Llama2:
    case TemplateStyle::Gemma:
      return out;  // folded into the first user turn
  }
  return out;
}

ChatText ChatTemplate::user_turn(std::string_view text, std::string_view system, bool first) const {
  ChatText out;
  switch (style_) {
    case TemplateStyle::ChatML:
      return out.markup("<|im_start|>user\n")
          .message(text)
          .markup("<|im_end|>\n<|im_start|>assistant\n");
    case TemplateStyle::Llama3:
      return out.markup("<|start_header_id|>user<|end_header_id|>\n\n")
          .message(text)
          .markup("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    case TemplateStyle::Zephyr:
      return out.markup("<|user|>\n").message(text).markup("</s>\n<|assistant|>\n");
    case TemplateStyle::Gemma:
      // google/gemma-7b-it tokenizer_config.json chat_template:
      // '<start_of_turn>' + role + '\n' + content + '<end_of_turn>\n', the
      // assistant's role being "model"; it has no system role, so (as
      // llama.cpp's llama-chat does) the system prompt leads the first turn.
      out.markup("<start_of_turn>user\n");
      out += with_system(system, text, first);
      return out.markup("<end_of_turn>\n<start_of_turn>model\n");
    case TemplateStyle::Llama2:
      // Meta's llama repo, llama/generation.py chat_completion():
      // B_INST/E_INST = "[INST]", "[/INST]"; B_SYS/E_SYS = "<<SYS>>\n",
      // "\n<</SYS>>\n\n" around the system prompt inside the first user
      // message; each exchange is "{bos}[INST] {user} [/INST] {answer} {eos}".
      out.markup(first ? "[INST] " : "<s>[INST] ");
      if (first && !system.empty())
        out.markup("<<SYS>>\n").message(system).markup("\n<</SYS>>\n\n");
      return out.message(text).markup(" [/INST]");
    case TemplateStyle::Plain:
      return out.markup("User: ").message(text).markup("\nAssistant:");
  }
  return out.message(text);
}

ChatText ChatTemplate::assistant_end() const {
  switch (style_) {
    case TemplateStyle::ChatML:
      return markup("<|im_end|>\n");
    case TemplateStyle::Llama3:
      return markup("<|eot_id|>");
    case TemplateStyle::Zephyr:
      return markup("</s>\n");
    case TemplateStyle::Gemma:
      return markup("<end_of_turn>\n");
    case TemplateStyle::Llama2:
      return markup(" </s>");
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

ChatText ChatTemplate::format(std::string_view system, std::span<const Turn> turns) const {
  ChatText out = prefix(system);
  bool first = true;
  for (const Turn& turn : turns) {
    if (turn.role == Role::User) {
      out += user_turn(turn.text, system, first);
      first = false;
    } else if (turn.role == Role::Assistant) {
      out.message(turn.text);
      out += assistant_end();
    }
  }
  return out;
}

std::vector<std::string> ChatTemplate::stop_markers() const {
  switch (style_) {
    case TemplateStyle::ChatML:
      return {"<|im_end|>"};
    case TemplateStyle::Llama3:
      return {"<|eot_id|>"};
    case TemplateStyle::Gemma:
      return {"<end_of_turn>"};
    case TemplateStyle::Zephyr:
    case TemplateStyle::Llama2:
      return {"</s>"};
    case TemplateStyle::Plain:
      return {};
  }
  return {};
}

}  // namespace clchat
