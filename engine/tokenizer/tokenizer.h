// Text <-> token ids for the two vocabulary kinds that llama-architecture
// GGUF files carry, matching llama.cpp's tokenizer id for id.
//
// - `tokenizer.ggml.model = gpt2`: byte-level BPE. The text is cut into words
//   by the pre-tokenizer regexes that `tokenizer.ggml.pre` names (PCRE2,
//   Unicode properties), each word's bytes become the BPE alphabet
//   (unicode_bytes.h), and the ranked merges join neighbours, lowest rank
//   first (tokenizer_bpe.h).
// - `tokenizer.ggml.model = llama`: SentencePiece-style. Spaces become '▁', a
//   '▁' is prefixed to the text (`add_space_prefix`), neighbouring pieces are
//   joined best score first, and characters missing from the vocabulary fall
//   back to byte tokens `<0xNN>` (tokenizer_spm.h).
//
// Special tokens (control, user-defined, unknown) are cut out of the text
// before either algorithm runs, longest first, as llama.cpp does; control and
// unknown ones only when `parse_special` is set, user-defined ones always (they
// are "added tokens" that Hugging Face tokenizers always match).
//
// A Tokenizer is immutable once built: encode() keeps its scratch on the
// stack, so one instance can serve several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "engine/gguf/gguf.h"

namespace clchat {

// Bytes [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  enum class Kind { Bpe, Spm };

  // Reads tokenizer.ggml.*: model, tokens, scores, token_type, merges, pre, the
  // bos/eos/unk/padding/eot/eom ids, add_bos_token and add_space_prefix.
  // Throws GgufError (through file.fail()) on missing or inconsistent data:
  // unknown model, arrays of different lengths, ids out of range, merges
  // naming unknown tokens. An id of -1 / 0xFFFFFFFF means "no such token".
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. add_bos: prepend BOS if the model asks for it
  // (add_bos()). parse_special: match control tokens such as <|im_start|>.
  // Ill-formed UTF-8 is accepted: byte-level BPE encodes any byte, SPM uses its
  // byte tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Chat text: control tokens are matched only outside the `plain` spans
  // (sorted, the conversation's messages), which are text as with
  // parse_special = false, so a message holding "<|im_end|>" cannot end its
  // turn. Neighbouring text inside and outside the spans is encoded as one
  // piece, exactly as encode() would.
  std::vector<int32_t> encode_chat(std::string_view text, std::span<const TextSpan> plain,
                                   bool add_bos) const;

  Kind kind() const;
  // tokenizer.ggml.pre as read ("default" when missing, "" for SPM).
  const std::string& pre() const;
  bool add_bos() const;
  bool add_space_prefix() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  int32_t n_vocab() const;

  // End of generation: eos, eot, eom and tokens such as <|im_end|>,
  // <|eot_id|>, <|endoftext|>, <end_of_turn> when they are special tokens.
  bool is_eog(int32_t id) const;
  // Control (and unused) tokens: markup that is never printed.
  bool is_control(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;

  // The bytes token `id` stands for: byte-level BPE text mapped back to bytes,
  // SPM '▁' as a space and <0xNN> as that byte, user-defined tokens verbatim,
  // control tokens and ids out of range as "". A token may hold part of a
  // UTF-8 character: print through Utf8StreamDecoder.
  std::string token_to_bytes(int32_t id) const;
  // Concatenated token_to_bytes(); may hold ill-formed UTF-8 when `ids` cut a
  // character. For SPM the space prefix that encode() added stays in.
  std::string decode(std::span<const int32_t> ids) const;
  // The raw vocabulary string; throws std::out_of_range for a bad id.
  const std::string& token_text(int32_t id) const;

 private:
  struct Tables;
  explicit Tokenizer(std::unique_ptr<const Tables> tables);

  std::unique_ptr<const Tables> t_;
};

}  // namespace clchat
