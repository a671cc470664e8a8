// UTF-8 helper tests: validation against the Unicode table of well-formed
// sequences, encoding boundaries, and Utf8StreamDecoder on split characters,
// ill-formed bytes (Unicode's "maximal subpart" replacement, using the example
// of the Unicode standard, section 3.9) and random byte streams.
#include <gtest/gtest.h>

#include <random>

#include "common/utf8.h"

namespace clchat {
namespace {

const std::string k_fffd = "\xEF\xBF\xBD";

TEST(Utf8, Validation) {
  for (const char* s : {"", "plain ASCII", "caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87",  // 中文
                        "\xF0\x9F\x98\x80",                                            // 😀
                        "\xF4\x8F\xBF\xBF",                                            // U+10FFFF
                        "\xED\x9F\xBF",     // U+D7FF, just below the surrogates
                        "\xEE\x80\x80"}) {  // U+E000, just above
    EXPECT_TRUE(is_valid_utf8(s)) << s;
  }
  for (const char* s :
       {"\x80", "\xBF", "\xFF", "\xFE", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF",
        "\xED\xA0\x80", "\xED\xBF\xBF", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
        "\xC3", "\xE2\x82", "\xF0\x9F\x98", "a\xC3(b", "\xE2\x28\xA1"}) {
    EXPECT_FALSE(is_valid_utf8(s)) << ::testing::PrintToString(std::string(s));
  }
}

TEST(Utf8, EncodeDecodeBoundaries) {
  const std::pair<uint32_t, std::string> cases[] = {
      {0x0, std::string(1, '\0')},
      {0x7F, "\x7F"},
      {0x80, "\xC2\x80"},
      {0x7FF, "\xDF\xBF"},
      {0x800, "\xE0\xA0\x80"},
      {0xFFFD, "\xEF\xBF\xBD"},
      {0xFFFF, "\xEF\xBF\xBF"},
      {0x10000, "\xF0\x90\x80\x80"},
      {0x1F600, "\xF0\x9F\x98\x80"},
      {0x10FFFF, "\xF4\x8F\xBF\xBF"},
  };
  for (const auto& [cp, bytes] : cases) {
    std::string out;
    append_utf8(out, cp);
    EXPECT_EQ(out, bytes) << cp;
    const Utf8Char ch = decode_utf8_char(bytes, 0);
    EXPECT_EQ(ch.code_point, cp);
    EXPECT_EQ(ch.length, static_cast<int>(bytes.size()));
  }
  std::string out;
  append_utf8(out, 0xD800);    // a surrogate
  append_utf8(out, 0x110000);  // beyond Unicode
  EXPECT_EQ(out, k_fffd + k_fffd);
  EXPECT_EQ(decode_utf8_char("\xC3", 0).length, 0);
}

TEST(Utf8, SanitizeMaximalSubparts) {
  // Unicode 15, section 3.9, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  // -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
  EXPECT_EQ(sanitize_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + k_fffd + k_fffd + k_fffd + "b" + k_fffd + "c" + k_fffd + k_fffd + "d");
  EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), k_fffd);
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), k_fffd + k_fffd + k_fffd);  // surrogate: 3 pieces
}

TEST(Utf8Stream, AsciiPassesStraightThrough) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("Hello"), "Hello");
  EXPECT_EQ(d.push(", world\n"), ", world\n");
  EXPECT_EQ(d.finish(), "");
}

TEST(Utf8Stream, EmojiOneByteAtATime) {
  const std::string emoji = "\xF0\x9F\x98\x80";  // 😀
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push(emoji.substr(0, 1)), "");
  EXPECT_EQ(d.push(emoji.substr(1, 1)), "");
  EXPECT_EQ(d.push(emoji.substr(2, 1)), "");
  EXPECT_EQ(d.pending(), 3u);
  EXPECT_EQ(d.push(emoji.substr(3, 1)), emoji);
  EXPECT_EQ(d.pending(), 0u);
  EXPECT_EQ(d.finish(), "");
}

TEST(Utf8Stream, CjkSplitAcrossPieces) {
  // "中文" = E4 B8 AD E6 96 87, cut as a byte-level BPE vocabulary might.
  Utf8StreamDecoder d;
  std::string out = d.push("x\xE4");
  EXPECT_EQ(out, "x");
  out = d.push("\xB8\xAD\xE6\x96");
  EXPECT_EQ(out, "\xE4\xB8\xAD");
  out = d.push("\x87 ok");
  EXPECT_EQ(out, "\xE6\x96\x87 ok");
  EXPECT_EQ(d.finish(), "");
}

TEST(Utf8Stream, IllFormedBytesBecomeReplacement) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("a\xFF"
                   "b"),
            "a" + k_fffd + "b");
  EXPECT_EQ(d.push("\x80"), k_fffd);
  // A sequence broken off by a later byte: one U+FFFD, then the byte itself.
  EXPECT_EQ(d.push("\xE2\x82"), "");
  EXPECT_EQ(d.push("z"), k_fffd + "z");
  // A surrogate can never complete: no waiting for more bytes.
  EXPECT_EQ(d.push("\xED\xA0"), k_fffd + k_fffd);
  // A cut-off sequence at the end is flushed by finish().
  EXPECT_EQ(d.push("\xF0\x9F"), "");
  EXPECT_EQ(d.finish(), k_fffd);
  EXPECT_EQ(d.finish(), "");
}

TEST(Utf8Stream, RandomSplitsMatchWholeInput) {
  std::mt19937 rng(1234);
  const std::string valid = "na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 end";
  for (int round = 0; round < 500; ++round) {
    std::string bytes;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Mix well-formed text with random bytes, biased to the UTF-8 lead range.
      if (rng() % 3 == 0) {
        bytes += valid.substr(rng() % valid.size(), 1 + rng() % 6);
      } else {
        bytes += static_cast<char>(rng() % 2 ? 0x80 + rng() % 0x80 : rng() % 0x100);
      }
    }
    Utf8StreamDecoder d;
    std::string streamed;
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t len = 1 + rng() % 5;
      const std::string piece = d.push(std::string_view(bytes).substr(pos, len));
      ASSERT_TRUE(is_valid_utf8(piece));
      streamed += piece;
      pos += len;
    }
    streamed += d.finish();
    EXPECT_EQ(streamed, sanitize_utf8(bytes)) << ::testing::PrintToString(bytes);
    if (is_valid_utf8(bytes)) {
      EXPECT_EQ(streamed, bytes);
    }
  }
}

TEST(Utf8Stream, ValidTextSplitEverywhere) {
  const std::string text = "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80Z";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8StreamDecoder d;
    std::string out = d.push(text.substr(0, cut));
    ASSERT_TRUE(is_valid_utf8(out));
    out += d.push(text.substr(cut));
    out += d.finish();
    EXPECT_EQ(out, text) << cut;
  }
}

}  // namespace
}  // namespace clchat
