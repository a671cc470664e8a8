// GGUF reader and writer: metadata of every value type through a file and
// back (v2 and v3), the writer's bytes against a hand-encoded file, the reader
// on hand-encoded files (alignment, tensor offsets), tensors of every type,
// the typed getters and their errors, and the three shared models against
// the facts in models/SOURCE.md and an independent header walk.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "engine/gguf/gguf.h"
#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using test::ByteWriter;
using test::TempDir;
using VT = GgufValueType;

GgufValue uval(VT t, uint64_t v) { return GgufValue{t, v}; }
GgufValue ival(VT t, int64_t v) { return GgufValue{t, v}; }
GgufValue f64val(double v) { return GgufValue{VT::FLOAT64, v}; }

std::unique_ptr<GgufFile> write_and_open(const GgufWriter& w, const TempDir& dir,
                                         const std::string& name = "t.gguf") {
  return GgufFile::open(dir.write(name, w.serialize()));
}

// The error message of `f()`, which must throw GgufError.
template <typename F>
std::string gguf_error(F&& f) {
  try {
    f();
  } catch (const GgufError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-GgufError: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// ---- metadata round trips ------------------------------------------------------

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, EveryScalarTypeRoundTrips) {
  TempDir dir;
  GgufWriter w;
  w.set_version(GetParam());
  w.set("s.u8", uval(VT::UINT8, 250));
  w.set("s.i8", ival(VT::INT8, -100));
  w.set("s.u16", uval(VT::UINT16, 65000));
  w.set("s.i16", ival(VT::INT16, -32000));
  w.set("s.u32", uval(VT::UINT32, 4000000000u));
  w.set("s.i32", ival(VT::INT32, -2000000000));
  w.set("s.u64", uval(VT::UINT64, std::numeric_limits<uint64_t>::max()));
  w.set("s.i64", ival(VT::INT64, std::numeric_limits<int64_t>::min()));
  w.set("s.f32", GgufValue::f32(-0.1f));
  w.set("s.f64", f64val(0.1));
  w.set("s.true", GgufValue::boolean(true));
  w.set("s.false", GgufValue::boolean(false));
  w.set("s.str", GgufValue::str("h\xc3\xa9llo w\xc3\xb6rld"));
  w.set("s.empty", GgufValue::str(""));
  w.set("s.nul", GgufValue::str(std::string("a\0b", 3)));
  const auto f = write_and_open(w, dir);

  EXPECT_EQ(f->version(), GetParam());
  EXPECT_EQ(f->metadata().size(), 15u);
  EXPECT_TRUE(f->tensors().empty());
  struct Expect {
    const char* key;
    VT type;
  };
  for (const Expect& e : {Expect{"s.u8", VT::UINT8},
                          {"s.i8", VT::INT8},
                          {"s.u16", VT::UINT16},
                          {"s.i16", VT::INT16},
                          {"s.u32", VT::UINT32},
                          {"s.i32", VT::INT32},
                          {"s.u64", VT::UINT64},
                          {"s.i64", VT::INT64},
                          {"s.f32", VT::FLOAT32},
                          {"s.f64", VT::FLOAT64},
                          {"s.true", VT::BOOL},
                          {"s.str", VT::STRING}}) {
    const GgufValue* v = f->find(e.key);
    ASSERT_NE(v, nullptr) << e.key;
    EXPECT_EQ(v->type, e.type) << e.key;
  }
  EXPECT_EQ(std::get<uint64_t>(f->find("s.u8")->data), 250u);
  EXPECT_EQ(std::get<int64_t>(f->find("s.i8")->data), -100);
  EXPECT_EQ(std::get<uint64_t>(f->find("s.u16")->data), 65000u);
  EXPECT_EQ(std::get<int64_t>(f->find("s.i16")->data), -32000);
  EXPECT_EQ(std::get<uint64_t>(f->find("s.u32")->data), 4000000000u);
  EXPECT_EQ(std::get<int64_t>(f->find("s.i32")->data), -2000000000);
  EXPECT_EQ(std::get<uint64_t>(f->find("s.u64")->data), 18446744073709551615u);
  EXPECT_EQ(std::get<int64_t>(f->find("s.i64")->data), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<double>(f->find("s.f32")->data), double(-0.1f));
  EXPECT_EQ(std::get<double>(f->find("s.f64")->data), 0.1);
  EXPECT_EQ(std::get<bool>(f->find("s.true")->data), true);
  EXPECT_EQ(std::get<bool>(f->find("s.false")->data), false);
  EXPECT_EQ(f->get_string("s.str"), "h\xc3\xa9llo w\xc3\xb6rld");
  EXPECT_EQ(f->get_string("s.empty"), "");
  EXPECT_EQ(f->get_string("s.nul"), std::string("a\0b", 3));
}

TEST_P(GgufVersions, ArraysRoundTripIncludingNestedAndEmpty) {
  TempDir dir;
  GgufWriter w;
  w.set_version(GetParam());
  w.set("a.u8", GgufValue::array(VT::UINT8, {uval(VT::UINT8, 0), uval(VT::UINT8, 255)}));
  w.set("a.i8", GgufValue::array(VT::INT8, {ival(VT::INT8, -128), ival(VT::INT8, 127)}));
  w.set("a.u16", GgufValue::array(VT::UINT16, {uval(VT::UINT16, 65535)}));
  w.set("a.i16", GgufValue::array(VT::INT16, {ival(VT::INT16, -32768), ival(VT::INT16, 1)}));
  w.set("a.u32", GgufValue::array(VT::UINT32, {GgufValue::u32(1), GgufValue::u32(4294967295u)}));
  w.set("a.i32", GgufValue::array(VT::INT32, {GgufValue::i32(-7), GgufValue::i32(2147483647)}));
  w.set("a.u64", GgufValue::array(VT::UINT64, {GgufValue::u64(1ull << 63)}));
  w.set("a.i64", GgufValue::array(VT::INT64, {ival(VT::INT64, -(1ll << 62))}));
  w.set("a.f32", GgufValue::array(VT::FLOAT32, {GgufValue::f32(1.5f), GgufValue::f32(-2.25f)}));
  w.set("a.f64", GgufValue::array(VT::FLOAT64, {f64val(1e300), f64val(-1e-300)}));
  w.set("a.bool",
        GgufValue::array(VT::BOOL, {GgufValue::boolean(true), GgufValue::boolean(false)}));
  w.set("a.str", GgufValue::array(VT::STRING, {GgufValue::str("x"), GgufValue::str(""),
                                               GgufValue::str("\xc3\xbc")}));
  w.set("a.empty_u32", GgufValue::array(VT::UINT32, {}));
  w.set("a.empty_str", GgufValue::array(VT::STRING, {}));
  // [[1, 2], [], [3]] and [[[true]], []]
  w.set("a.nested",
        GgufValue::array(
            VT::ARRAY,
            {GgufValue::array(VT::INT32, {GgufValue::i32(1), GgufValue::i32(2)}),
             GgufValue::array(VT::INT32, {}), GgufValue::array(VT::INT32, {GgufValue::i32(3)})}));
  w.set("a.nested3",
        GgufValue::array(
            VT::ARRAY,
            {GgufValue::array(VT::ARRAY, {GgufValue::array(VT::BOOL, {GgufValue::boolean(true)})}),
             GgufValue::array(VT::ARRAY, {})}));
  const auto f = write_and_open(w, dir);
  EXPECT_EQ(f->version(), GetParam());
  EXPECT_EQ(f->metadata().size(), 16u);

  auto check = [&](const char* key, VT elem, size_t n) -> const GgufArray& {
    const GgufArray& a = f->get_array(key);
    EXPECT_EQ(f->find(key)->type, VT::ARRAY) << key;
    EXPECT_EQ(a.elem_type, elem) << key;
    EXPECT_EQ(a.items.size(), n) << key;
    for (const auto& item : a.items) EXPECT_EQ(item.type, elem) << key;
    return a;
  };
  EXPECT_EQ(std::get<uint64_t>(check("a.u8", VT::UINT8, 2).items[1].data), 255u);
  EXPECT_EQ(f->get_int_array("a.i8"), (std::vector<int64_t>{-128, 127}));
  check("a.i8", VT::INT8, 2);
  EXPECT_EQ(std::get<uint64_t>(check("a.u16", VT::UINT16, 1).items[0].data), 65535u);
  EXPECT_EQ(f->get_int_array("a.i16"), (std::vector<int64_t>{-32768, 1}));
  check("a.i16", VT::INT16, 2);
  EXPECT_EQ(f->get_int_array("a.u32"), (std::vector<int64_t>{1, 4294967295ll}));
  check("a.u32", VT::UINT32, 2);
  EXPECT_EQ(f->get_int_array("a.i32"), (std::vector<int64_t>{-7, 2147483647}));
  EXPECT_EQ(std::get<uint64_t>(check("a.u64", VT::UINT64, 1).items[0].data), 1ull << 63);
  EXPECT_EQ(f->get_int_array("a.i64"), (std::vector<int64_t>{-(1ll << 62)}));
  EXPECT_EQ(f->get_float_array("a.f32"), (std::vector<float>{1.5f, -2.25f}));
  check("a.f32", VT::FLOAT32, 2);
  const GgufArray& f64 = check("a.f64", VT::FLOAT64, 2);
  EXPECT_EQ(std::get<double>(f64.items[0].data), 1e300);
  EXPECT_EQ(std::get<double>(f64.items[1].data), -1e-300);
  const GgufArray& b = check("a.bool", VT::BOOL, 2);
  EXPECT_TRUE(std::get<bool>(b.items[0].data));
  EXPECT_FALSE(std::get<bool>(b.items[1].data));
  EXPECT_EQ(f->get_string_array("a.str"), (std::vector<std::string>{"x", "", "\xc3\xbc"}));
  check("a.empty_u32", VT::UINT32, 0);
  EXPECT_TRUE(f->get_string_array("a.empty_str").empty());
  check("a.empty_str", VT::STRING, 0);

  const GgufArray& nested = check("a.nested", VT::ARRAY, 3);
  const std::vector<std::vector<int64_t>> want = {{1, 2}, {}, {3}};
  for (size_t i = 0; i < 3; ++i) {
    const auto& inner = std::get<GgufArray>(nested.items[i].data);
    EXPECT_EQ(inner.elem_type, VT::INT32);
    ASSERT_EQ(inner.items.size(), want[i].size());
    for (size_t j = 0; j < want[i].size(); ++j) {
      EXPECT_EQ(std::get<int64_t>(inner.items[j].data), want[i][j]);
    }
  }
  const GgufArray& n3 = check("a.nested3", VT::ARRAY, 2);
  const auto& n3a = std::get<GgufArray>(n3.items[0].data);
  ASSERT_EQ(n3a.elem_type, VT::ARRAY);
  ASSERT_EQ(n3a.items.size(), 1u);
  const auto& n3aa = std::get<GgufArray>(n3a.items[0].data);
  EXPECT_EQ(n3aa.elem_type, VT::BOOL);
  ASSERT_EQ(n3aa.items.size(), 1u);
  EXPECT_TRUE(std::get<bool>(n3aa.items[0].data));
  const auto& n3b = std::get<GgufArray>(n3.items[1].data);
  EXPECT_EQ(n3b.elem_type, VT::ARRAY);
  EXPECT_TRUE(n3b.items.empty());
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersions, ::testing::Values(2u, 3u));

TEST(GgufWriter, SetReplacesAnExistingKeyInPlace) {
  TempDir dir;
  GgufWriter w;
  w.set("k", GgufValue::u32(1));
  w.set("k", GgufValue::str("two"));
  const auto f = write_and_open(w, dir);
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->get_string("k"), "two");
}

