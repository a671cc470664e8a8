// Hand-written equivalents of the chat templates llama-architecture models
// ship with. Each style below cites the template or code it reproduces; the
// leading BOS that those templates start with is left to the tokenizer.
#include "engine/chat_template.h"

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

// Gemma has no system role and Llama-2 puts the system prompt inside the
// first [INST]; both get it joined to the first user message.
std::string with_system(std::string_view system, std::string_view text, bool first) {
  if (!first || system.empty()) return std::string(text);
  return std::string(system) + "\n\n" + std::string(text);
}

}  // namespace

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
      throw std::invalid_argument("unknown chat template '" + std::string(override_name) +
                                  "' (known: plain, chatml, llama2, llama3, zephyr, gemma)");
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

std::string ChatTemplate::prefix(std::string_view system) const {
  if (system.empty()) return "";
  const std::string sys(system);
  switch (style_) {
    case TemplateStyle::ChatML:
      // SmolLM2-Instruct's tokenizer.chat_template (see above) and OpenAI's
      // ChatML description: <|im_start|>{role}\n{content}<|im_end|>\n
      return "<|im_start|>system\n" + sys + "<|im_end|>\n";
    case TemplateStyle::Llama3:
      // Meta's llama3 repo, llama/tokenizer.py ChatFormat: encode_header() is
      // <|start_header_id|>{role}<|end_header_id|>\n\n, encode_message() adds
      // the content and <|eot_id|>.
      return "<|start_header_id|>system<|end_header_id|>\n\n" + sys + "<|eot_id|>";
    case TemplateStyle::Zephyr:
      // HuggingFaceH4/zephyr-7b-beta tokenizer_config.json chat_template:
      // '<|system|>\n' + content + eos_token, one message per line.
      return "<|system|>\n" + sys + "</s>\n";
    case TemplateStyle::Plain:
      return sys + "\n\n";
    case TemplateStyle::Llama2:
    case TemplateStyle::Gemma:
      return "";  // folded into the first user turn
  }
  return "";
}

std::string ChatTemplate::user_turn(std::string_view text, std::string_view system,
                                    bool first) const {
  const std::string t(text);
  switch (style_) {
    case TemplateStyle::ChatML:
      return "<|im_start|>user\n" + t + "<|im_end|>\n<|im_start|>assistant\n";
    case TemplateStyle::Llama3:
      return "<|start_header_id|>user<|end_header_id|>\n\n" + t +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    case TemplateStyle::Zephyr:
      return "<|user|>\n" + t + "</s>\n<|assistant|>\n";
    case TemplateStyle::Gemma:
      // google/gemma-7b-it tokenizer_config.json chat_template:
      // '<start_of_turn>' + role + '\n' + content + '<end_of_turn>\n', the
      // assistant's role being "model"; it has no system role, so (as
      // llama.cpp's llama-chat does) the system prompt leads the first turn.
      return "<start_of_turn>user\n" + with_system(system, text, first) +
             "<end_of_turn>\n<start_of_turn>model\n";
    case TemplateStyle::Llama2: {
      // Meta's llama repo, llama/generation.py chat_completion():
      // B_INST/E_INST = "[INST]", "[/INST]"; B_SYS/E_SYS = "<<SYS>>\n",
      // "\n<</SYS>>\n\n" around the system prompt inside the first user
      // message; each exchange is "{bos}[INST] {user} [/INST] {answer} {eos}".
      std::string out = first ? "" : "<s>";
      out += "[INST] ";
      if (first && !system.empty()) out += "<<SYS>>\n" + std::string(system) + "\n<</SYS>>\n\n";
      return out + t + " [/INST]";
    }
    case TemplateStyle::Plain:
      return "User: " + t + "\nAssistant:";
  }
  return t;
}

std::string ChatTemplate::assistant_end() const {
  switch (style_) {
    case TemplateStyle::ChatML:
      return "<|im_end|>\n";
    case TemplateStyle::Llama3:
      return "<|eot_id|>";
    case TemplateStyle::Zephyr:
      return "</s>\n";
    case TemplateStyle::Gemma:
      return "<end_of_turn>\n";
    case TemplateStyle::Llama2:
      return " </s>";
    case TemplateStyle::Plain:
      return "\n";
  }
  return "";
}

std::string ChatTemplate::next_turn(std::string_view text, std::string_view system,
                                    bool first) const {
  return (first ? prefix(system) : assistant_end()) + user_turn(text, system, first);
}

std::string ChatTemplate::format(std::string_view system, std::span<const Turn> turns) const {
  std::string out = prefix(system);
  bool first = true;
  for (const Turn& turn : turns) {
    if (turn.role == Role::User) {
      out += user_turn(turn.text, system, first);
      first = false;
    } else if (turn.role == Role::Assistant) {
      out += turn.text + assistant_end();
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
