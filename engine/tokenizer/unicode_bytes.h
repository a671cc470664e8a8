// The byte-level BPE alphabet: GPT-2's reversible map from the 256 byte values
// to 256 printable code points.
//
// Byte-level BPE vocabularies (GPT-2, StarCoder, SmolLM, Llama 3, Qwen ...)
// never store raw bytes: every byte of the text is first replaced by a
// printable character, so a space is stored as 'Ġ' (U+0120) and a newline as
// 'Ċ' (U+010A). The printable ASCII and Latin-1 bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes (controls, space, DEL,
// NBSP, soft hyphen) take the code points U+0100, U+0101, ... in byte order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace clchat {

// The code point that stands for `byte`.
uint32_t byte_to_unicode(uint8_t byte);
// The UTF-8 text of that code point (1 or 2 bytes).
std::string_view byte_to_unicode_utf8(uint8_t byte);
// The byte that `code_point` stands for, or nullopt when it is not part of the
// alphabet.
std::optional<uint8_t> unicode_to_byte(uint32_t code_point);

// Every byte of `bytes` replaced by its code point, as UTF-8.
std::string bytes_to_unicode_text(std::string_view bytes);
// The inverse: each character of a vocabulary string mapped back to its byte.
// Characters outside the alphabet (and ill-formed bytes) are copied unchanged.
std::string unicode_text_to_bytes(std::string_view text);

}  // namespace clchat
