// What the view builders produce and the ncurses drawer consumes: lines of
// spans, each span text with a semantic style. Builders (transcript, panel,
// status bar) stay free of ncurses and can be tested as plain strings; the
// drawer maps each Style to a colour pair or, on monochrome terminals, to
// bold/reverse/dim attributes.
#pragma once

#include <string>
#include <vector>

namespace clchat::ui {

enum class Style { Normal, User, Assistant, System, Accent, Bar, Warning, Dim, Title, Status };

struct Span {
  std::string text;
  Style style = Style::Normal;
};

struct StyledLine {
  std::vector<Span> spans;

  StyledLine() = default;
  StyledLine(std::string text, Style style = Style::Normal) { add(std::move(text), style); }
  StyledLine& add(std::string text, Style style = Style::Normal) {
    spans.push_back({std::move(text), style});
    return *this;
  }
  // The line as plain text (tests compare these).
  std::string text() const {
    std::string out;
    for (const auto& s : spans) out += s.text;
    return out;
  }
};

}  // namespace clchat::ui
