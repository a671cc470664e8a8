// SentencePiece-style tokenization of one piece of text, as llama.cpp's SPM
// tokenizer does it (a BPE over characters guided by the piece scores).
//
// The text starts as one symbol per UTF-8 character (an ill-formed byte is a
// symbol of its own). Every adjacent pair whose concatenation is a token is a
// candidate; the candidate whose token has the highest score joins first, the
// leftmost one on a tie, and the joined symbol forms new candidates with its
// neighbours. A final symbol that is not a token (a character missing from the
// vocabulary) is written as byte tokens <0xNN>.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/vocab.h"

namespace clchat {

// For each byte value, the token to write it as: <0xNN> when the vocabulary
// has it, else the one-character token, else unk, else -1 (the byte is
// dropped).
using ByteTokens = std::array<int32_t, 256>;
ByteTokens spm_byte_tokens(const Vocab& vocab, int32_t unk_id);

// Appends the tokens of `text` to `out`. Spaces must already be '▁' and the
// space prefix added: this is the bare merge.
void spm_tokenize(const Vocab& vocab, const ByteTokens& byte_tokens, std::string_view text,
                  std::vector<int32_t>& out);

}  // namespace clchat
