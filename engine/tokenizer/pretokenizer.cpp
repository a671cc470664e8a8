// PCRE2 pre-tokenizer patterns and splitting (see tokenizer_pretok.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>
#include <stdexcept>

namespace clchat {

namespace {

// GPT-2's pattern (tokenizer.json of openai-community/gpt2). The trailing
// `\s+` takes a lone whitespace character before a word that ` ?\p{L}+` cannot
// take (a tab, say); it would form a gap piece of its own anyway.
constexpr std::string_view k_gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3's pattern with the case-insensitive contractions spelled out, as
// llama.cpp adapts it (so no Unicode case folding: 'ſ' is not 's').
constexpr std::string_view k_llama3_pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: Llama 3's pattern with digits one at a time.
constexpr std::string_view k_qwen2_pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// StarCoder-family vocabularies split every digit out first.
constexpr std::string_view k_single_digit_pattern = R"(\p{N})";

bool is_one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(std::string_view pre) {
  // Names as llama.cpp's convert_hf_to_gguf.py writes them.
  if (is_one_of(pre, {"starcoder", "refact", "smollm", "command-r", "codeshell", "exaone",
                      "minerva-7b"})) {
    return {"starcoder", {k_single_digit_pattern, k_gpt2_pattern}, false};
  }
  if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
    return {"llama3", {k_llama3_pattern}, true};
  }
  if (is_one_of(pre, {"qwen2", "deepseek-r1-qwen"})) {
    return {"qwen2", {k_qwen2_pattern}, false};
  }
  // "default", "gpt-2", "gpt2", "mpt", "olmo", "jais", absent or unknown.
  return {"gpt2", {k_gpt2_pattern}, false};
}

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }

  // Appends the matches of this pattern in `piece`, and the gaps between them.
  void split(std::string_view piece, pcre2_match_data* md,
             std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t pos = 0;
    while (pos < piece.size()) {
      int rc = pcre2_match(code, subject, piece.size(), pos, 0, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // The interpreter keeps its backtracking state on the heap.
        rc = pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_JIT, md, nullptr);
      }
      // No further match (or a resource limit): the rest stays one piece.
      if (rc < 0) break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
      const size_t start = ovector[0], end = ovector[1];
      if (end <= start) break;  // no pattern here matches the empty string
      if (start > pos) out.push_back(piece.substr(pos, start - pos));
      out.push_back(piece.substr(start, end - start));
      pos = end;
    }
    if (pos < piece.size()) out.push_back(piece.substr(pos));
  }
};

PreTokenizer::PreTokenizer(const std::vector<std::string_view>& patterns) {
  for (std::string_view source : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto pattern = std::make_unique<Pattern>();
    pattern->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                  &error_offset, nullptr);
    if (!pattern->code) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw std::runtime_error("pre-tokenizer pattern does not compile at offset " +
                               std::to_string(error_offset) + ": " +
                               reinterpret_cast<const char*>(message.data()));
    }
    // Without JIT support pcre2_match() simply interprets the pattern.
    pcre2_jit_compile(pattern->code, PCRE2_JIT_COMPLETE);
    patterns_.push_back(std::move(pattern));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  for (const auto& pattern : patterns_) {
    MatchData md(pcre2_match_data_create_from_pattern(pattern->code, nullptr));
    if (!md) throw std::bad_alloc();
    next.clear();
    for (std::string_view piece : current) pattern->split(piece, md.get(), next);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace clchat
