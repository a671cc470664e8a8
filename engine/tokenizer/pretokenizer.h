// The regex pre-tokenizer of byte-level BPE: cuts text into the words that
// merges never cross.
//
// Each `tokenizer.ggml.pre` name maps to a list of patterns (copied from the
// models' tokenizer.json, as llama.cpp lists them). The patterns run in order;
// each splits every piece left by the previous one into its matches and the
// gaps between them, so both matches and gaps become pieces, and lookaheads
// such as `\s+(?!\S)` see the end of the piece as the end of the text.
//
// Matching uses PCRE2 with PCRE2_UTF | PCRE2_UCP (\p{L}, \p{N} and \s follow
// Unicode) and PCRE2_MATCH_INVALID_UTF: ill-formed bytes never match, so they
// end up in gap pieces instead of failing the match. Patterns are JIT-compiled
// when the library supports it. Compiled patterns are shared read-only; each
// split() call makes its own match data, so split() is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace clchat {

struct PreTokenizerSpec {
  std::string_view kind;  // which pattern set: "gpt2", "starcoder", "llama3", "qwen2"
  std::vector<std::string_view> patterns;
  // Llama 3 style: a word that is a whole token is emitted as is, unmerged.
  bool ignore_merges = false;
};

// The spec for a `tokenizer.ggml.pre` value. Names not listed (and "default")
// fall back to the GPT-2 pattern.
PreTokenizerSpec pre_tokenizer_spec(std::string_view pre);

class PreTokenizer {
 public:
  // Throws std::runtime_error when a pattern does not compile (a bug here,
  // never the model file's fault).
  explicit PreTokenizer(const std::vector<std::string_view>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text`, in order and covering it exactly, to
  // `pieces` (views into `text`).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace clchat
