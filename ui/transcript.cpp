// Transcript entries, wrapping and scrolling (see transcript.h).
#include "ui/transcript.h"

#include <algorithm>

#include "ui/text.h"

namespace clchat::ui {

namespace {

constexpr int k_gutter = 2;  // "› " before user lines, spaces before the rest

struct Look {
  const char* first;  // gutter of the first line
  Style style;
};

Look look_of(EntryKind kind) {
  switch (kind) {
    case EntryKind::User:
      return {"› ", Style::User};
    case EntryKind::Assistant:
      return {"  ", Style::Assistant};
    case EntryKind::System:
      return {"# ", Style::System};
    case EntryKind::Info:
      return {"· ", Style::Dim};
    case EntryKind::Error:
      return {"! ", Style::Warning};
  }
  return {"  ", Style::Normal};
}

}  // namespace

void Transcript::add(EntryKind kind, std::string_view text) {
  entries_.push_back({kind, sanitize_for_display(text), false, {}});
  wrapped_.emplace_back();
  rewrap(entries_.size() - 1);
  changed_last();
}

void Transcript::append_reply(std::string_view piece) {
  if (entries_.empty() || !entries_.back().streaming) {
    entries_.push_back({EntryKind::Assistant, "", true, {}});
    wrapped_.emplace_back();
  }
  auto& text = entries_.back().text;
  text += sanitize_for_display(piece);
  // Replies often start with the space or newline that followed the prompt.
  if (const auto first = text.find_first_not_of(" \n"); first == std::string::npos) {
    text.clear();
  } else if (first > 0) {
    text.erase(0, first);
  }
  rewrap(entries_.size() - 1);
  changed_last();
}

void Transcript::finish_reply(std::string_view footnote) {
  if (entries_.empty() || !entries_.back().streaming) {
    // A reply that produced no text still gets its entry, so a stop shows.
    if (footnote.empty()) return;
    entries_.push_back({EntryKind::Assistant, "", true, {}});
    wrapped_.emplace_back();
  }
  auto& e = entries_.back();
  e.streaming = false;
  e.footnote = std::string(footnote);
  rewrap(entries_.size() - 1);
  changed_last();
}

void Transcript::add_before_turns(EntryKind kind, std::string_view text) {
  const auto first_turn = std::find_if(entries_.begin(), entries_.end(), [](const Entry& e) {
    return e.kind == EntryKind::User || e.kind == EntryKind::Assistant;
  });
  if (first_turn == entries_.end()) return add(kind, text);
  entries_.insert(first_turn, {kind, sanitize_for_display(text), false, {}});
  wrapped_.emplace_back();
  rewrap_all();
}

void Transcript::drop_last_reply() {
  for (size_t i = entries_.size(); i-- > 0;) {
    if (entries_[i].kind == EntryKind::Assistant) {
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      // Notes after the reply (/help's list, a hint) move above its question,
      // so the new reply streams in right under the question.
      const auto question = std::find_if(entries_.rbegin(), entries_.rend(),
                                         [](const Entry& e) { return e.kind == EntryKind::User; });
      if (question != entries_.rend()) {
        const auto q = std::prev(question.base());
        std::rotate(q, q + 1, entries_.end());
      }
      wrapped_.resize(entries_.size());
      rewrap_all();  // the separator lines change
      return;
    }
    if (entries_[i].kind == EntryKind::User) return;  // no reply after the last question
  }
}

void Transcript::clear() {
  entries_.clear();
  wrapped_.clear();
  top_ = 0;
  follow_ = true;
  unseen_ = false;
}

void Transcript::set_width(int width) {
  width = std::max(width, k_gutter + 1);
  if (width == width_) return;
  width_ = width;
  rewrap_all();
}

int Transcript::line_count() const {
  int n = 0;
  for (const auto& w : wrapped_) n += static_cast<int>(w.size());
  return n;
}

void Transcript::rewrap_all() {
  for (size_t i = 0; i < entries_.size(); ++i) rewrap(i);
}

void Transcript::rewrap(size_t index) {
  const Entry& e = entries_[index];
  const Look look = look_of(e.kind);
  auto& out = wrapped_[index];
  out.clear();
  if (index > 0) out.emplace_back();  // one blank line between entries
  // Notes (/help, /show) are two-column rows: keep the columns when wrapped.
  const auto lines = e.kind == EntryKind::Info ? wrap_columns(e.text, width_ - k_gutter)
                                               : wrap_text(e.text, width_ - k_gutter);
  for (size_t i = 0; i < lines.size(); ++i) {
    StyledLine line;
    line.add(i == 0 ? look.first : "  ", i == 0 ? look.style : Style::Normal);
    line.add(lines[i], look.style);
    out.push_back(std::move(line));
  }
  if (!e.footnote.empty()) {
    out.emplace_back(std::string(k_gutter, ' ') + "[" + e.footnote + "]", Style::Dim);
  }
}

void Transcript::changed_last() {
  if (!follow_) unseen_ = true;
}

int Transcript::top_line(int height) const {
  const int max_top = std::max(0, line_count() - height);
  return follow_ ? max_top : std::min(top_, max_top);
}

void Transcript::scroll_up(int lines, int height) {
  const int top = std::max(0, top_line(height) - lines);
  if (top >= std::max(0, line_count() - height)) return;  // everything fits: nothing to scroll
  top_ = top;
  follow_ = false;
}

void Transcript::scroll_down(int lines, int height) {
  const int max_top = std::max(0, line_count() - height);
  top_ = top_line(height) + lines;
  if (top_ >= max_top) scroll_end();
}

void Transcript::scroll_home(int height) { scroll_up(line_count(), height); }

void Transcript::scroll_end() {
  follow_ = true;
  unseen_ = false;
}

std::vector<StyledLine> Transcript::visible(int height) const {
  std::vector<StyledLine> out;
  if (height <= 0) return out;
  const int total = line_count();
  const int top = top_line(height);
  // Short transcripts sit at the bottom of the pane, next to the input line.
  for (int i = total; i < height; ++i) out.emplace_back();
  int index = 0;
  for (const auto& lines : wrapped_) {
    for (const auto& line : lines) {
      if (index >= top && index < top + height) out.push_back(line);
      ++index;
    }
    if (index >= top + height) break;
  }
  if (!follow_ && unseen_ && !out.empty()) {
    out.back() = StyledLine(pad_width("  ↓ new text below — End to follow", width_), Style::Accent);
  }
  return out;
}

}  // namespace clchat::ui