// The writer's output, byte for byte, against a file encoded by hand from the
// GGUF spec.
TEST(GgufWriter, BytesMatchAHandEncodedFile) {
  GgufWriter w;
  w.set("a", GgufValue::u32(7));
  w.set("b", GgufValue::str("xy"));
  w.set("c", GgufValue::array(VT::INT16, {ival(VT::INT16, 1), ival(VT::INT16, -2)}));
  const std::vector<uint8_t> w_data = random_bytes(24, 1);  // F32 [2, 3]
  const std::vector<uint8_t> v_data = random_bytes(34, 2);  // Q8_0 [32]
  w.add_tensor("w", GgmlType::F32, {2, 3}, w_data);
  w.add_tensor("v", GgmlType::Q8_0, {32}, v_data);

  ByteWriter e;
  e.header(3, 2, 3);
  e.str("a").u32(4).u32(7);
  e.str("b").u32(8).str("xy");
  e.str("c").u32(9).u32(3).u64(2).i16(1).i16(-2);
  e.str("w").u32(2).u64(2).u64(3).u32(0).u64(0);
  e.str("v").u32(1).u64(32).u32(8).u64(32);  // after 24 bytes padded to 32
  e.pad_to(32).raw(w_data).pad_to(32).raw(v_data).pad_to(32);
  EXPECT_EQ(w.serialize(), e.bytes);
}

