// Tables for the byte-level BPE alphabet (see unicode_bytes.h), built once.
#include "engine/tokenizer/unicode_bytes.h"

#include <array>

#include "common/utf8.h"

namespace clchat {

namespace {

struct ByteTables {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  // Indexed by code point; every code point of the alphabet is below 0x144.
  std::array<int16_t, 0x200> byte_of{};

  ByteTables() {
    byte_of.fill(-1);
    uint32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      code_point[b] = printable ? static_cast<uint32_t>(b) : next_extra++;
      append_utf8(utf8[b], code_point[b]);
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t byte) { return tables().code_point[byte]; }

std::string_view byte_to_unicode_utf8(uint8_t byte) { return tables().utf8[byte]; }

std::optional<uint8_t> unicode_to_byte(uint32_t code_point) {
  if (code_point >= tables().byte_of.size()) return std::nullopt;
  const int16_t b = tables().byte_of[code_point];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string bytes_to_unicode_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(byte_to_unicode_utf8(static_cast<uint8_t>(c)));
  return out;
}

std::string unicode_text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char ch = decode_utf8_char(text, pos);
    if (ch.length == 0) {
      out += text[pos++];
      continue;
    }
    if (auto b = unicode_to_byte(ch.code_point)) {
      out += static_cast<char>(*b);
    } else {
      out.append(text.substr(pos, ch.length));
    }
    pos += ch.length;
  }
  return out;
}

}  // namespace clchat
