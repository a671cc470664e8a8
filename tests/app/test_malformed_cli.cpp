// `clchat info` and `clchat run` on broken model files: exit status 2, one
// line on stderr that starts with "clchat: " and names the file, nothing on
// stdout. Needs the built clchat executable (CLCHAT_BINARY).
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using test::GgufLayout;
using test::TinyModel;
using Bytes = std::vector<uint8_t>;

struct BrokenFile {
  std::string name;
  Bytes bytes;
  std::string phrase;  // part of the one-line message
};

TinyModel base() {
  test::TinyModelSpec spec;
  spec.n_embd = 32;
  spec.n_layer = 1;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 64;
  spec.n_vocab = 280;
  spec.weight_type = GgmlType::Q4_0;
  return test::make_tiny_model(spec);
}

// The fixture with its tokenizer arrays replaced by a vocabulary of
// `n_tokens` (token_embd keeps its 280 rows).
TinyModel with_vocab(int n_tokens) {
  TinyModel m = base();
  for (auto& [key, value] : test::vocab_metadata(test::make_tiny_vocab(n_tokens))) {
    m.set_metadata(key, std::move(value));
  }
  return m;
}

std::vector<BrokenFile> broken_files() {
  const Bytes good = base().bytes();
  const GgufLayout l = test::parse_gguf_layout(good);
  std::vector<BrokenFile> files;
  files.push_back({"empty", {}, "bad magic"});
  Bytes magic = good;
  magic[0] = 'X';
  files.push_back({"bad-magic", magic, "bad magic"});
  files.push_back({"cut-header", Bytes(good.begin(), good.begin() + 10),
                   "truncated while reading tensor count"});
  files.push_back({"cut-tokens", Bytes(good.begin(), good.begin() + 1000),
                   "'tokenizer.ggml.tokens': array length 280 exceeds the file size"});
  files.push_back(
      {"cut-data", Bytes(good.begin(), good.end() - 100), "is not within the file bounds"});
  Bytes iq2 = good;
  test::patch_u32(iq2, l.tensor("blk.0.attn_v.weight").type_at, 16);
  files.push_back({"iq2_xxs", iq2, "unsupported type IQ2_XXS (16)"});
  Bytes count = good;
  test::patch_u64(count, GgufLayout::n_tensors_at, ~uint64_t{0});
  files.push_back({"huge-count", count, "tensor count 18446744073709551615 exceeds"});
  Bytes utf8 = good;
  utf8[l.kv("general.name").key_len_at + 8] = 0xff;
  files.push_back({"utf8-key", utf8, "is not valid UTF-8"});
  TinyModel missing = base();
  missing.erase_metadata("llama.embedding_length");
  files.push_back(
      {"missing-key", missing.bytes(), "missing metadata key 'llama.embedding_length'"});
  TinyModel arch = base();
  arch.set_metadata("general.architecture", GgufValue::str("gpt2\nsecond line"));
  files.push_back({"arch", arch.bytes(), "unsupported architecture 'gpt2\\x0asecond line'"});
  TinyModel shape = base();
  shape.erase_tensor("blk.0.ffn_down.weight");
  files.push_back({"missing-tensor", shape.bytes(), "missing tensor 'blk.0.ffn_down.weight'"});
  // The tokenizer must match token_embd's rows (issue 21): fewer tokens made
  // empty replies, more an error at first use that named no file.
  files.push_back({"fewer-tokens", with_vocab(270).bytes(),
                   "tokenizer.ggml.tokens has 270 tokens but token_embd.weight has 280 rows"});
  files.push_back({"more-tokens", with_vocab(290).bytes(),
                   "tokenizer.ggml.tokens has 290 tokens but token_embd.weight has 280 rows"});
  // What the tokenizer refuses, info refuses too (it used to describe it).
  TinyModel scores = base();
  scores.set_metadata("tokenizer.ggml.scores",
                      GgufValue::array(GgufValueType::FLOAT32,
                                       {GgufValue::f32(0), GgufValue::f32(0), GgufValue::f32(0)}));
  files.push_back({"short-scores", scores.bytes(), "tokenizer.ggml.scores has 3 entries"});
  return files;
}

void expect_one_line_error(const test::CommandResult& r, const std::string& path,
                           const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("clchat: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
}

TEST(MalformedCli, InfoAndRunRejectBrokenFiles) {
  test::TempDir dir;
  for (const BrokenFile& f : broken_files()) {
    SCOPED_TRACE(f.name);
    const std::string path = dir.write(f.name + ".gguf", f.bytes);
    expect_one_line_error(test::run_command(test::clchat_binary() + " info -m '" + path + "'"),
                          path, f.phrase);
    expect_one_line_error(
        test::run_command(test::clchat_binary() + " run -m '" + path + "' -p hi -n 1"), path,
        f.phrase);
  }
}

TEST(MalformedCli, MissingFileAndDirectory) {
  test::TempDir dir;
  const std::string missing = dir.file("missing.gguf");
  expect_one_line_error(test::run_command(test::clchat_binary() + " info -m '" + missing + "'"),
                        missing, "cannot open");
  expect_one_line_error(
      test::run_command(test::clchat_binary() + " run -m '" + dir.path() + "' -p hi -n 1"),
      dir.path(), "not a regular file");
}

// The control: the same fixture unbroken is accepted, so the failures above
// are about the files.
TEST(MalformedCli, TheUnbrokenFixtureLoads) {
  test::TempDir dir;
  const std::string path = base().write(dir.file("good.gguf"));
  const test::CommandResult r =
      test::run_command(test::clchat_binary() + " info -m '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("embedding:     32"), std::string::npos) << r.out;
}

// A name that is not UTF-8 is the file's business, not an error: `info --json`
// still prints valid JSON, with U+FFFD for the bad byte.
TEST(MalformedCli, InfoJsonReplacesNonUtf8Names) {
  test::TempDir dir;
  TinyModel m = base();
  m.set_metadata("general.name", GgufValue::str("bad\xff name"));
  const std::string path = m.write(dir.file("bad-name.gguf"));
  const test::CommandResult r =
      test::run_command(test::clchat_binary() + " info --json -m '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"name\": \"bad\xEF\xBF\xBD name\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace clchat
