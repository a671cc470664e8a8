// Transcript: entries, streaming, and scrollback that does not jump while
// the user reads back, with a marker for text arriving below.
#include <gtest/gtest.h>

#include <clocale>

#include "ui/transcript.h"

namespace ui = clchat::ui;

namespace {
struct Utf8Locale {
  Utf8Locale() { std::setlocale(LC_ALL, "C.UTF-8"); }
} g_locale;

std::vector<std::string> texts(const std::vector<ui::StyledLine>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) out.push_back(l.text());
  return out;
}

ui::Transcript numbered(int n, int width = 20) {
  ui::Transcript t;
  t.set_width(width);
  for (int i = 0; i < n; ++i) t.add(ui::EntryKind::Info, "line " + std::to_string(i));
  return t;  // entries after the first have a blank line before them
}
}  // namespace

TEST(UiTranscript, EntriesHaveGuttersAndSeparators) {
  ui::Transcript t;
  t.set_width(20);
  t.add(ui::EntryKind::User, "hello");
  t.append_reply(" hi");
  t.append_reply(" there");
  t.finish_reply("stopped");
  const auto v = texts(t.visible(4));
  EXPECT_EQ(v, (std::vector<std::string>{"› hello", "", "  hi there", "  [stopped]"}));
}

TEST(UiTranscript, ShortTranscriptSitsAtTheBottom) {
  ui::Transcript t;
  t.set_width(20);
  t.add(ui::EntryKind::User, "q");
  EXPECT_EQ(texts(t.visible(3)), (std::vector<std::string>{"", "", "› q"}));
}

TEST(UiTranscript, StreamingWrapsToWidth) {
  ui::Transcript t;
  t.set_width(12);  // 10 columns of text after the gutter
  for (const char* piece : {"Once", " upon", " a", " time", " there"}) t.append_reply(piece);
  EXPECT_EQ(texts(t.visible(3)), (std::vector<std::string>{"  Once upon", "  a time", "  there"}));
  t.set_width(40);
  EXPECT_EQ(texts(t.visible(1)), (std::vector<std::string>{"  Once upon a time there"}));
}

TEST(UiTranscript, ScrollKeepsPlaceWhileTextArrives) {
  auto t = numbered(10);  // 19 lines
  const int h = 5;
  EXPECT_TRUE(t.following());
  EXPECT_EQ(t.top_line(h), 14);
  t.scroll_up(4, h);
  EXPECT_FALSE(t.following());
  EXPECT_EQ(t.top_line(h), 10);
  const auto before = texts(t.visible(h));
  t.append_reply("new text");
  EXPECT_TRUE(t.unseen_below());
  EXPECT_EQ(t.top_line(h), 10);  // no jump
  auto now = texts(t.visible(h));
  EXPECT_NE(now.back().find("new text below"), std::string::npos);
  now.pop_back();
  EXPECT_EQ(now, std::vector<std::string>(before.begin(), before.end() - 1));
  t.scroll_end();
  EXPECT_TRUE(t.following());
  EXPECT_FALSE(t.unseen_below());
  EXPECT_EQ(texts(t.visible(h)).back(), "  new text");
}

TEST(UiTranscript, ScrollDownToBottomFollowsAgain) {
  auto t = numbered(10);
  t.scroll_up(3, 5);
  t.scroll_down(2, 5);
  EXPECT_FALSE(t.following());
  t.scroll_down(5, 5);
  EXPECT_TRUE(t.following());
}

TEST(UiTranscript, HomeAndClamping) {
  auto t = numbered(10);
  t.scroll_home(5);
  EXPECT_EQ(t.top_line(5), 0);
  t.scroll_up(100, 5);
  EXPECT_EQ(t.top_line(5), 0);
  EXPECT_EQ(texts(t.visible(5)).front(), "· line 0");
}

TEST(UiTranscript, NothingToScrollWhenItFits) {
  auto t = numbered(2);
  t.scroll_up(3, 10);
  EXPECT_TRUE(t.following());
}

TEST(UiTranscript, DropLastReplyForRegen) {
  ui::Transcript t;
  t.set_width(20);
  t.add(ui::EntryKind::User, "q");
  t.append_reply("a");
  t.finish_reply("");
  t.drop_last_reply();
  ASSERT_EQ(t.entries().size(), 1u);
  EXPECT_EQ(t.entries()[0].kind, ui::EntryKind::User);
}

// /regen after /help: the new reply goes right under its question, /help's
// list above it.
TEST(UiTranscript, RegeneratedReplyFollowsItsQuestion) {
  ui::Transcript t;
  t.set_width(20);
  t.add(ui::EntryKind::User, "q");
  t.append_reply("a");
  t.finish_reply("");
  t.add(ui::EntryKind::Info, "/help list");
  t.drop_last_reply();
  t.append_reply("b");
  t.finish_reply("");
  ASSERT_EQ(t.entries().size(), 3u);
  EXPECT_EQ(t.entries()[0].text, "/help list");
  EXPECT_EQ(t.entries()[1].text, "q");
  EXPECT_EQ(t.entries()[2].text, "b");
}

// A message typed while the model loads stays below the model's banner.
TEST(UiTranscript, BannerGoesAboveTheFirstQuestion) {
  ui::Transcript t;
  t.add(ui::EntryKind::Info, "log problem");
  t.add(ui::EntryKind::User, "early question");
  t.add_before_turns(ui::EntryKind::Info, "banner");
  ASSERT_EQ(t.entries().size(), 3u);
  EXPECT_EQ(t.entries()[1].text, "banner");
  EXPECT_EQ(t.entries()[2].text, "early question");
}

TEST(UiTranscript, LeadingWhitespaceOfAReplyIsDropped) {
  ui::Transcript t;
  t.append_reply(" ");
  t.append_reply("\n Hi");
  EXPECT_EQ(t.entries().back().text, "Hi");
}

TEST(UiTranscript, EmptyStoppedReplyStillShows) {
  ui::Transcript t;
  t.set_width(20);
  t.add(ui::EntryKind::User, "q");
  t.finish_reply("stopped");
  EXPECT_EQ(texts(t.visible(1)), (std::vector<std::string>{"  [stopped]"}));
}
