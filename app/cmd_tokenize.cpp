// `clchat tokenize`: prints the token ids of a text, as the tests' vectors do.
#include <cstdio>

#include "app/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat::app {

namespace {
struct TokenizeOptions {
  std::string model_path, prompt, file;
  bool ids = false, no_bos = false, special = false;
};
}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", opt->model_path, "GGUF model (or vocabulary) file");
  auto* p = cmd->add_option("-p,--prompt", opt->prompt, "Text to tokenize");
  auto* f = cmd->add_option("-f,--file", opt->file, "Read the text from this file");
  p->excludes(f);
  cmd->add_flag("--ids", opt->ids, "Print only the ids, space separated, on one line");
  cmd->add_flag("--no-bos", opt->no_bos, "Never add the BOS token");
  cmd->add_flag("--special", opt->special, "Parse special tokens such as <|im_start|>");
  cmd->callback([opt, p, f] {
    if (p->count() == 0 && f->count() == 0) throw UsageError("tokenize needs -p TEXT or -f FILE");
    const std::string text = opt->file.empty() ? opt->prompt : read_text_file(opt->file);
    auto file = GgufFile::open(opt->model_path.empty() ? default_model_path() : opt->model_path);
    auto tokenizer = Tokenizer::from_gguf(*file);
    const auto ids = tokenizer->encode(text, !opt->no_bos, opt->special);
    if (opt->ids) {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      std::printf("%s\n", line.c_str());
      return;
    }
    for (int32_t id : ids) {
      std::printf("%6d  '%s'\n", id, tokenizer->token_text(id).c_str());
    }
  });
}

}  // namespace clchat::app
