// Writes the seed corpora for the fuzz targets from the shared models and
// vectors (nothing large is committed): fuzz_make_seeds OUT_DIR [SOURCE_DIR]
// fills OUT_DIR/<target>/ for each target in fuzz_targets.h.
//   gguf:            tiny valid llama models in every weight type (the test
//                    fixtures), one with stories260K's SentencePiece
//                    vocabulary and one with SmolLM2's chat template
//   tokenizer_*:     each line of the shared tokenizer vectors' inputs, plain
//                    and with special tokens
//   chat_template:   the shared models' Jinja templates and small turn lists
//   config:          config/default.toml and a few one-key files
//   commands:        every /command with good and bad arguments
//   kernel_cache:    whole entries, and the damages issue 21 found crashing
//                    drivers (half an entry, 0xFF bytes at offset 16)
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "engine/cl/kernel_cache_entry.h"
#include "engine/gguf/gguf.h"
#include "fuzz/fuzz_targets.h"
#include "tests/gguf_fixtures.h"

namespace fs = std::filesystem;
using namespace clchat;

namespace {

void write(const fs::path& dir, const std::string& name, std::string_view bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

void write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  write(dir, name, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

test::TinyModelSpec small_spec(GgmlType type) {
  test::TinyModelSpec s;
  s.n_embd = 32;
  s.n_layer = 1;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 64;
  s.n_vocab = 280;
  s.weight_type = type;
  return s;
}

void gguf_seeds(const fs::path& out, const std::string& shared) {
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1,
                            GgmlType::Q8_0};
  for (GgmlType type : types) {
    write(out, std::string("tiny-") + ggml_type_name(type) + ".gguf",
          test::make_tiny_model(small_spec(type)).bytes());
  }
  test::TinyModelSpec tied = small_spec(GgmlType::Q8_0);
  tied.tied = true;
  tied.version = 2;
  tied.alignment = 64;
  write(out, "tiny-tied-v2.gguf", test::make_tiny_model(tied).bytes());

  // SentencePiece vocabulary and ChatML template from the shared models.
  const auto stories = GgufFile::open(shared + "/models/stories260K.gguf");
  test::TinyModelSpec spm = small_spec(GgmlType::Q4_0);
  spm.n_vocab = int(stories->get_string_array("tokenizer.ggml.tokens").size());
  spm.tokenizer = false;
  test::TinyModel spm_model = test::make_tiny_model(spm);
  for (const auto& [key, value] : stories->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) spm_model.set_metadata(key, value);
  }
  write(out, "tiny-spm.gguf", spm_model.bytes());

  const auto smol = GgufFile::open(shared + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  test::TinyModel chat = test::make_tiny_model(small_spec(GgmlType::Q4_1));
  chat.set_metadata("tokenizer.chat_template",
                    GgufValue::str(smol->get_string("tokenizer.chat_template")));
  write(out, "tiny-chatml.gguf", chat.bytes());
}

void tokenizer_seeds(const fs::path& out, const std::string& shared) {
  // The vectors' inputs are separated by lines "__ggml_vocab_test__".
  int n = 0;
  for (const char* vocab : {"gpt-2", "llama-spm", "starcoder"}) {
    const std::string text =
        read_text(shared + "/tokenizer-vectors/ggml-vocab-" + std::string(vocab) + ".gguf.inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find(sep, at);
      if (end == std::string::npos) end = text.size();
      const std::string piece = text.substr(at, end - at);
      for (char flags : {'\0', '\2'}) {
        write(out, "vec-" + std::to_string(n++), std::string(1, flags) + piece);
      }
      at = end + sep.size();
    }
  }
  write(out, "special", std::string("\3<|im_start|>user\nhi<|im_end|>\n<s>[INST] x [/INST]"));
  write(out, "invalid-utf8", std::string("\0a\xff\xfe\xc3(\xe2\x82\xf0\x9f\x98", 12));
  write(out, "ids", std::string("\4\0\0\0\0\1\0\0\0\xff\xff\xff\xff\xff\xff\xff\x7f", 17));
}

void chat_template_seeds(const fs::path& out, const std::string& shared) {
  for (const char* model :
       {"SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf", "llama-2-tiny-random.gguf"}) {
    const auto file = GgufFile::open(shared + "/models/" + model);
    if (auto jinja = file->opt_string("tokenizer.chat_template")) {
      write(out, std::string("jinja-") + model, std::string(1, '\1') + *jinja);
    }
  }
  for (char style = 0; style < 6; ++style) {
    const std::string turns("You are terse.\0Hi\0Hello!\0What is 2+2?", 36);
    write(out, "turns-" + std::to_string(int(style)), std::string(1, style) + turns);
  }
}

void config_seeds(const fs::path& out, const fs::path& source) {
  write(out, "default.toml", read_text(source / "config/default.toml"));
  write(out, "sampling.toml", "[sampling]\ntemperature = 0.7\ntop_k = 40\nseed = -1\n");
  write(out, "ui.toml", "[ui]\ncolor = \"never\"\n[ui.colors]\nuser = \"red\"\n");
  write(out, "bad.toml", "context_size = \"big\"\nunknown = 1\n[[x]]\n");
}

void command_seeds(const fs::path& out) {
  const char* lines[] = {"/help",          "/clear",          "/system Be brief.",
                         "/regen",         "/save chat",      "/load chat.json",
                         "/set temp 0.7",  "/set top-k 1e99", "/set seed 18446744073709551615",
                         "/set greedy",    "/stats",          "/debug on",
                         "/quit",          "//not a command", "/nope x",
                         "hello /set temp"};
  int n = 0;
  for (const char* line : lines)
    write(out, "cmd-" + std::to_string(n++), std::string("\0", 1) + line);
  write(out, "pasted", std::string("\1/set temp 1"));
}

void kernel_cache_seeds(const fs::path& out) {
  const std::string binary =
      "\x7f"
      "ELF\2\1\1 pocl program binary " +
      std::string(200, '\x90');
  const std::string entry = encode_kernel_cache_entry(fuzz::k_fuzz_kernel_cache_key, binary);
  write(out, "entry", entry);
  write(out, "entry-1byte", encode_kernel_cache_entry(fuzz::k_fuzz_kernel_cache_key, "x"));
  write(out, "half", entry.substr(0, entry.size() / 2));
  std::string ff = entry;
  ff.replace(16, 8, 8, '\xff');
  write(out, "ff-at-16", ff);
  write(out, "header-only", entry.substr(0, k_kernel_cache_header_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR [SOURCE_DIR]\n";
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path source = argc > 2 ? fs::path(argv[2]) : fs::path(CLCHAT_SOURCE_DIR);
  const std::string shared = fuzz::shared_dir();
  try {
    gguf_seeds(out / "gguf", shared);
    tokenizer_seeds(out / "tokenizer_bpe", shared);
    tokenizer_seeds(out / "tokenizer_spm", shared);
    chat_template_seeds(out / "chat_template", shared);
    config_seeds(out / "config", source);
    command_seeds(out / "commands");
    kernel_cache_seeds(out / "kernel_cache");
  } catch (const std::exception& e) {
    std::cerr << "fuzz_make_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