TEST(GgufWriter, CustomAlignmentIsWrittenAsTheLastKey) {
  GgufWriter w;
  w.set_version(2);
  w.set_alignment(64);
  w.set("a", GgufValue::boolean(true));
  const std::vector<uint8_t> data = random_bytes(8, 3);
  w.add_tensor("t", GgmlType::F16, {4}, data);
  w.add_tensor("u", GgmlType::F16, {4}, data);

  ByteWriter e;
  e.header(2, 2, 2);
  e.str("a").u32(7).u8(1);
  e.str("general.alignment").u32(4).u32(64);
  e.str("t").u32(1).u64(4).u32(1).u64(0);
  e.str("u").u32(1).u64(4).u32(1).u64(64);
  e.pad_to(64).raw(data).pad_to(64).raw(data).pad_to(64);
  EXPECT_EQ(w.serialize(), e.bytes);
}

TEST(GgufWriter, RejectsTensorDataOfTheWrongSize) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {4}, std::vector<uint8_t>(15)),
               std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", GgmlType::Q4_0, {16}, std::vector<uint8_t>(18)),
               std::invalid_argument);
  EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {}, std::vector<uint8_t>()), std::invalid_argument);
}

// ---- the reader on hand-encoded files ----------------------------------------------

TEST(GgufReader, HandEncodedFileWithAlignment8AndOutOfOrderOffsets) {
  TempDir dir;
  const std::vector<uint8_t> a = random_bytes(12, 10);  // F32 [3]
  const std::vector<uint8_t> b = random_bytes(8, 11);   // F16 [2, 2]
  ByteWriter e;
  e.header(3, 2, 2);
  e.str("general.alignment").u32(4).u32(8);
  e.str("general.architecture").u32(8).str("test");
  e.str("a").u32(1).u64(3).u32(0).u64(16);  // a after b
  e.str("b").u32(2).u64(2).u64(2).u32(1).u64(0);
  e.pad_to(8);
  const uint64_t data_start = e.bytes.size();
  e.raw(b).u64(0).raw(a);  // an unused gap of 8 bytes before a
  const auto f = GgufFile::open(dir.write("h.gguf", e.bytes));
  EXPECT_EQ(f->alignment(), 8u);
  EXPECT_EQ(f->file_size(), e.bytes.size());
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // file order
  EXPECT_EQ(f->tensors()[1].name, "b");
  const GgufTensor* ta = f->find_tensor("a");
  const GgufTensor* tb = f->find_tensor("b");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->offset, 16u);
  EXPECT_EQ(ta->n_bytes, 12u);
  EXPECT_EQ(tb->n_bytes, 8u);
  EXPECT_EQ(tb->dims, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(tb->type, GgmlType::F16);
  EXPECT_EQ(std::memcmp(ta->data, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(tb->data, b.data(), b.size()), 0);
  EXPECT_EQ(std::memcmp(tb->data, e.bytes.data() + data_start, 8), 0);
}

TEST(GgufReader, CustomAlignmentsPlaceTensorDataOnBoundaries) {
  for (uint32_t alignment : {1u, 8u, 64u, 256u, 4096u}) {
    SCOPED_TRACE(alignment);
    TempDir dir;
    GgufWriter w;
    w.set_alignment(alignment);
    w.set("x", GgufValue::str("odd length key value"));
    std::vector<std::vector<uint8_t>> datas;
    for (int i = 0; i < 3; ++i) {
      datas.push_back(random_bytes(4 * size_t(3 + i), 20 + i));
      w.add_tensor("t" + std::to_string(i), GgmlType::F32, {uint64_t(3 + i)}, datas.back());
    }
    const auto f = write_and_open(w, dir);
    EXPECT_EQ(f->alignment(), alignment);
    if (alignment != 32) {
      EXPECT_EQ(f->get_uint("general.alignment"), alignment);
      EXPECT_EQ(f->find("general.alignment")->type, VT::UINT32);
    } else {
      EXPECT_FALSE(f->has("general.alignment"));
    }
    ASSERT_EQ(f->tensors().size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const GgufTensor& t = f->tensors()[size_t(i)];
      EXPECT_EQ(t.offset % alignment, 0u);
      // The mapping starts on a page boundary, so file alignment shows in the address.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u);
      ASSERT_EQ(t.n_bytes, datas[size_t(i)].size());
      EXPECT_EQ(std::memcmp(t.data, datas[size_t(i)].data(), t.n_bytes), 0);
    }
  }
}

TEST(GgufReader, TensorsOfEveryTypeKeepShapeAndBytes) {
  struct Case {
    const char* name;
    GgmlType type;
    std::vector<uint64_t> dims;
    uint64_t n_elements;
    uint64_t n_bytes;  // by hand: blocks x block bytes
    uint64_t n_rows;
  };
  const std::vector<Case> cases = {
      {"f32", GgmlType::F32, {7, 3}, 21, 84, 3},
      {"f16", GgmlType::F16, {5, 2, 3}, 30, 60, 6},
      {"q4_0", GgmlType::Q4_0, {64, 2}, 128, 4 * 18, 2},
      {"q4_1", GgmlType::Q4_1, {32, 1, 2, 2}, 128, 4 * 20, 4},
      {"q8_0", GgmlType::Q8_0, {96, 3}, 288, 9 * 34, 3},
      {"f32_1", GgmlType::F32, {1}, 1, 4, 1},
  };
  for (uint32_t version : {2u, 3u}) {
    SCOPED_TRACE(version);
    TempDir dir;
    GgufWriter w;
    w.set_version(version);
    std::vector<std::vector<uint8_t>> datas;
    uint32_t seed = 100;
    for (const Case& c : cases) {
      datas.push_back(random_bytes(c.n_bytes, seed++));
      w.add_tensor(c.name, c.type, c.dims, datas.back());
    }
    const auto f = write_and_open(w, dir);
    ASSERT_EQ(f->tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SCOPED_TRACE(c.name);
      const GgufTensor* t = f->find_tensor(c.name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(&f->tensors()[i], t);
      EXPECT_EQ(t->type, c.type);
      EXPECT_EQ(t->dims, c.dims);
      EXPECT_EQ(t->n_elements, c.n_elements);
      EXPECT_EQ(t->n_bytes, c.n_bytes);
      EXPECT_EQ(t->n_rows(), c.n_rows);
      EXPECT_EQ(t->ne(0), c.dims[0]);
      EXPECT_EQ(t->ne(3), c.dims.size() > 3 ? c.dims[3] : 1u);
      EXPECT_EQ(t->offset % 32, 0u);
      EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), datas[i]);
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
  }
}

// ---- typed getters ---------------------------------------------------------------------

class GgufGetters : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.set("u8", uval(VT::UINT8, 200));
    w.set("u16", uval(VT::UINT16, 60000));
    w.set("u32", GgufValue::u32(123456));
    w.set("u64", GgufValue::u64(1ull << 63));
    w.set("i32_pos", GgufValue::i32(42));
    w.set("i32_neg", GgufValue::i32(-5));
    w.set("i8_neg", ival(VT::INT8, -1));
    w.set("f32", GgufValue::f32(2.5f));
    w.set("f64", f64val(-3.25));
    w.set("bool", GgufValue::boolean(true));
    w.set("str", GgufValue::str("text"));
    w.set("strs", GgufValue::array(VT::STRING, {GgufValue::str("a"), GgufValue::str("b")}));
    w.set("ints", GgufValue::array(VT::INT32, {GgufValue::i32(-1), GgufValue::i32(2)}));
    w.set("floats", GgufValue::array(VT::FLOAT32, {GgufValue::f32(0.5f)}));
    w.set("big_u64s", GgufValue::array(VT::UINT64, {GgufValue::u64(1ull << 63)}));
    w.set("bools", GgufValue::array(VT::BOOL, {GgufValue::boolean(true)}));
    path_ = dir_.write("getters.gguf", w.serialize());
    file_ = GgufFile::open(path_);
  }
  // Runs f, expects a GgufError naming the file, and returns the message.
  template <typename F>
  std::string error_of(F&& f) {
    const std::string msg = gguf_error(std::forward<F>(f));
    EXPECT_EQ(msg.rfind(path_ + ": ", 0), 0u) << msg;
    return msg;
  }
  TempDir dir_;
  std::string path_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufGetters, UnsignedAcceptsEveryFittingInteger) {
  const GgufFile& f = *file_;
  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_uint("u32"), 123456u);
  EXPECT_EQ(f.get_uint("u64"), 1ull << 63);
  EXPECT_EQ(f.get_uint("i32_pos"), 42u);
  EXPECT_EQ(f.opt_uint("u8"), std::optional<uint64_t>(200));
  EXPECT_EQ(f.opt_uint("nope"), std::nullopt);
  EXPECT_NE(error_of([&] {
              f.get_uint("i32_neg");
            }).find("metadata 'i32_neg' has type int32, expected a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              f.get_uint("str");
            }).find("metadata 'str' has type string, expected a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_uint("f32"); }).find("has type float32"), std::string::npos);
  EXPECT_NE(error_of([&] { f.opt_uint("bool"); }).find("has type bool"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_uint("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
}

TEST_F(GgufGetters, SignedAcceptsIntegersThatFit) {
  const GgufFile& f = *file_;
  EXPECT_EQ(f.get_int("i32_neg"), -5);
  EXPECT_EQ(f.get_int("i8_neg"), -1);
  EXPECT_EQ(f.get_int("u32"), 123456);
  EXPECT_NE(error_of([&] {
              f.get_int("u64");
            }).find("metadata 'u64' has type uint64, expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_int("f64"); }).find("has type float64, expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_int("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
}

TEST_F(GgufGetters, FloatAcceptsAnyNumber) {
  const GgufFile& f = *file_;
  EXPECT_EQ(f.get_float("f32"), 2.5);
  EXPECT_EQ(f.get_float("f64"), -3.25);
  EXPECT_EQ(f.get_float("u32"), 123456.0);
  EXPECT_EQ(f.get_float("i32_neg"), -5.0);
  EXPECT_EQ(f.opt_float("nope"), std::nullopt);
  EXPECT_NE(error_of([&] { f.get_float("str"); }).find("has type string, expected a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.opt_float("bool"); }).find("has type bool, expected a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_float("strs"); }).find("has type array"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_float("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
}

TEST_F(GgufGetters, BoolAndStringAreStrict) {
  const GgufFile& f = *file_;
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.opt_bool("nope"), std::nullopt);
  EXPECT_NE(error_of([&] { f.get_bool("u8"); }).find("'u8' has type uint8, expected bool"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_bool("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
  EXPECT_EQ(f.get_string("str"), "text");
  EXPECT_EQ(f.opt_string("nope"), std::nullopt);
  EXPECT_NE(error_of([&] { f.get_string("u32"); }).find("'u32' has type uint32, expected string"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.opt_string("strs"); }).find("has type array, expected string"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_string("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
}

TEST_F(GgufGetters, ArraysCheckTheirElementType) {
  const GgufFile& f = *file_;
  EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.get_int_array("ints"), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(f.get_float_array("ints"), (std::vector<float>{-1.0f, 2.0f}));
  EXPECT_EQ(f.get_float_array("floats"), (std::vector<float>{0.5f}));
  EXPECT_EQ(f.get_array("bools").items.size(), 1u);
  EXPECT_NE(error_of([&] { f.get_array("str"); }).find("has type string, expected array"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_array("nope"); }).find("missing metadata key 'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              f.get_string_array("ints");
            }).find("metadata 'ints' is an array of int32, expected strings"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_int_array("floats"); }).find("is not an array of integers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_int_array("big_u64s"); }).find("is not an array of integers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_float_array("strs"); }).find("is not an array of numbers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_float_array("bools"); }).find("is not an array of numbers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_string_array("u8"); }).find("expected array"), std::string::npos);
}

TEST(GgufReader, OpenErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("does-not-exist.gguf");
  std::string msg = gguf_error([&] { GgufFile::open(missing); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open", 0), 0u) << msg;
  msg = gguf_error([&] { GgufFile::open(dir.path()); });
  EXPECT_EQ(msg, dir.path() + ": a directory, not a regular file");
}

TEST(GgufValueTypeName, NamesEveryType) {
  EXPECT_STREQ(gguf_value_type_name(VT::UINT8), "uint8");
  EXPECT_STREQ(gguf_value_type_name(VT::INT16), "int16");
  EXPECT_STREQ(gguf_value_type_name(VT::BOOL), "bool");
  EXPECT_STREQ(gguf_value_type_name(VT::ARRAY), "array");
  EXPECT_STREQ(gguf_value_type_name(VT::FLOAT64), "float64");
  EXPECT_STREQ(gguf_value_type_name(GgufValueType(13)), "unknown");
}

// ---- the shared models -------------------------------------------------------------

std::map<GgmlType, int> count_types(const GgufFile& f) {
  std::map<GgmlType, int> n;
  for (const auto& t : f.tensors()) ++n[t.type];
  return n;
}

// Every tensor's name, shape, type, offset and bytes as GgufFile reports them,
// against an independent walk over the file's bytes.
void expect_matches_independent_walk(const GgufFile& f, const std::vector<uint8_t>& bytes) {
  const test::GgufLayout layout = test::parse_gguf_layout(bytes);
  EXPECT_EQ(layout.version, f.version());
  EXPECT_EQ(layout.kvs.size(), f.metadata().size());
  for (const auto& kv : layout.kvs) {
    const GgufValue* v = f.find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(uint32_t(v->type), kv.type) << kv.key;
  }
  ASSERT_EQ(layout.tensors.size(), f.tensors().size());
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const auto& want = layout.tensors[i];
    const GgufTensor& t = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(t.name, want.name);
    EXPECT_EQ(t.dims, want.dims);
    EXPECT_EQ(uint32_t(t.type), want.type);
    EXPECT_EQ(t.offset, want.offset);
    ASSERT_LE(layout.data_start + t.offset + t.n_bytes, bytes.size());
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + layout.data_start + t.offset, t.n_bytes), 0);
  }
}

TEST(GgufSharedModels, SmolLM2HeaderMatchesSourceMd) {
  const std::string path = test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->file_size(), 98362432u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->metadata().size(), 33u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(f->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f->get_uint("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(f->get_uint("llama.rope.dimension_count"), 64u);
  EXPECT_EQ(f->get_uint("llama.context_length"), 8192u);
  EXPECT_EQ(f->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f->get_array("tokenizer.ggml.tokens").items.size(), 49152u);
  EXPECT_EQ(f->get_array("tokenizer.ggml.merges").items.size(), 48900u);
  EXPECT_EQ(f->get_uint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f->get_uint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(f->get_uint("tokenizer.ggml.padding_token_id"), 2u);
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(f->has("tokenizer.chat_template"));
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(tokens[1], "<|im_start|>");
  EXPECT_EQ(tokens[2], "<|im_end|>");

  const GgufTensor* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::Q8_0);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(embd->n_bytes, 49152u * 18 * 34);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  const auto types = count_types(*f);
  EXPECT_EQ(types.at(GgmlType::Q4_1), 210);
  EXPECT_EQ(types.at(GgmlType::F32), 61);
  EXPECT_EQ(types.at(GgmlType::Q8_0), 1);
  const GgufTensor* down = f->find_tensor("blk.29.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->type, GgmlType::Q4_1);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{1536, 576}));
  EXPECT_EQ(down->n_bytes, 576u * 48 * 20);
  const GgufTensor* k = f->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims, (std::vector<uint64_t>{576, 192}));

  expect_matches_independent_walk(*f, test::read_bytes(path));
}

TEST(GgufSharedModels, Stories260KHeaderMatchesSourceMd) {
  const std::string path = test::shared_file("models/stories260K.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->file_size(), 1185376u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(f->get_uint("llama.block_count"), 5u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count"), 8u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f->get_uint("llama.feed_forward_length"), 172u);
  EXPECT_EQ(f->get_uint("llama.rope.dimension_count"), 8u);
  EXPECT_EQ(f->get_uint("llama.context_length"), 2048u);
  EXPECT_FALSE(f->has("llama.rope.freq_base"));
  EXPECT_FALSE(f->has("general.file_type"));
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_array("tokenizer.ggml.tokens").items.size(), 512u);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores").size(), 512u);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")[3 + 0x41], "<0x41>");
  EXPECT_EQ(count_types(*f), (std::map<GgmlType, int>{{GgmlType::F32, 48}}));
  const std::map<std::string, std::vector<uint64_t>> shapes = {
      {"token_embd.weight", {64, 512}},       {"output.weight", {64, 512}},
      {"output_norm.weight", {64}},           {"blk.0.attn_q.weight", {64, 64}},
      {"blk.1.attn_k.weight", {64, 32}},      {"blk.2.attn_v.weight", {64, 32}},
      {"blk.3.attn_output.weight", {64, 64}}, {"blk.4.ffn_gate.weight", {64, 172}},
      {"blk.4.ffn_up.weight", {64, 172}},     {"blk.4.ffn_down.weight", {172, 64}},
      {"blk.0.attn_norm.weight", {64}},       {"blk.4.ffn_norm.weight", {64}}};
  for (const auto& [name, dims] : shapes) {
    const GgufTensor* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, dims) << name;
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    EXPECT_EQ(t->n_bytes, 4 * n) << name;
  }
  expect_matches_independent_walk(*f, test::read_bytes(path));
}

TEST(GgufSharedModels, TinyRandomHeaderMatchesSourceMd) {
  const std::string path = test::shared_file("models/llama-2-tiny-random.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->file_size(), 1750560u);
  EXPECT_EQ(f->tensors().size(), 12u);
  EXPECT_EQ(f->metadata().size(), 18u);
  EXPECT_EQ(f->get_uint("general.file_type"), 1u);
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 8u);
  EXPECT_EQ(f->get_uint("llama.block_count"), 1u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count"), 2u);
  EXPECT_EQ(f->get_uint("llama.feed_forward_length"), 32u);
  EXPECT_EQ(f->get_uint("llama.rope.dimension_count"), 4u);
  EXPECT_EQ(f->get_uint("llama.context_length"), 4096u);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_array("tokenizer.ggml.tokens").items.size(), 32000u);
  EXPECT_EQ(count_types(*f), (std::map<GgmlType, int>{{GgmlType::F16, 9}, {GgmlType::F32, 3}}));
  const GgufTensor* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::F16);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{8, 32000}));
  EXPECT_EQ(embd->n_bytes, 8u * 32000 * 2);
  expect_matches_independent_walk(*f, test::read_bytes(path));
}

