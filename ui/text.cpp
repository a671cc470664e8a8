// Column arithmetic and word wrap (see text.h).
#include "ui/text.h"

#include <cwchar>

#include "common/utf8.h"

namespace clchat::ui {

int codepoint_width(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return 0;
  const int w = ::wcwidth(static_cast<wchar_t>(cp));
  if (w < 0) return 1;  // unassigned or unknown to this libc: ncurses draws one cell
  return w;
}

char32_t next_codepoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int extra = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  } else if ((b0 & 0xe0) == 0xc0) {
    extra = 1;
    cp = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    extra = 2;
    cp = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    extra = 3;
    cp = b0 & 0x07;
  } else {
    ++i;
    return 0xfffd;
  }
  if (i + static_cast<size_t>(extra) >= s.size()) {  // truncated sequence
    ++i;
    return 0xfffd;
  }
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) {
      ++i;
      return 0xfffd;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  i += extra + 1;
  return cp;
}

int display_width(std::string_view s) {
  int w = 0;
  for (size_t i = 0; i < s.size();) w += codepoint_width(next_codepoint(s, i));
  return w;
}

std::string fit_width(std::string_view s, int columns) {
  int w = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    const int cw = codepoint_width(next_codepoint(s, next));
    if (w + cw > columns) break;
    w += cw;
    i = next;
  }
  return std::string(s.substr(0, i));
}

std::string pad_width(std::string_view s, int columns) {
  std::string out = fit_width(s, columns);
  const int w = display_width(out);
  if (w < columns) out.append(static_cast<size_t>(columns - w), ' ');
  return out;
}

namespace {

// One unit the wrapper places whole when it can: a run of spaces, a word, or a
// single wide character.
struct Piece {
  std::string_view text;
  int width = 0;
  bool space = false;
};

std::vector<Piece> split_pieces(std::string_view para) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < para.size()) {
    const size_t start = i;
    size_t next = i;
    const char32_t cp = next_codepoint(para, next);
    const int cw = codepoint_width(cp);
    if (cp == U' ') {
      while (i < para.size() && para[i] == ' ') ++i;
      pieces.push_back({para.substr(start, i - start), static_cast<int>(i - start), true});
      continue;
    }
    if (cw == 2) {
      i = next;
      // Combining marks after a wide character stay with it.
      while (i < para.size()) {
        size_t n2 = i;
        if (codepoint_width(next_codepoint(para, n2)) != 0) break;
        i = n2;
      }
      pieces.push_back({para.substr(start, i - start), 2, false});
      continue;
    }
    int w = 0;
    while (i < para.size() && para[i] != ' ') {
      size_t n2 = i;
      const int w2 = codepoint_width(next_codepoint(para, n2));
      if (w2 == 2) break;
      w += w2;
      i = n2;
    }
    pieces.push_back({para.substr(start, i - start), w, false});
  }
  return pieces;
}

void wrap_paragraph(std::string_view para, int width, std::vector<std::string>& out) {
  std::string line;
  int col = 0;
  auto flush = [&] {
    // Trailing spaces at a break are not drawn.
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out.push_back(std::move(line));
    line.clear();
    col = 0;
  };
  bool para_start = true;
  for (const auto& p : split_pieces(para)) {
    if (p.space) {
      // Spaces that open a paragraph are indentation; elsewhere they may vanish at a break.
      if (col + p.width <= width) {
        line.append(p.text);
        col += p.width;
      } else if (!para_start) {
        flush();
      } else {
        line.append(static_cast<size_t>(width - col), ' ');
        col = width;
      }
      para_start = false;
      continue;
    }
    para_start = false;
    if (col + p.width <= width) {
      line.append(p.text);
      col += p.width;
      continue;
    }
    if (p.width <= width && col > 0) {
      flush();
      line.append(p.text);
      col = p.width;
      continue;
    }
    // A word wider than a whole line starts a line of its own and is cut
    // between code points.
    if (col > 0) flush();
    std::string_view rest = p.text;
    while (!rest.empty()) {
      if (col >= width) flush();
      const std::string part = fit_width(rest, width - col);
      if (part.empty()) {
        if (col == 0) {  // a wide char in a 1-column line: draw it anyway
          size_t n = 0;
          next_codepoint(rest, n);
          line.append(rest.substr(0, n));
          rest.remove_prefix(n);
          flush();
          continue;
        }
        flush();
        continue;
      }
      line += part;
      col += display_width(part);
      rest.remove_prefix(part.size());
    }
  }
  out.push_back(std::move(line));
}

}  // namespace

std::vector<std::string> wrap_text(std::string_view text, int width) {
  if (width < 1) width = 1;
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t nl = text.find('\n', start);
    const auto para = text.substr(start, nl == std::string_view::npos ? nl : nl - start);
    wrap_paragraph(para, width, out);
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return out;
}

std::string sanitize_for_display(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int col = 0;
  for (char c : text) {
    if (c == '\n') {
      out += c;
      col = 0;
    } else if (c == '\t') {
      const int n = 4 - col % 4;
      out.append(static_cast<size_t>(n), ' ');
      col += n;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      continue;  // escape sequences from a model must not reach the terminal
    } else {
      out += c;
      // Tab stops count bytes of ASCII only; good enough for code indentation.
      if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++col;
    }
  }
  return out;
}

std::string sanitize_input(std::string_view text) {
  const std::string valid = sanitize_utf8(text);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) continue;
    // C1 controls are U+0080..U+009F: 0xC2 0x80..0x9F.
    if (c == 0xc2 && i + 1 < valid.size() && static_cast<unsigned char>(valid[i + 1]) < 0xa0) {
      ++i;
      continue;
    }
    out += valid[i];
  }
  return out;
}

std::vector<std::string> wrap_columns(std::string_view text, int width) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t nl = text.find('\n', start);
    const std::string_view row =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    const size_t first = row.find_first_not_of(' ');
    const size_t gap = first == std::string_view::npos ? first : row.find("  ", first);
    const size_t value = gap == std::string_view::npos ? gap : row.find_first_not_of(' ', gap);
    const int column = value == std::string_view::npos ? 0 : display_width(row.substr(0, value));
    if (column > 0 && column <= width / 2) {
      const auto body = wrap_text(row.substr(value), width - column);
      out.push_back(std::string(row.substr(0, value)) + body[0]);
      for (size_t i = 1; i < body.size(); ++i) {
        out.push_back(std::string(static_cast<size_t>(column), ' ') + body[i]);
      }
    } else {
      const auto lines = wrap_text(row, width);
      out.insert(out.end(), lines.begin(), lines.end());
    }
    if (nl == std::string_view::npos) return out;
    start = nl + 1;
  }
}

std::string with_thousands(long long n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace clchat::ui
