// Column widths and word wrap: ASCII, CJK (two columns, breaks without
// spaces), emoji, combining marks, long words, indentation.
#include <gtest/gtest.h>

#include <clocale>

#include "ui/input_view.h"
#include "ui/text.h"

namespace ui = clchat::ui;

namespace {
struct Utf8Locale {
  Utf8Locale() { std::setlocale(LC_ALL, "C.UTF-8"); }
} g_locale;

std::vector<std::string> wrap(const std::string& s, int w) { return ui::wrap_text(s, w); }
}  // namespace

TEST(UiText, Widths) {
  EXPECT_EQ(ui::display_width("hello"), 5);
  EXPECT_EQ(ui::display_width("日本語"), 6);
  EXPECT_EQ(ui::display_width("😀"), 2);
  EXPECT_EQ(ui::display_width("e\xcc\x81"), 1);  // e + combining acute
  EXPECT_EQ(ui::display_width("\xff"
                              "a"),
            2);                                 // invalid byte counts one
  EXPECT_EQ(ui::display_width("\xe6\x97"), 2);  // truncated sequence: one per byte
}

TEST(UiText, FitAndPad) {
  EXPECT_EQ(ui::fit_width("日本語", 5), "日本");  // never half a wide char
  EXPECT_EQ(ui::pad_width("日本語", 5), "日本 ");
  EXPECT_EQ(ui::pad_width("ab", 4), "ab  ");
}

TEST(UiWrap, WordsAtSpaces) {
  EXPECT_EQ(wrap("the quick brown fox", 10), (std::vector<std::string>{"the quick", "brown fox"}));
  EXPECT_EQ(wrap("the quick brown fox", 9), (std::vector<std::string>{"the quick", "brown fox"}));
  EXPECT_EQ(wrap("", 10), (std::vector<std::string>{""}));
}

TEST(UiWrap, NewlinesAndIndentKept) {
  EXPECT_EQ(wrap("a\n\n  b", 10), (std::vector<std::string>{"a", "", "  b"}));
}

TEST(UiWrap, LongWordIsCut) {
  EXPECT_EQ(wrap("abcdefghij", 4), (std::vector<std::string>{"abcd", "efgh", "ij"}));
  EXPECT_EQ(wrap("xy abcdefghij", 4), (std::vector<std::string>{"xy", "abcd", "efgh", "ij"}));
}

TEST(UiWrap, CjkBreaksAnywhereAndNeverSplitsAChar) {
  // 7 ideographs (14 columns) in 5 columns: 2 per line, one column left over.
  const auto lines = wrap("一二三四五六七", 5);
  EXPECT_EQ(lines, (std::vector<std::string>{"一二", "三四", "五六", "七"}));
  for (const auto& l : lines) EXPECT_LE(ui::display_width(l), 5);
  EXPECT_EQ(wrap("ab一二", 3), (std::vector<std::string>{"ab", "一", "二"}));
}

TEST(UiWrap, EmojiAndMixedText) {
  const auto lines = wrap("hi 😀😀😀 there", 6);
  for (const auto& l : lines) EXPECT_LE(ui::display_width(l), 6) << l;
  std::string joined;
  for (const auto& l : lines) joined += l;
  EXPECT_EQ(lines, (std::vector<std::string>{"hi 😀", "😀😀", "there"}));
  EXPECT_EQ(joined, "hi 😀😀😀there");  // only the space at the break is dropped
}

TEST(UiWrap, EveryLineFitsForManyWidths) {
  const std::string text = "Mixed 日本語 text with émoji 🎉 and a verylongwordthatneedscutting end.";
  for (int w = 2; w < 40; ++w) {
    for (const auto& l : wrap(text, w)) EXPECT_LE(ui::display_width(l), w) << "width " << w;
  }
}

TEST(UiText, SanitizeExpandsTabsDropsControls) {
  EXPECT_EQ(ui::sanitize_for_display("a\tb"), "a   b");
  EXPECT_EQ(ui::sanitize_for_display("x\x1b[31my\n"), "x[31my\n");
}

TEST(UiInputView, CursorAndWrapping) {
  auto v = ui::layout_input("> ", "hello", 5, 20);
  EXPECT_EQ(v.lines, (std::vector<std::string>{"> hello"}));
  EXPECT_EQ(v.cursor_row, 0);
  EXPECT_EQ(v.cursor_col, 7);
  v = ui::layout_input("> ", "abcdef", 2, 6);  // 4 columns of text per line
  EXPECT_EQ(v.lines, (std::vector<std::string>{"> abcd", "  ef"}));
  EXPECT_EQ(v.cursor_col, 4);
  v = ui::layout_input("> ", "ab\ncd", 5, 20);  // Alt-Enter newline
  EXPECT_EQ(v.lines, (std::vector<std::string>{"> ab", "  cd"}));
  EXPECT_EQ(v.cursor_row, 1);
  EXPECT_EQ(v.cursor_col, 4);
  v = ui::layout_input("> ", "日本", 3, 20);  // byte offset 3 = before 本
  EXPECT_EQ(v.cursor_col, 4);
}

// Typed or pasted bytes: one U+FFFD per ill-formed piece, controls dropped,
// newlines, tabs and well-formed text (CJK, emoji) kept.
TEST(UiText, SanitizeInputReplacesBadUtf8AndDropsControls) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(ui::sanitize_input("plain text, 你好 🙂\n\tindented"),
            "plain text, 你好 🙂\n\tindented");
  EXPECT_EQ(ui::sanitize_input("a\x01"
                               "b\x1b[31mc\x7f"
                               "d"),
            "ab[31mcd");
  EXPECT_EQ(ui::sanitize_input("x\x80y"), "x" + fffd + "y");          // lone continuation
  EXPECT_EQ(ui::sanitize_input("\xC0\xAF"), fffd + fffd);             // overlong '/'
  EXPECT_EQ(ui::sanitize_input("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(ui::sanitize_input("cut \xE4\xBD"), "cut " + fffd);       // cut-off sequence
  EXPECT_EQ(ui::sanitize_input("\xC2\x85next\xC2\x9B"), "next");      // C1 controls
  EXPECT_EQ(ui::sanitize_input("\xC2\xA0nbsp"), "\xC2\xA0nbsp");      // U+00A0 is text
  EXPECT_EQ(ui::sanitize_input(std::string("nul\0byte", 8)), "nulbyte");
  EXPECT_EQ(ui::sanitize_input(""), "");
}

// /help's rows keep their columns when the transcript is narrow.
TEST(UiText, WrapColumnsHangsTheSecondColumn) {
  const auto lines =
      ui::wrap_columns("/set KEY VALUE   temp, top_k, top_p, min_p\nplain text here", 40);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "/set KEY VALUE   temp, top_k, top_p,");
  EXPECT_EQ(lines[1], "                 min_p");
  EXPECT_EQ(lines[2], "plain text here");
  // A second column starting past the middle wraps as plain text.
  EXPECT_EQ(ui::wrap_columns("a very long first column  x", 20)[0], "a very long first");
}
