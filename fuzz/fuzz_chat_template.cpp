// Chat template target. Input: one byte choosing the style, then NUL-separated
// fields: the system prompt, then alternating user and assistant turns. The
// invariant is the one the chat session relies on (chat_template.h): the whole
// conversation formatted at once equals the pieces prefilled turn by turn. The
// whole input is also read as a Jinja template (style detection, default
// system prompt) and as a style name.
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/template.h"
#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {

int fuzz_chat_template(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  detect_template_style(all);
  const std::string default_system = extract_default_system_prompt(all);
  require(default_system.find_first_of("{}'\"+") == std::string::npos,
          "default system prompt holds template syntax");
  if (const auto named = template_style_from_name(all)) {
    require(template_style_from_name(template_style_name(*named)) == named, "style name");
  }
  if (size == 0) return 0;

  constexpr TemplateStyle k_styles[] = {TemplateStyle::Plain,  TemplateStyle::ChatML,
                                        TemplateStyle::Llama2, TemplateStyle::Llama3,
                                        TemplateStyle::Zephyr, TemplateStyle::Gemma};
  const TemplateStyle style = k_styles[data[0] % std::size(k_styles)];
  std::vector<std::string> fields;
  std::string_view rest = all.substr(1);
  while (true) {
    const size_t nul = rest.find('\0');
    fields.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  const std::string system = fields[0];
  std::vector<Turn> turns;
  for (size_t i = 1; i < fields.size(); ++i) {
    turns.push_back({i % 2 == 1 ? Role::User : Role::Assistant, fields[i]});
  }

  const ChatTemplate tmpl(style, default_system);
  require(template_style_from_name(tmpl.name()) == style, "style name round trip");
  ChatText incremental;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == Role::User) {
      incremental += tmpl.next_turn(turns[i].text, system, i == 0);
    } else {  // as the session writes a reply it rebuilds (trimmed where the style trims)
      incremental += tmpl.assistant_reply(turns[i].text);
    }
  }
  if (turns.empty()) {
    incremental = tmpl.prefix(system);
  } else if (turns.back().role == Role::Assistant) {
    incremental += tmpl.assistant_end();
  }
  const ChatText whole = tmpl.format(system, turns);
  require(whole.text == incremental.text, "format() != turn-by-turn pieces");
  require(whole.content.size() == incremental.content.size(), "content spans differ");
  size_t at = 0;
  for (const TextSpan& span : whole.content) {
    require(at <= span.begin && span.begin <= span.end && span.end <= whole.text.size(),
            "content spans out of order or outside the text");
    at = span.end;
  }
  for (const std::string& marker : tmpl.stop_markers()) {
    require(!marker.empty(), "empty stop marker");
  }
  return 0;
}

}  // namespace clchat::fuzz
