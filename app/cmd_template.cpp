// `clchat template (-m MODEL | --template-file FILE) -f CONVERSATION.json
// [--chat-template NAME]`:
// prints the text a conversation becomes under a chat template, exactly as the
// engine would tokenize it (no newline added), so that it can be compared with
// the model's Jinja template rendered elsewhere.
//
// CONVERSATION.json holds what Hugging Face's apply_chat_template takes:
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...],
//    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
//    "date_string": "26 Jul 2024"}
// all but `messages` optional. With -m, bos_token and eos_token are the model's
// and the BOS text leads when the tokenizer adds BOS (as the engine does); with
// --template-file they come from the file and bos_token leads where the
// template writes it. A conversation the template refuses exits 2 with one line.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "engine/chat/template.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat::app {

namespace {

struct TemplateOptions {
  std::string model_path, template_file, conversation, chat_template;
};

struct Conversation {
  std::vector<Turn> messages;
  bool add_generation_prompt = false;
  TemplateTokens tokens;
};

std::string string_field(const nlohmann::json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string()) throw UsageError(std::string("'") + key + "' is not a string");
  return j[key].get<std::string>();
}

Role parse_role(const std::string& role, size_t index) {
  if (role == "system") return Role::System;
  if (role == "user") return Role::User;
  if (role == "assistant") return Role::Assistant;
  throw UsageError("message " + std::to_string(index + 1) + ": role '" + role +
                   "' is not system, user or assistant");
}

Conversation parse_conversation(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw UsageError("not a JSON object");
  if (!j.contains("messages") || !j["messages"].is_array()) {
    throw UsageError("'messages' is missing or not an array");
  }
  Conversation c;
  for (const auto& m : j["messages"]) {
    const size_t index = c.messages.size();
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      throw UsageError("message " + std::to_string(index + 1) +
                       " needs 'role' and 'content' strings");
    }
    c.messages.push_back(
        {parse_role(m["role"].get<std::string>(), index), m["content"].get<std::string>()});
  }
  if (j.contains("add_generation_prompt")) {
    if (!j["add_generation_prompt"].is_boolean()) {
      throw UsageError("'add_generation_prompt' is not true or false");
    }
    c.add_generation_prompt = j["add_generation_prompt"].get<bool>();
  }
  c.tokens.bos_token = string_field(j, "bos_token", c.tokens.bos_token);
  c.tokens.eos_token = string_field(j, "eos_token", c.tokens.eos_token);
  c.tokens.date_string = string_field(j, "date_string", "");
  return c;
}

// The text of `c` under the template of `opt`'s model or template file.
std::string render(const TemplateOptions& opt, Conversation c) {
  std::string note, bos;
  ChatTemplate chat_template;
  if (!opt.model_path.empty()) {
    auto file = GgufFile::open(opt.model_path);
    const auto tokenizer = Tokenizer::from_gguf(*file);
    chat_template = ChatTemplate::from_gguf(*file, opt.chat_template, &note);
    const TemplateTokens model_tokens = template_tokens(*tokenizer);
    // The tokenizer adds BOS: the template's own bos_token stays out.
    if (tokenizer->add_bos()) bos = model_tokens.bos_token;
    c.tokens.bos_token = "";
    c.tokens.eos_token = model_tokens.eos_token;
  } else {
    chat_template =
        ChatTemplate::from_jinja(read_text_file(opt.template_file), opt.chat_template, &note);
  }
  if (!note.empty()) std::fprintf(stderr, "clchat: %s\n", note.c_str());
  chat_template.set_tokens(c.tokens);
  try {
    return bos + chat_template.render(c.messages, c.add_generation_prompt).text;
  } catch (const TemplateRefused& e) {
    throw UsageError(opt.conversation + ": " + e.what());
  }
}

}  // namespace

CLI::Option* add_chat_template_option(CLI::App& cmd, std::string& name) {
  return cmd
      .add_option("--chat-template", name,
                  "plain, chatml, smollm3, llama2, mistral-v3, mistral-v3-tekken, llama3, "
                  "llama3.1, zephyr, phi3 or gemma (default: from the model)")
      ->check(CLI::Validator(
          [](std::string& value) {
            return template_style_from_name(value) ? "" : unknown_template_message(value);
          },
          "", "NAME"));
}

void add_template_command(CLI::App& app) {
  auto opt = std::make_shared<TemplateOptions>();
  auto* cmd = app.add_subcommand(
      "template", "Print the text a conversation becomes under a model's chat template");
  auto* m = cmd->add_option("-m,--model", opt->model_path, "GGUF model file");
  auto* t = cmd->add_option("--template-file", opt->template_file,
                            "A Jinja chat template (tokenizer.chat_template) instead of a model");
  m->excludes(t);
  cmd->add_option("-f,--file", opt->conversation,
                  "Conversation JSON: messages, add_generation_prompt, bos_token, eos_token")
      ->required();
  add_chat_template_option(*cmd, opt->chat_template);
  cmd->callback([opt] {
    if (opt->model_path.empty() && opt->template_file.empty()) {
      throw UsageError("template needs -m MODEL or --template-file FILE");
    }
    const std::string json = read_text_file(opt->conversation);
    Conversation c;
    try {
      c = parse_conversation(json);
    } catch (const UsageError& e) {
      throw UsageError(opt->conversation + ": " + e.what());
    }
    const std::string text = render(*opt, std::move(c));
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace clchat::app
