// UTF-8 helpers for the tokenizer and the terminal output.
//
// Validation follows the Unicode standard's table of well-formed byte
// sequences (no overlong forms, no surrogates, nothing above U+10FFFF).
// Utf8StreamDecoder turns the byte pieces that tokens stand for into text a
// terminal can print: a multi-byte character split across tokens is held back
// until its last byte arrives, and every ill-formed piece becomes one U+FFFD
// per "maximal subpart" (the longest prefix of a well-formed sequence), the
// replacement practice Unicode recommends and browsers use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace clchat {

// "\xEF\xBF\xBD", the UTF-8 encoding of U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view k_utf8_replacement = "\xEF\xBF\xBD";

// Bytes in the sequence that `lead` starts (1..4), or 0 when `lead` can never
// start a well-formed sequence (continuation bytes, 0xC0, 0xC1, 0xF5..0xFF).
int utf8_sequence_length(uint8_t lead);

// One decoded character: `length` bytes were consumed; `length == 0` means the
// bytes at that position are ill-formed (or cut off) and `code_point` is unset.
struct Utf8Char {
  uint32_t code_point = 0;
  int length = 0;
};
// Decodes the character starting at `pos` (pos < s.size()).
Utf8Char decode_utf8_char(std::string_view s, size_t pos);

// Length of the longest prefix of the sequence at `pos` that could still
// become well-formed (>= 1 when the lead byte is valid, 0 otherwise). Used to
// size the replacement of an ill-formed piece and to spot a cut-off tail.
int utf8_valid_prefix_length(std::string_view s, size_t pos);

bool is_valid_utf8(std::string_view s);

// Appends the UTF-8 encoding of `code_point` (U+FFFD when it is a surrogate or
// above U+10FFFF).
void append_utf8(std::string& out, uint32_t code_point);

// Replaces each ill-formed piece of `s` by U+FFFD.
std::string sanitize_utf8(std::string_view s);

// Streams token bytes to a terminal. push() returns the complete, valid part
// of everything pushed so far and keeps an unfinished trailing sequence (at
// most 3 bytes) for the next push; finish() flushes that remainder as U+FFFD.
// Both only ever return valid UTF-8.
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);
  std::string finish();
  // Bytes held back, waiting for the rest of their character.
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace clchat
