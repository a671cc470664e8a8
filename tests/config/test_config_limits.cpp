// Config files that used to crash or hang the TOML parser (found with
// fuzz/fuzz_config.cpp): thousands of nested arrays or inline tables overflowed
// toml11's recursive parser's stack, a dotted key of 100,000 parts took
// minutes, and a literal string holding a byte that is not UTF-8 made toml11
// read past its buffer. parse_config() now rejects text that is not UTF-8 and
// more than 32 levels up front with one "FILE:LINE: ..." message; brackets and
// dots inside strings and comments do not count, and 32 levels still parse.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace clchat::config {
namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

void expect_too_deep(const std::string& text, const std::string& where) {
  try {
    parse_config(text, "deep.toml");
    ADD_FAILURE() << "accepted: " << text.substr(0, 60);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(where + ": arrays, tables or dotted keys nested deeper than 32", 0), 0u)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ConfigLimits, DeepArraysAndInlineTablesAreRejected) {
  expect_too_deep("a = " + repeat("[", 100000) + repeat("]", 100000) + "\n", "deep.toml:1");
  expect_too_deep("\n\na = " + repeat("{b=", 50000) + "1" + repeat("}", 50000), "deep.toml:3");
  expect_too_deep("x = [\n" + repeat("[", 40) + repeat("]", 40) + "]\n", "deep.toml:2");
}

TEST(ConfigLimits, LongDottedKeysAreRejected) {
  expect_too_deep("a" + repeat(".a", 100000) + " = 1\n", "deep.toml:1");
  expect_too_deep("[" + repeat("t.", 40) + "t]\n", "deep.toml:1");
}

// Up to the limit, the text reaches toml11, which reports what is wrong with
// it (here: keys clchat does not know), so valid TOML is not refused by depth.
TEST(ConfigLimits, ThirtyTwoLevelsReachTheParser) {
  for (const std::string& text :
       {"a = " + repeat("[", 31) + repeat("]", 31) + "\n", "a" + repeat(".a", 31) + " = 1\n"}) {
    try {
      parse_config(text, "ok.toml");
      ADD_FAILURE() << "an unknown key was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigLimits, BracketsInStringsAndCommentsDoNotCount) {
  const std::string text =
      "model = \"" + repeat("[", 1000) + "\"\n# " + repeat("{", 100) + "\nsystem_prompt = '''\n" +
      repeat("[.", 100) + "\n'''\n" +
      "device = 'a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.A.B.C.D.E.F.G'\n" +
      "chat_template = \"\\\"" + repeat("{", 50) + "\"\n";
  const Config c = parse_config(text, "strings.toml");
  EXPECT_EQ(c.model, repeat("[", 1000));
  EXPECT_EQ(c.system_prompt, repeat("[.", 100) + "\n");
  EXPECT_EQ(c.chat_template, "\"" + repeat("{", 50));
  EXPECT_EQ(parse_config("[sampling]\ntemperature = 0.7\n", "f.toml").sampling.temperature, 0.7);
}

TEST(ConfigLimits, TextThatIsNotUtf8IsRejected) {
  for (const char* bad : {"t = '\xf4'\n",
                          "t = '''a\xf4"
                          "b'''\n",
                          "x = \"\xc3(\"\n", "# \xff\n", "model = \"\xed\xa0\x80\"\n"}) {
    try {
      parse_config(std::string("\n") + bad, "u.toml");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_STREQ(e.what(), "u.toml:2: not valid UTF-8 (a TOML file must be UTF-8)");
    }
  }
  EXPECT_EQ(parse_config("model = 'caf\xc3\xa9 \xf0\x9f\x98\x80'\n", "ok.toml").model,
            "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

}  // namespace
}  // namespace clchat::config