// The fixture helper's own promises, since other tests build on it.
TEST(GgufFixtures, TinyModelFileMatchesItsDescription) {
  TempDir dir;
  test::TinyModelSpec spec;
  spec.weight_type = GgmlType::Q4_1;
  spec.embd_type = GgmlType::Q8_0;
  spec.alignment = 64;
  spec.version = 2;
  const test::TinyModel m = test::make_tiny_model(spec);
  const auto f = GgufFile::open(m.write(dir.file("tiny.gguf")));
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->metadata().size(), m.metadata.size() + 1);  // + general.alignment
  ASSERT_EQ(f->tensors().size(), m.tensors.size());
  EXPECT_EQ(m.tensors.size(), 3u + 2u * 9u);
  for (const auto& want : m.tensors) {
    const GgufTensor* t = f->find_tensor(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->type, want.type);
    EXPECT_EQ(t->dims, want.dims);
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), want.data);
    uint64_t n = 1;
    for (uint64_t d : want.dims) n *= d;
    EXPECT_EQ(want.values.size(), n);
  }
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->type, GgmlType::Q4_1);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_norm.weight")->type, GgmlType::F32);
  EXPECT_EQ(f->get_uint("general.file_type"), 3u);
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 320u);
  EXPECT_EQ(tokens[3 + ' '], "\xc4\xa0");  // 'Ġ' U+0120
  EXPECT_EQ(tokens[3 + 'a'], "a");
  EXPECT_EQ(tokens[3 + 0x0a], "\xc4\x8a");  // 'Ċ' U+010A
  EXPECT_EQ(tokens[3 + 0xad], "\xc5\x83");  // soft hyphen -> U+0143
  EXPECT_EQ(tokens[3 + 0xff], "\xc3\xbf");  // 'ÿ' stands for itself
  EXPECT_EQ(tokens[259], "\xc4\xa0t");      // first merge "Ġ t"
  const auto merges = f->get_string_array("tokenizer.ggml.merges");
  EXPECT_EQ(merges.size(), 320u - 259u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 320u);

  // A vocabulary cut below the byte tokens keeps no merges.
  EXPECT_TRUE(test::make_tiny_vocab(100).merges.empty());
  EXPECT_EQ(test::make_tiny_vocab(100).tokens.size(), 100u);
  EXPECT_EQ(test::make_tiny_vocab(261).merges.size(), 2u);
  EXPECT_EQ(test::make_tiny_vocab(400).tokens[399], "<|reserved_79|>");
}

}  // namespace
}  // namespace clchat
