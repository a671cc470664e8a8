// UTF-8 validation, encoding and the streaming decoder (see utf8.h).
//
// The second byte of a sequence has a narrower range for some lead bytes
// (Unicode Table 3-7): E0 needs A0..BF (no overlong forms), ED needs 80..9F
// (no surrogates), F0 needs 90..BF and F4 needs 80..8F (nothing above
// U+10FFFF). Every other continuation byte is 80..BF.
#include "common/utf8.h"

namespace clchat {

namespace {

bool in_range(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Allowed range of the second byte after `lead`.
void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Appends the well-formed part of `s` to `out`, one U+FFFD per ill-formed
// piece. Returns the offset of a cut-off sequence at the end when
// `keep_tail`, else s.size() (the cut-off tail is replaced too).
size_t append_sanitized(std::string& out, std::string_view s, bool keep_tail) {
  size_t pos = 0;
  while (pos < s.size()) {
    const auto b = static_cast<uint8_t>(s[pos]);
    if (b < 0x80) {
      // Copy a whole ASCII run at once: the common case for English text.
      size_t end = pos + 1;
      while (end < s.size() && static_cast<uint8_t>(s[end]) < 0x80) ++end;
      out.append(s.substr(pos, end - pos));
      pos = end;
      continue;
    }
    const int n = utf8_sequence_length(b);
    const int k = utf8_valid_prefix_length(s, pos);
    if (n > 0 && k == n) {
      out.append(s.substr(pos, n));
      pos += n;
    } else if (keep_tail && k > 0 && pos + k == s.size()) {
      return pos;
    } else {
      out.append(k_utf8_replacement);
      pos += k > 0 ? k : 1;
    }
  }
  return s.size();
}

}  // namespace

int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or C0/C1 (always overlong)
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

int utf8_valid_prefix_length(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const int n = utf8_sequence_length(lead);
  if (n <= 1) return n;
  for (int i = 1; i < n; ++i) {
    if (pos + i >= s.size()) return i;
    const auto b = static_cast<uint8_t>(s[pos + i]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (i == 1) second_byte_range(lead, lo, hi);
    if (!in_range(b, lo, hi)) return i;
  }
  return n;
}

Utf8Char decode_utf8_char(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const int n = utf8_sequence_length(lead);
  if (n == 0 || utf8_valid_prefix_length(s, pos) != n) return {};
  if (n == 1) return {lead, 1};
  // The lead keeps 7 - n payload bits; every continuation byte adds 6.
  uint32_t cp = lead & (0x7Fu >> n);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3Fu);
  return {cp, n};
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int n = utf8_sequence_length(static_cast<uint8_t>(s[pos]));
    if (n == 0 || utf8_valid_prefix_length(s, pos) != n) return false;
    pos += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t code_point) {
  const uint32_t cp = code_point;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    out.append(k_utf8_replacement);
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out.append(k_utf8_replacement);
  }
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_sanitized(out, s, /*keep_tail=*/false);
  return out;
}

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  std::string out;
  if (pending_.empty()) {
    const size_t tail = append_sanitized(out, bytes, /*keep_tail=*/true);
    pending_.assign(bytes.substr(tail));
    return out;
  }
  std::string buf = std::move(pending_);
  buf.append(bytes);
  const size_t tail = append_sanitized(out, buf, /*keep_tail=*/true);
  pending_ = buf.substr(tail);
  return out;
}

std::string Utf8StreamDecoder::finish() {
  std::string out = pending_.empty() ? std::string() : std::string(k_utf8_replacement);
  pending_.clear();
  return out;
}

}  // namespace clchat
