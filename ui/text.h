// Text measured in terminal columns. A UTF-8 string is decoded to code points
// and each is measured with wcwidth(): CJK ideographs and most emoji take two
// columns, combining marks none. The locale must be a UTF-8 one (main() calls
// setlocale) or wcwidth() answers -1 for everything outside ASCII.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace clchat::ui {

// Columns one code point takes: 0, 1 or 2. Control characters count 0 (the
// transcript replaces them before wrapping); invalid bytes count 1 (drawn as
// U+FFFD).
int codepoint_width(char32_t cp);

// Decodes the code point at s[i], advancing i past it; invalid or truncated
// sequences yield U+FFFD and advance one byte.
char32_t next_codepoint(std::string_view s, size_t& i);

int display_width(std::string_view s);

// The longest prefix of s that fits in `columns`, cut between code points.
std::string fit_width(std::string_view s, int columns);

// s cut or padded with spaces to exactly `columns`.
std::string pad_width(std::string_view s, int columns);

// Word wrap to `width` columns. Each '\n' starts a new line; lines break at
// spaces, and before or after any wide (CJK) character, which needs no space
// to break; a word wider than the line is cut between code points. Spaces at
// a break are dropped; leading spaces of a paragraph (indented code) are kept.
// Always at least one line (possibly empty).
std::vector<std::string> wrap_text(std::string_view text, int width);

// wrap_text() for two-column rows ("/help      this list"): a paragraph with
// a run of 2+ spaces after its first word(s) wraps its second column under
// itself, when that column starts in the left half of the width.
std::vector<std::string> wrap_columns(std::string_view text, int width);

// Tabs to spaces (4-column stops) and other C0 controls except '\n' dropped,
// so what is wrapped is what is drawn.
std::string sanitize_for_display(std::string_view text);

// Text typed or pasted into the input line, made fit for it: each ill-formed
// UTF-8 piece (stray continuation bytes, overlong forms, surrogates, cut-off
// sequences) becomes one U+FFFD, and control characters are dropped (C0 but
// '\n' and '\t', DEL, C1 U+0080..U+009F), so no escape sequence or raw
// control byte reaches the prompt, the screen or the model.
std::string sanitize_input(std::string_view text);

// 2132 -> "2,132".
std::string with_thousands(long long n);

}  // namespace clchat::ui
