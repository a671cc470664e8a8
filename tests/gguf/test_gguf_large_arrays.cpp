// Metadata arrays and memory: an array the engine does not read is skipped
// over once it would take the file's kept elements past
// k_gguf_max_other_array_items (issue 21: a 10^8-element uint8 array made
// `info` use 4.7 GB), while the tokenizer's arrays are always read whole and
// checked against the file size and k_gguf_max_vocab_items. The assertions
// are on what the parser stored, not on memory use or time.
#include <gtest/gtest.h>

#include "engine/gguf/gguf.h"
#include "tests/gguf_fixtures.h"

namespace clchat {
namespace {

using test::ByteWriter;
using test::TempDir;
using VT = GgufValueType;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const GgufError& e) {
    return e.what();
  }
  return "";
}

// A file of metadata only; `kvs` writes n_kv keys after the header.
std::unique_ptr<GgufFile> open_kvs(const TempDir& dir, uint64_t n_kv,
                                   const std::function<void(ByteWriter&)>& kvs) {
  ByteWriter w;
  w.header(3, 0, n_kv);
  kvs(w);
  return GgufFile::open(dir.write("t.gguf", w.bytes));
}

void u8_array(ByteWriter& w, const std::string& key, uint64_t n) {
  w.str(key).u32(uint32_t(VT::ARRAY)).u32(uint32_t(VT::UINT8)).u64(n);
  w.raw(std::vector<uint8_t>(n, 7));
}

const GgufArray& stored_array(const GgufFile& f, const std::string& key) {
  return std::get<GgufArray>(f.find(key)->data);
}

TEST(GgufLargeArrays, AHugeUnusedArrayIsSkippedNotStored) {
  const TempDir dir;
  const uint64_t n = 4'000'000;
  const auto f = open_kvs(dir, 3, [&](ByteWriter& w) {
    w.str("general.name").u32(uint32_t(VT::STRING)).str("before");
    u8_array(w, "extra.blob", n);
    w.str("general.after").u32(uint32_t(VT::UINT32)).u32(42);
  });
  const GgufArray& blob = stored_array(*f, "extra.blob");
  EXPECT_EQ(blob.elem_type, VT::UINT8);
  EXPECT_TRUE(blob.items.empty());
  EXPECT_EQ(blob.n_unread, n);
  // The keys around it are read from the right places.
  EXPECT_EQ(f->get_string("general.name"), "before");
  EXPECT_EQ(f->get_uint("general.after"), 42u);
  EXPECT_NE(error_of([&] { f->get_array("extra.blob"); }).find("was not read"), std::string::npos);
}

TEST(GgufLargeArrays, SkippingWalksStringsAndNestedArrays) {
  const TempDir dir;
  const uint64_t n = k_gguf_max_other_array_items + 1;
  const auto f = open_kvs(dir, 3, [&](ByteWriter& w) {
    w.str("extra.strings").u32(uint32_t(VT::ARRAY)).u32(uint32_t(VT::STRING)).u64(n);
    for (uint64_t i = 0; i < n; ++i) w.str(i % 2 ? "ab" : "");
    // One element, itself an array over the budget.
    w.str("extra.nested").u32(uint32_t(VT::ARRAY)).u32(uint32_t(VT::ARRAY)).u64(1);
    w.u32(uint32_t(VT::INT16)).u64(n);
    for (uint64_t i = 0; i < n; ++i) w.i16(-1);
    w.str("general.after").u32(uint32_t(VT::UINT32)).u32(42);
  });
  EXPECT_EQ(stored_array(*f, "extra.strings").n_unread, n);
  const GgufArray& nested = stored_array(*f, "extra.nested");
  ASSERT_EQ(nested.items.size(), 1u);
  EXPECT_EQ(std::get<GgufArray>(nested.items[0].data).n_unread, n);
  EXPECT_EQ(f->get_uint("general.after"), 42u);
}

// The budget is per file: arrays are kept until it is spent.
TEST(GgufLargeArrays, SmallUnusedArraysAreKeptUntilTheBudgetIsSpent) {
  const TempDir dir;
  const uint64_t half = k_gguf_max_other_array_items / 2;
  const auto f = open_kvs(dir, 3, [&](ByteWriter& w) {
    u8_array(w, "a.first", half);
    u8_array(w, "a.second", half);
    u8_array(w, "a.third", 1);
  });
  EXPECT_EQ(f->get_int_array("a.first").size(), half);
  EXPECT_EQ(f->get_int_array("a.second").size(), half);
  EXPECT_EQ(stored_array(*f, "a.third").n_unread, 1u);
}

TEST(GgufLargeArrays, TokenizerArraysAreReadWholeOverTheBudget) {
  const TempDir dir;
  const uint64_t n = k_gguf_max_other_array_items * 2;
  const auto f =
      open_kvs(dir, 1, [&](ByteWriter& w) { u8_array(w, "tokenizer.ggml.token_type", n); });
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), n);
}

TEST(GgufLargeArrays, ATokenizerArrayLargerThanTheFileIsOneError) {
  const TempDir dir;
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.merges",
                          "tokenizer.ggml.token_type"}) {
    SCOPED_TRACE(key);
    const std::string msg = error_of([&] {
      open_kvs(dir, 1, [&](ByteWriter& w) {
        w.str(key).u32(uint32_t(VT::ARRAY)).u32(uint32_t(VT::STRING)).u64(100'000'000);
        w.str("a").str("b");
      });
    });
    EXPECT_NE(msg.find(std::string("metadata '") + key +
                       "': array length 100000000 exceeds the file size"),
              std::string::npos)
        << msg;
  }
}

TEST(GgufLargeArrays, ATokenizerArrayOverTheCapIsOneError) {
  const TempDir dir;
  const uint64_t n = k_gguf_max_vocab_items + 1;
  const std::string msg = error_of([&] {
    open_kvs(dir, 1, [&](ByteWriter& w) { u8_array(w, "tokenizer.ggml.token_type", n); });
  });
  EXPECT_NE(msg.find("'tokenizer.ggml.token_type': array length " + std::to_string(n) +
                     " is over the " + std::to_string(k_gguf_max_vocab_items)),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace clchat
