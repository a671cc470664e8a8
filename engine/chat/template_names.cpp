// Chat template styles by name (--chat-template, the config's chat_template)
// and by the markers of a Jinja text (tokenizer.chat_template, --template-file).
#include <algorithm>
#include <array>
#include <cctype>

#include "engine/chat/template.h"

namespace clchat {

namespace {

struct StyleName {
  std::string_view name;
  TemplateStyle style;
};

// The first name of each style is its own; the others are aliases.
constexpr std::array<StyleName, 25> k_names = {{
    {"plain", TemplateStyle::Plain},          {"chatml", TemplateStyle::ChatML},
    {"smollm3", TemplateStyle::SmolLM3},      {"llama2", TemplateStyle::Llama2},
    {"mistral-v3", TemplateStyle::MistralV3}, {"mistral-v3-tekken", TemplateStyle::MistralTekken},
    {"llama3", TemplateStyle::Llama3},        {"llama3.1", TemplateStyle::Llama31},
    {"zephyr", TemplateStyle::Zephyr},        {"phi3", TemplateStyle::Phi3},
    {"gemma", TemplateStyle::Gemma},          {"none", TemplateStyle::Plain},
    {"qwen", TemplateStyle::ChatML},          {"qwen2.5", TemplateStyle::ChatML},
    {"llama-2", TemplateStyle::Llama2},       {"mistral", TemplateStyle::MistralV3},
    {"tekken", TemplateStyle::MistralTekken}, {"mistral-nemo", TemplateStyle::MistralTekken},
    {"llama-3", TemplateStyle::Llama3},       {"llama-3.1", TemplateStyle::Llama31},
    {"llama3.2", TemplateStyle::Llama31},     {"phi-3", TemplateStyle::Phi3},
    {"phi3.5", TemplateStyle::Phi3},          {"gemma2", TemplateStyle::Gemma},
    {"gemma3", TemplateStyle::Gemma},
}};
constexpr size_t k_styles = 11;  // k_names[0 .. k_styles) are the styles' own names

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

}  // namespace

std::string_view template_style_name(TemplateStyle style) {
  for (size_t i = 0; i < k_styles; ++i) {
    if (k_names[i].style == style) return k_names[i].name;
  }
  return "plain";
}

std::optional<TemplateStyle> template_style_from_name(std::string_view name) {
  const std::string n = lower(name);
  for (const StyleName& entry : k_names) {
    if (entry.name == n) return entry.style;
  }
  return std::nullopt;
}

std::string unknown_template_message(std::string_view name) {
  std::string known;
  for (size_t i = 0; i < k_styles; ++i) known += (i ? ", " : "") + std::string(k_names[i].name);
  return "unknown chat template '" + std::string(name) + "' (known: " + known + ")";
}

std::optional<TemplateStyle> detect_template_style(std::string_view jinja) {
  // Most specific markers first: a Llama-3 template never has <|im_start|>,
  // but a Zephyr-like one could mention [INST] in a comment, so [INST] is last.
  if (contains(jinja, "<|im_start|>")) {
    // SmolLM3 writes a "## Metadata" system block with its reasoning mode.
    return contains(jinja, "Reasoning Mode") ? TemplateStyle::SmolLM3 : TemplateStyle::ChatML;
  }
  if (contains(jinja, "<|start_header_id|>")) {
    // Llama 3.1 and later open with a dated system header.
    return contains(jinja, "Cutting Knowledge Date") ? TemplateStyle::Llama31
                                                     : TemplateStyle::Llama3;
  }
  if (contains(jinja, "<start_of_turn>")) return TemplateStyle::Gemma;
  if (contains(jinja, "<|user|>")) {
    // Phi-3 ends a turn with <|end|>, Zephyr with eos_token.
    return contains(jinja, "<|end|>") ? TemplateStyle::Phi3 : TemplateStyle::Zephyr;
  }
  if (contains(jinja, "[INST]")) {
    if (contains(jinja, "<<SYS>>")) return TemplateStyle::Llama2;
    // Mistral's cookbook (concept-deep-dive/tokenization/templates.md):
    // v3-tekken writes "[INST]" with no space after it, v3 "[INST] " and
    // "[/INST]" with no space before it; v1 and Llama 2 " [/INST]".
    if (contains(jinja, "\"[INST]\"") || contains(jinja, "'[INST]'")) {
      return TemplateStyle::MistralTekken;
    }
    if (contains(jinja, "\"[/INST]\"") || contains(jinja, "'[/INST]'")) {
      return TemplateStyle::MistralV3;
    }
    return TemplateStyle::Llama2;
  }
  return std::nullopt;
}

std::string extract_default_system_prompt(std::string_view jinja) {
  // SmolLM2-Instruct's template emits, when messages[0] is not a system one,
  //   {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM,
  //       trained by Hugging Face<|im_end|>\n' }}
  // i.e. a string literal holding a whole system turn (Qwen 2.5: "You are
  // Qwen, created by Alibaba Cloud. ..."). We take its content only when it
  // is literal text (no Jinja expression or quote inside); the first such
  // occurrence counts (Qwen's template opens the tools branch with an
  // unfinished one).
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    for (size_t at = jinja.find(head); at != std::string_view::npos;
         at = jinja.find(head, at + 1)) {
      const size_t begin = at + head.size();
      const size_t end = jinja.find("<|im_end|>", begin);
      if (end == std::string_view::npos) break;
      const std::string_view text = jinja.substr(begin, end - begin);
      if (text.empty() || text.find_first_of("{}'\"+") != std::string_view::npos) continue;
      return std::string(text);
    }
  }
  return "";
}

}  // namespace clchat
