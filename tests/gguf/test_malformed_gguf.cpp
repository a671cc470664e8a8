// A corpus of broken model files. Each one is made from a valid fixture (or
// from stories260K.gguf's bytes) by cutting, patching one header field found
// with the independent layout walker, or editing the fixture's metadata and
// tensors, and each must make load_model() throw one GgufError whose message
// starts with the file's path, fits on one line and names the problem (the
// phrase is checked per case). Random bytes and bit flips may also load; then
// the loaded model must be usable (every tensor row decodes) and nothing may
// crash: run this under ASan/UBSan (CLCHAT_SANITIZE=ON).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/gguf/quant.h"
#include "engine/model/model.h"
#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using test::GgufLayout;
using test::patch_u32;
using test::patch_u64;
using test::TempDir;
using test::TinyModel;
using Bytes = std::vector<uint8_t>;

// ---- loading and checking ------------------------------------------------------

// Touches every tensor's first and last row, so ASan sees any bad pointer.
void exercise(const Model& m) {
  for (const GgufTensor& t : m.file->tensors()) {
    ASSERT_LE(t.offset + t.n_bytes, m.file->file_size()) << t.name;
    const uint64_t row_bytes = *ggml_row_bytes(t.type, t.dims[0]);
    std::vector<float> row(t.dims[0]);
    dequantize_row(t.type, t.data, row.data(), t.dims[0]);
    dequantize_row(t.type, t.data + (t.n_rows() - 1) * row_bytes, row.data(), t.dims[0]);
  }
  EXPECT_FALSE(describe_weight_type(m).empty());
}

struct Outcome {
  bool loaded = false;
  std::string error;  // GgufError::what() when not loaded
};

// Writes `bytes` to dir/name and loads it; any exception but GgufError fails the test.
Outcome try_load(const TempDir& dir, const std::string& name, const Bytes& bytes) {
  const std::string path = dir.write(name, bytes);
  Outcome out;
  try {
    const Model m = load_model(path);
    out.loaded = true;
    exercise(m);
  } catch (const GgufError& e) {
    out.error = e.what();
    EXPECT_EQ(out.error.rfind(path + ": ", 0), 0u)
        << "message must start with the path: " << out.error;
    EXPECT_EQ(out.error.find('\n'), std::string::npos) << "one line: " << out.error;
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": threw a non-GgufError: " << e.what();
  }
  return out;
}

// `bytes` must be rejected with a message containing one of `phrases`.
void expect_rejected(const TempDir& dir, const std::string& name, const Bytes& bytes,
                     std::initializer_list<std::string_view> phrases) {
  SCOPED_TRACE(name);
  const Outcome o = try_load(dir, name + ".gguf", bytes);
  ASSERT_FALSE(o.loaded) << "loaded, but should fail with \"" << *phrases.begin() << "\"";
  const bool found = std::any_of(phrases.begin(), phrases.end(), [&](std::string_view p) {
    return o.error.find(p) != std::string::npos;
  });
  EXPECT_TRUE(found) << "message: " << o.error << "\n  expected: " << *phrases.begin();
}

void expect_rejected(const TempDir& dir, const std::string& name, const TinyModel& m,
                     std::initializer_list<std::string_view> phrases) {
  expect_rejected(dir, name, m.bytes(), phrases);
}

// ---- the valid bases ---------------------------------------------------------------

test::TinyModelSpec base_spec() {
  test::TinyModelSpec s;
  s.n_embd = 32;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;  // head_dim 8, n_embd_kv 16
  s.n_ff = 64;
  s.n_vocab = 280;
  s.weight_type = GgmlType::Q8_0;
  s.seed = 42;
  return s;
}

const TinyModel& base_model() {
  static const TinyModel m = test::make_tiny_model(base_spec());
  return m;
}

const Bytes& base_bytes() {
  static const Bytes b = base_model().bytes();
  return b;
}

const GgufLayout& base_layout() {
  static const GgufLayout l = test::parse_gguf_layout(base_bytes());
  return l;
}

const Bytes& stories_bytes() {
  static const Bytes b = test::read_bytes(test::shared_file("models/stories260K.gguf"));
  return b;
}

// Where the last tensor's data ends: a file cut at or after this still loads.
uint64_t data_end(const Bytes& bytes, const GgufLayout& l) {
  uint64_t end = 0;
  for (const auto& t : l.tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.dims) n *= d;
    const GgmlType type = *ggml_type_from_id(t.type);
    const uint64_t bytes_per_row = *ggml_row_bytes(type, t.dims[0]);
    end = std::max(end, l.data_start + t.offset + n / t.dims[0] * bytes_per_row);
  }
  EXPECT_LE(end, bytes.size());
  return end;
}

Bytes patched_u32(Bytes b, uint64_t at, uint32_t v) {
  patch_u32(b, at, v);
  return b;
}
Bytes patched_u64(Bytes b, uint64_t at, uint64_t v) {
  patch_u64(b, at, v);
  return b;
}
Bytes cut(const Bytes& b, uint64_t n) { return Bytes(b.begin(), b.begin() + int64_t(n)); }

TEST(MalformedBase, BasesAreValid) {
  TempDir dir;
  EXPECT_TRUE(try_load(dir, "base.gguf", base_bytes()).loaded);
  EXPECT_TRUE(try_load(dir, "stories.gguf", stories_bytes()).loaded);
  // The layout walker agrees with the reader about where things are.
  EXPECT_EQ(base_layout().tensors.size(), base_model().tensors.size());
  EXPECT_EQ(base_layout().kvs.size(), base_model().metadata.size());
  EXPECT_EQ(data_end(base_bytes(), base_layout()) % 32, 0u);
}

// ---- not GGUF at all ------------------------------------------------------------------

TEST(MalformedHeader, EmptyAndBadMagic) {
  TempDir dir;
  expect_rejected(dir, "empty", Bytes{}, {"not a GGUF file (bad magic)"});
  Bytes b = base_bytes();
  for (const char* magic : {"gguf", "GGML", "GGJT", "FUGG", "\x00\x00\x00\x00", "GGU\xff"}) {
    std::copy(magic, magic + 4, b.begin());
    expect_rejected(dir, "magic", b, {"not a GGUF file (bad magic)"});
  }
  expect_rejected(dir, "three-bytes", Bytes{'G', 'G', 'U'}, {"not a GGUF file (bad magic)"});
  expect_rejected(dir, "text", Bytes{'h', 'e', 'l', 'l', 'o', '\n'}, {"bad magic"});
}

TEST(MalformedHeader, UnsupportedVersions) {
  TempDir dir;
  const auto at = GgufLayout::version_at;
  expect_rejected(dir, "v1", patched_u32(base_bytes(), at, 1), {"GGUF version 1 is not supported"});
  expect_rejected(dir, "v0", patched_u32(base_bytes(), at, 0), {"unsupported GGUF version 0"});
  expect_rejected(dir, "v4", patched_u32(base_bytes(), at, 4), {"unsupported GGUF version 4"});
  expect_rejected(dir, "vmax", patched_u32(base_bytes(), at, 0xFFFFFFFFu),
                  {"unsupported GGUF version 4294967295"});
  // A big-endian v3 file reads as version 0x03000000.
  expect_rejected(dir, "v3-big-endian", patched_u32(base_bytes(), at, 0x03000000u),
                  {"unsupported GGUF version 50331648"});
}

// ---- truncation ---------------------------------------------------------------------

// What the reader must say about the base file cut to `t` bytes ("" = loads).
// The order of the checks is the reader's documented one: fixed header,
// counts against the bytes left, then each field as it is read.
std::string truncation_phrase(const Bytes& bytes, const GgufLayout& l, uint64_t t) {
  if (t < 4) return "bad magic";
  if (t < 8) return "truncated while reading version";
  if (t < 16) return "truncated while reading tensor count";
  if (t < 24) return "truncated while reading metadata count";
  const uint64_t n_tensors = test::load_u64(bytes, GgufLayout::n_tensors_at);
  const uint64_t n_kv = test::load_u64(bytes, GgufLayout::n_kv_at);
  if (n_kv > (t - 24) / 13) return "metadata count " + std::to_string(n_kv) + " exceeds";
  if (n_tensors > (t - 24) / 24) return "tensor count " + std::to_string(n_tensors) + " exceeds";
  if (t < l.header_end) {
    for (const auto& kv : l.kvs) {
      const uint64_t items_at = kv.array_count_at + 8;
      if (kv.type != 9 || t < items_at || t >= kv.end) continue;
      const uint64_t count = test::load_u64(bytes, kv.array_count_at);
      const uint32_t elem = test::load_u32(bytes, kv.array_type_at);
      // Smallest encoding of one element (GGUF spec): u8/i8/bool 1, u16/i16 2,
      // u32/i32/f32 4, u64/i64/f64 and a string's length 8, an array's header 12.
      const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
      const uint64_t min_size = sizes[elem];
      if (count > (t - items_at) / min_size) {
        return "metadata '" + kv.key + "': array length " + std::to_string(count) +
               " exceeds the file size";
      }
    }
    return "truncated while reading";
  }
  if (t < data_end(bytes, l)) return "is not within the file bounds";
  return "";
}

TEST(MalformedTruncated, AtEveryHeaderOffsetAndThroughTheData) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const uint64_t end = data_end(b, l);
  std::vector<uint64_t> offsets;
  for (uint64_t t = 0; t <= l.data_start + 40; ++t) offsets.push_back(t);
  for (uint64_t t = l.data_start; t < b.size(); t += (b.size() - l.data_start) / 300 + 1) {
    offsets.push_back(t);
  }
  for (const auto& t : l.tensors) {
    for (int64_t d : {-1, 0, 1}) offsets.push_back(uint64_t(int64_t(l.data_start + t.offset) + d));
  }
  offsets.insert(offsets.end(), {end - 1, end, b.size() - 1});
  int n_rejected = 0, n_loaded = 0;
  for (uint64_t t : offsets) {
    const std::string want = truncation_phrase(b, l, t);
    SCOPED_TRACE("cut at " + std::to_string(t) + " of " + std::to_string(b.size()));
    if (want.empty()) {
      EXPECT_TRUE(try_load(dir, "cut.gguf", cut(b, t)).loaded);
      ++n_loaded;
    } else {
      expect_rejected(dir, "cut-" + std::to_string(t), cut(b, t), {want});
      ++n_rejected;
    }
  }
  EXPECT_GT(n_rejected, 1000);
  EXPECT_GT(n_loaded, 0);  // the trailing padding is not needed
}

TEST(MalformedTruncated, Stories260K) {
  TempDir dir;
  const Bytes& b = stories_bytes();
  const GgufLayout l = test::parse_gguf_layout(b);
  const uint64_t end = data_end(b, l);
  std::mt19937 rng(260);
  std::vector<uint64_t> offsets = {
      0, 3, 4, 7, 8, 23, 24, l.header_end - 1, l.header_end, l.data_start, end - 1};
  for (int i = 0; i < 300; ++i) offsets.push_back(rng() % l.header_end);
  for (int i = 0; i < 100; ++i) offsets.push_back(l.header_end + rng() % (end - l.header_end));
  for (uint64_t t : offsets) {
    expect_rejected(dir, "stories-cut-" + std::to_string(t), cut(b, t),
                    {truncation_phrase(b, l, t)});
  }
}

// ---- counts and lengths --------------------------------------------------------------

TEST(MalformedCounts, HugeCountsAreRejectedBeforeAllocation) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  for (uint64_t n : {~uint64_t{0}, uint64_t{1} << 40, uint64_t(b.size())}) {
    const std::string s = std::to_string(n);
    expect_rejected(dir, "n-tensors-" + s, patched_u64(b, GgufLayout::n_tensors_at, n),
                    {"tensor count " + s + " exceeds the file size"});
    expect_rejected(dir, "n-kv-" + s, patched_u64(b, GgufLayout::n_kv_at, n),
                    {"metadata count " + s + " exceeds the file size"});
  }
  // One more than there is: the next field is misread; any specific error will do.
  expect_rejected(dir, "n-tensors-plus-1",
                  patched_u64(b, GgufLayout::n_tensors_at, l.tensors.size() + 1),
                  {"truncated while reading", "not within the file bounds", "implausible",
                   "dimensions", "unsupported type", "zero dimension", "empty name", "not aligned",
                   "overflow", "not a multiple", "not valid UTF-8"});
  expect_rejected(dir, "n-kv-plus-1", patched_u64(b, GgufLayout::n_kv_at, l.kvs.size() + 1),
                  {"unknown value type", "truncated while reading", "implausible",
                   "exceeds the file size", "not valid UTF-8", "bool value"});

  const auto& tokens = l.kv("tokenizer.ggml.tokens");
  const uint64_t left = b.size() - (tokens.array_count_at + 8);
  for (uint64_t n : {~uint64_t{0}, uint64_t{1} << 40, left / 8 + 1}) {
    expect_rejected(dir, "array-count", patched_u64(b, tokens.array_count_at, n),
                    {"metadata 'tokenizer.ggml.tokens': array length " + std::to_string(n) +
                     " exceeds the file size"});
  }
  const auto& types = l.kv("tokenizer.ggml.token_type");  // int32: 4 bytes each
  const uint64_t types_left = b.size() - (types.array_count_at + 8);
  expect_rejected(dir, "int-array-count", patched_u64(b, types.array_count_at, types_left / 4 + 1),
                  {"'tokenizer.ggml.token_type': array length"});
}

TEST(MalformedCounts, HugeStringLengths) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const uint64_t key_at = l.kv("general.name").key_len_at;
  for (uint64_t n : {~uint64_t{0}, (uint64_t{1} << 30) + 1, uint64_t{1} << 40}) {
    expect_rejected(dir, "key-len", patched_u64(b, key_at, n),
                    {"metadata key: string length " + std::to_string(n) + " at offset " +
                     std::to_string(key_at) + " is implausible"});
  }
  // Plausible but longer than the file.
  expect_rejected(dir, "key-len-1g", patched_u64(b, key_at, uint64_t{1} << 30),
                  {"truncated while reading metadata key at offset " + std::to_string(key_at + 8) +
                   " (needs 1073741824 bytes"});
  const auto& arch = l.kv("general.architecture");
  expect_rejected(dir, "value-len", patched_u64(b, arch.value_at, ~uint64_t{0}),
                  {"string value: string length 18446744073709551615"});
  expect_rejected(dir, "value-len-file", patched_u64(b, arch.value_at, b.size()),
                  {"truncated while reading string value"});
  const auto& tokens = l.kv("tokenizer.ggml.tokens");
  expect_rejected(dir, "token-len", patched_u64(b, tokens.array_count_at + 8, uint64_t{1} << 35),
                  {"string value: string length 34359738368"});
  const uint64_t name_at = l.tensors[3].name_len_at;
  expect_rejected(dir, "tensor-name-len", patched_u64(b, name_at, uint64_t{1} << 62),
                  {"tensor name: string length 4611686018427387904"});
  expect_rejected(dir, "tensor-name-len-file", patched_u64(b, name_at, b.size()),
                  {"truncated while reading tensor name"});
}

// ---- tensor infos --------------------------------------------------------------------

TEST(MalformedTensorInfo, DimensionsAndTypes) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const auto& q = l.tensor("blk.0.attn_q.weight");  // Q8_0 [32, 32]
  ASSERT_EQ(q.dims.size(), 2u);
  ASSERT_EQ(q.type, 8u);
  const std::string name = "tensor 'blk.0.attn_q.weight'";

  // Products that overflow uint64 or exceed 2^48 elements.
  auto dims = [&](uint64_t d0, uint64_t d1) {
    return patched_u64(patched_u64(b, q.dim_at[0], d0), q.dim_at[1], d1);
  };
  expect_rejected(dir, "dims-2^32x2^32", dims(uint64_t{1} << 32, uint64_t{1} << 32),
                  {name + " dimensions overflow"});
  expect_rejected(dir, "dims-maxx2", dims(~uint64_t{0} - 31, 2), {name + " dimensions overflow"});
  expect_rejected(dir, "dims-2^40x2^9", dims(uint64_t{1} << 40, uint64_t{1} << 9),
                  {name + " dimensions overflow"});
  // Large but representable: rejected by the file bounds, not allocated.
  // 2^45 values a row = 2^40 blocks of 34 bytes; 2 rows = 68 * 2^40 bytes.
  expect_rejected(dir, "dims-2^45x2", dims(uint64_t{1} << 45, 2),
                  {name + " data (offset " + std::to_string(q.offset) + ", 74766790688768 bytes)" +
                   " is not within the file bounds"});
  expect_rejected(dir, "dim0-zero", dims(0, 32), {name + " has a zero dimension"});
  expect_rejected(dir, "dim1-zero", dims(32, 0), {name + " has a zero dimension"});
  expect_rejected(dir, "row-not-blocks", dims(48, 32),
                  {name + " row length 48 is not a multiple of the Q8_0 block size"});

  for (uint32_t n : {0u, 5u, 64u, 0xFFFFFFFFu}) {
    expect_rejected(dir, "n-dims-" + std::to_string(n), patched_u32(b, q.n_dims_at, n),
                    {name + " has " + std::to_string(n) + " dimensions (1..4 supported)"});
  }

  struct TypeCase {
    uint32_t id;
    const char* phrase;
  };
  for (const TypeCase& c : {TypeCase{16, "IQ2_XXS (16)"},
                            {9, "Q8_1 (9)"},
                            {4, "Q4_2 (4)"},
                            {15, "Q8_K (15)"},
                            {29, "IQ1_M (29)"},
                            {31, "unknown (31)"},
                            {0xFFFFFFFFu, "unknown (4294967295)"}}) {
    expect_rejected(dir, "type-" + std::to_string(c.id), patched_u32(b, q.type_at, c.id),
                    {name + " has unsupported type " + c.phrase +
                     "; supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, "
                     "Q6_K, IQ4_NL, IQ4_XS, BF16"});
  }
  // A supported but different type changes the data size and the shape check passes:
  // F32 [32, 32] is 4096 bytes, more than fits before the file's end for the last tensor.
  const auto& last = l.tensors.back();
  expect_rejected(dir, "type-grows-past-end", patched_u32(b, last.type_at, 0),
                  {"tensor '" + last.name + "' data", "is not within the file bounds"});
}

TEST(MalformedTensorInfo, Offsets) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const auto& t = l.tensors[2];
  const std::string name = "tensor '" + t.name + "'";
  for (uint64_t off : {t.offset + 1, t.offset + 16, t.offset + 31, uint64_t{7}, ~uint64_t{0}}) {
    expect_rejected(dir, "misaligned", patched_u64(b, t.offset_at, off),
                    {name + " offset " + std::to_string(off) + " is not aligned to 32"});
  }
  const uint64_t data_size = b.size() - l.data_start;
  for (uint64_t off : {data_size, data_size + 32 * 1000, ~uint64_t{31}, uint64_t{1} << 63,
                       (data_size - 1) / 32 * 32}) {
    expect_rejected(dir, "past-end", patched_u64(b, t.offset_at, off),
                    {name + " data (offset " + std::to_string(off) + ",",
                     "is not within the file bounds; the model is corrupted or incomplete"});
  }
  // The same offset in a file aligned to 64.
  test::TinyModelSpec spec = base_spec();
  spec.alignment = 64;
  const Bytes b64 = test::make_tiny_model(spec).bytes();
  const GgufLayout l64 = test::parse_gguf_layout(b64);
  const auto& t64 = l64.tensors[1];
  expect_rejected(dir, "misaligned-64", patched_u64(b64, t64.offset_at, t64.offset + 32),
                  {"offset " + std::to_string(t64.offset + 32) + " is not aligned to 64"});
}

TEST(MalformedTensorInfo, DuplicateAndEmptyNames) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  // Rename blk.0.attn_q.weight to blk.0.attn_k.weight in place (same length).
  Bytes dup = b;
  const auto& q = l.tensor("blk.0.attn_q.weight");
  dup[q.name_len_at + 8 + std::string("blk.0.attn_").size()] = 'k';
  expect_rejected(dir, "dup-tensor", dup, {"duplicate tensor 'blk.0.attn_k.weight'"});

  test::ByteWriter w;
  w.header(3, 1, 0).str("").u32(1).u64(32).u32(0).u64(0).pad_to(32);
  w.bytes.resize(w.bytes.size() + 128);
  expect_rejected(dir, "empty-name", w.bytes, {"tensor 0 has an empty name"});
}

// ---- metadata values -----------------------------------------------------------------

TEST(MalformedMetadata, UnknownValueTypes) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const auto& ctx = l.kv("llama.context_length");
  for (uint32_t type : {13u, 100u, 0xFFFFFFFFu}) {
    expect_rejected(
        dir, "value-type", patched_u32(b, ctx.type_at, type),
        {"metadata 'llama.context_length': unknown value type " + std::to_string(type)});
  }
  const auto& tokens = l.kv("tokenizer.ggml.tokens");
  for (uint32_t type : {13u, 0x80000000u}) {
    expect_rejected(
        dir, "elem-type", patched_u32(b, tokens.array_type_at, type),
        {"metadata 'tokenizer.ggml.tokens': unknown array element type " + std::to_string(type)});
  }
  const auto& bos = l.kv("tokenizer.ggml.add_bos_token");
  ASSERT_EQ(bos.type, 7u);
  Bytes bad_bool = b;
  bad_bool[bos.value_at] = 2;
  expect_rejected(dir, "bool-2", bad_bool,
                  {"metadata 'tokenizer.ggml.add_bos_token': bool value 2"});
  bad_bool[bos.value_at] = 0xFF;
  expect_rejected(dir, "bool-255", bad_bool, {"bool value 255"});
}

TEST(MalformedMetadata, NestingDuplicatesAndAlignment) {
  TempDir dir;
  // Arrays nested 8 deep are fine, 9 deep are not.
  auto nested = [](int depth) {
    GgufValue v = GgufValue::array(GgufValueType::UINT8, {});
    for (int i = 1; i < depth; ++i) v = GgufValue::array(GgufValueType::ARRAY, {v});
    TinyModel m = base_model();
    m.set_metadata("x.nested", v);
    return m.bytes();
  };
  EXPECT_TRUE(try_load(dir, "nested-8.gguf", nested(8)).loaded);
  expect_rejected(dir, "nested-9", nested(9), {"metadata 'x.nested': arrays nested too deeply"});
  expect_rejected(dir, "nested-100", nested(100), {"arrays nested too deeply"});

  TinyModel m = base_model();
  m.set_metadata("dup.aaaa", GgufValue::u32(1));
  m.set_metadata("dup.bbbb", GgufValue::u32(2));
  Bytes dup = m.bytes();
  const uint64_t key_at = test::parse_gguf_layout(dup).kv("dup.bbbb").key_len_at;
  std::fill_n(dup.begin() + int64_t(key_at + 8 + 4), 4, 'a');
  expect_rejected(dir, "dup-key", dup, {"duplicate metadata key 'dup.aaaa'"});

  for (uint32_t a : {0u, 3u, 48u, 131072u}) {
    TinyModel bad = base_model();
    bad.set_metadata("general.alignment", GgufValue::u32(a));
    expect_rejected(dir, "alignment-" + std::to_string(a), bad,
                    {"general.alignment must be a power of two up to 65536"});
  }
  TinyModel as_string = base_model();
  as_string.set_metadata("general.alignment", GgufValue::str("32"));
  expect_rejected(dir, "alignment-string", as_string, {"general.alignment must be"});
  TinyModel as_int = base_model();
  as_int.set_metadata("general.alignment", GgufValue::i32(-32));
  expect_rejected(dir, "alignment-negative", as_int, {"general.alignment must be"});
}

TEST(MalformedMetadata, KeysMustBeValidUtf8) {
  TempDir dir;
  const Bytes& b = base_bytes();
  const GgufLayout& l = base_layout();
  const auto& kv = l.kv("llama.block_count");
  const uint64_t first = kv.key_len_at + 8;
  struct Bad {
    const char* name;
    std::string bytes;  // replaces the key's first bytes
  };
  for (const Bad& bad : {Bad{"ff", "\xff"}, Bad{"continuation", "\x80"},
                         Bad{"overlong-slash", "\xc0\xaf"}, Bad{"surrogate", "\xed\xa0\x80"},
                         Bad{"cut-3-byte", "\xe2\x82l"}, Bad{"above-10ffff", "\xf4\x90\x80\x80"}}) {
    Bytes k = b;
    std::copy(bad.bytes.begin(), bad.bytes.end(), k.begin() + int64_t(first));
    expect_rejected(
        dir, std::string("key-utf8-") + bad.name, k,
        {"metadata key at offset " + std::to_string(kv.key_len_at) + " is not valid UTF-8"});
  }
  Bytes t = b;
  const auto& q = l.tensor("blk.1.ffn_up.weight");
  t[q.name_len_at + 8 + 2] = 0xfe;
  expect_rejected(
      dir, "tensor-name-utf8", t,
      {"tensor name at offset " + std::to_string(q.name_len_at) + " is not valid UTF-8"});
  // Valid multi-byte keys are fine.
  TinyModel ok = base_model();
  ok.set_metadata("x.caf\xc3\xa9.\xf0\x9f\x98\x80", GgufValue::u32(1));
  EXPECT_TRUE(try_load(dir, "key-utf8-ok.gguf", ok.bytes()).loaded);
}

TEST(MalformedMetadata, MessagesQuotingFileTextStayOnOneLine) {
  TempDir dir;
  TinyModel m = base_model();
  m.set_metadata("general.architecture", GgufValue::str("llama\nclchat: fake second line\x1b[2J"));
  expect_rejected(dir, "arch-newline", m,
                  {"unsupported architecture 'llama\\x0aclchat: fake second line\\x1b[2J'"});
  // A key with a control character, quoted by a later error about its value type.
  TinyModel k = base_model();
  k.set_metadata("bad\tkey", GgufValue::u32(1));
  Bytes bytes = k.bytes();
  patch_u32(bytes, test::parse_gguf_layout(bytes).kv("bad\tkey").type_at, 77);
  expect_rejected(dir, "key-tab", bytes, {"metadata 'bad\\x09key': unknown value type 77"});
}

// ---- model-level problems ----------------------------------------------------------------

TEST(MalformedModel, MissingKeys) {
  TempDir dir;
  for (const char* key : {"general.architecture", "llama.embedding_length", "llama.block_count",
                          "llama.attention.head_count", "llama.feed_forward_length"}) {
    TinyModel m = base_model();
    ASSERT_TRUE(m.erase_metadata(key));
    expect_rejected(dir, std::string("missing-") + key, m,
                    {std::string("missing metadata key '") + key + "'"});
  }
  test::ByteWriter header_only;
  header_only.header(3, 0, 0);
  expect_rejected(dir, "header-only", header_only.bytes,
                  {"missing metadata key 'general.architecture'"});
  TinyModel empty_arch = base_model();
  empty_arch.set_metadata("general.architecture", GgufValue::str(""));
  expect_rejected(dir, "empty-arch", empty_arch, {"missing metadata key 'general.architecture'"});
}

TEST(MalformedModel, WrongKeyTypes) {
  TempDir dir;
  struct Case {
    const char* key;
    GgufValue value;
    const char* phrase;
  };
  const Case cases[] = {
      {"general.architecture", GgufValue::u32(1),
       "metadata 'general.architecture' has type uint32, expected string"},
      {"general.name", GgufValue::array(GgufValueType::STRING, {}),
       "metadata 'general.name' has type array, expected string"},
      {"llama.embedding_length", GgufValue::str("32"),
       "metadata 'llama.embedding_length' has type string, expected a non-negative integer"},
      {"llama.block_count", GgufValue::i32(-2),
       "metadata 'llama.block_count' has type int32, expected a non-negative integer"},
      {"llama.attention.head_count", GgufValue::f32(4.0f),
       "metadata 'llama.attention.head_count' has type float32"},
      {"llama.rope.freq_base", GgufValue::str("10000"),
       "metadata 'llama.rope.freq_base' has type string, expected a number"},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::boolean(true),
       "has type bool, expected a number"},
  };
  for (const Case& c : cases) {
    TinyModel m = base_model();
    m.set_metadata(c.key, c.value);
    expect_rejected(dir, std::string("type-") + c.key, m, {c.phrase});
  }
}

TEST(MalformedModel, OutOfRangeAndInconsistentHyperParameters) {
  TempDir dir;
  struct Case {
    std::vector<std::pair<const char*, uint64_t>> set;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {{{"llama.embedding_length", 0}}, "'llama.embedding_length' = 0 is out of range (1..65536)"},
      {{{"llama.embedding_length", uint64_t{1} << 40}},
       "'llama.embedding_length' = 1099511627776 is out of range"},
      {{{"llama.block_count", 0}}, "'llama.block_count' = 0 is out of range (1..1024)"},
      {{{"llama.block_count", 5000}}, "'llama.block_count' = 5000 is out of range"},
      {{{"llama.attention.head_count", 0}}, "'llama.attention.head_count' = 0 is out of range"},
      {{{"llama.attention.head_count_kv", 0}},
       "'llama.attention.head_count_kv' = 0 is out of range"},
      {{{"llama.feed_forward_length", 0}}, "'llama.feed_forward_length' = 0 is out of range"},
      {{{"llama.context_length", 0}}, "'llama.context_length' = 0 is out of range"},
      {{{"llama.context_length", uint64_t{1} << 30}}, "'llama.context_length' = 1073741824"},
      {{{"llama.rope.dimension_count", 0}}, "'llama.rope.dimension_count' = 0 is out of range"},
      // 32 / 3 heads; 4 heads over 3 or 8 KV heads.
      {{{"llama.attention.head_count", 3}, {"llama.attention.head_count_kv", 1}},
       "embedding length 32 is not divisible by 3 heads"},
      {{{"llama.attention.head_count_kv", 3}}, "4 query heads are not a multiple of 3 KV heads"},
      {{{"llama.attention.head_count_kv", 8}}, "4 query heads are not a multiple of 8 KV heads"},
      {{{"llama.rope.dimension_count", 7}}, "rope dimension count 7 does not fit head size 8"},
      {{{"llama.rope.dimension_count", 16}}, "rope dimension count 16 does not fit head size 8"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    TinyModel m = base_model();
    for (const auto& [key, v] : cases[i].set) m.set_metadata(key, GgufValue::u64(v));
    expect_rejected(dir, "hparam-" + std::to_string(i), m, {cases[i].phrase});
  }
  const std::string hparam_phrase = "rope frequency base must be positive and finite";
  for (double v : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    TinyModel m = base_model();
    m.set_metadata("llama.rope.freq_base", GgufValue::f32(float(v)));
    expect_rejected(dir, "rope-base", m, {hparam_phrase});
  }
  for (double v : {0.0, -1e-5, 1.5, double(NAN)}) {
    TinyModel m = base_model();
    m.set_metadata("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(float(v)));
    expect_rejected(dir, "rms-eps", m, {hparam_phrase});
  }
}

// An architecture clchat does not know: one line naming it and the known ones.
TEST(MalformedModel, OtherArchitectures) {
  TempDir dir;
  for (const char* arch : {"gpt2", "falcon", "llama2", "LLAMA", "phi2"}) {
    TinyModel m = base_model();
    m.set_metadata("general.architecture", GgufValue::str(arch));
    expect_rejected(dir, std::string("arch-") + arch, m,
                    {std::string("unsupported architecture '") + arch +
                     "' (clchat runs llama, qwen2, qwen3, phi3, gemma3)"});
  }
}

// A known family's file without its keys (the llama model's keys under
// "qwen2."): the first missing key is named.
TEST(MalformedModel, KnownArchitectureWithoutItsKeys) {
  TempDir dir;
  TinyModel m = base_model();
  m.set_metadata("general.architecture", GgufValue::str("qwen2"));
  expect_rejected(dir, "arch-qwen2-keys", m, {"qwen2.embedding_length"});
}

TEST(MalformedModel, MissingTensors) {
  TempDir dir;
  for (const char* name :
       {"token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_norm.weight",
        "blk.1.ffn_down.weight", "blk.1.ffn_norm.weight", "blk.1.attn_output.weight"}) {
    TinyModel m = base_model();
    ASSERT_TRUE(m.erase_tensor(name));
    expect_rejected(dir, std::string("no-") + name, m,
                    {std::string("missing tensor '") + name + "'"});
  }
  TinyModel more_layers = base_model();
  more_layers.set_metadata("llama.block_count", GgufValue::u32(3));
  expect_rejected(dir, "block-count-3", more_layers, {"missing tensor 'blk.2.attn_norm.weight'"});
}

TEST(MalformedModel, WrongShapesAndTypes) {
  TempDir dir;
  auto replace = [](TinyModel& m, const std::string& name, GgmlType type,
                    std::vector<uint64_t> dims) {
    *m.find_tensor(name) = test::make_random_tensor(name, type, std::move(dims), 9, -1, 1);
  };
  struct Case {
    const char* name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::string phrase;
  };
  const Case cases[] = {
      {"blk.0.attn_k.weight",
       GgmlType::Q8_0,
       {32, 32},
       "tensor 'blk.0.attn_k.weight' has shape [32, 32], expected [32, 16]"},
      {"blk.1.attn_q.weight",
       GgmlType::Q8_0,
       {32, 32, 1},
       "tensor 'blk.1.attn_q.weight' has shape [32, 32, 1], expected [32, 32]"},
      {"blk.0.ffn_down.weight",
       GgmlType::Q8_0,
       {32, 64},
       "tensor 'blk.0.ffn_down.weight' has shape [32, 64], expected [64, 32]"},
      {"blk.1.ffn_gate.weight",
       GgmlType::Q8_0,
       {32, 63},
       "tensor 'blk.1.ffn_gate.weight' has shape [32, 63], expected [32, 64]"},
      {"output.weight",
       GgmlType::Q8_0,
       {32, 100},
       "tensor 'output.weight' has shape [32, 100], expected [32, 280]"},
      {"output_norm.weight",
       GgmlType::F32,
       {64},
       "tensor 'output_norm.weight' has shape [64], expected [32]"},
      {"blk.0.attn_norm.weight",
       GgmlType::F32,
       {32, 1},
       "tensor 'blk.0.attn_norm.weight' has shape [32, 1], expected [32]"},
      {"token_embd.weight",
       GgmlType::F32,
       {32 * 280},
       "tensor 'token_embd.weight' is not a matrix"},
      {"token_embd.weight",
       GgmlType::F32,
       {32, 280, 1},
       "tensor 'token_embd.weight' is not a matrix"},
      {"token_embd.weight",
       GgmlType::Q8_0,
       {64, 280},
       "tensor 'token_embd.weight' has shape [64, 280], expected [32, 280]"},
      {"blk.1.ffn_norm.weight", GgmlType::F16, {32}, "tensor 'blk.1.ffn_norm.weight' must be F32"},
      {"output_norm.weight", GgmlType::F16, {32}, "tensor 'output_norm.weight' must be F32"},
  };
  for (const Case& c : cases) {
    TinyModel m = base_model();
    replace(m, c.name, c.type, c.dims);
    expect_rejected(dir, std::string("shape-") + c.name, m, {c.phrase});
  }
  // Tied model whose token_embd has a different width than n_embd.
  test::TinyModelSpec spec = base_spec();
  spec.tied = true;
  TinyModel tied = test::make_tiny_model(spec);
  tied.set_metadata("llama.embedding_length", GgufValue::u32(64));
  tied.set_metadata("llama.rope.dimension_count", GgufValue::u32(16));
  expect_rejected(dir, "tied-width", tied,
                  {"tensor 'token_embd.weight' has shape [32, 280], expected [64, 280]"});
}

// ---- the same kinds of damage to stories260K.gguf -------------------------------------

TEST(MalformedStories, PatchedFields) {
  TempDir dir;
  const Bytes& b = stories_bytes();
  const GgufLayout l = test::parse_gguf_layout(b);
  const auto& q = l.tensor("blk.0.attn_q.weight");
  const auto& k = l.tensor("blk.0.attn_k.weight");
  const auto& embd_key = l.kv("llama.embedding_length");
  auto patch_bytes = [&](uint64_t at, std::string_view s) {
    Bytes out = b;
    std::copy(s.begin(), s.end(), out.begin() + int64_t(at));
    return out;
  };
  expect_rejected(dir, "s-magic", patch_bytes(0, "GGML"), {"bad magic"});
  expect_rejected(dir, "s-v1", patched_u32(b, GgufLayout::version_at, 1),
                  {"GGUF version 1 is not supported"});
  expect_rejected(dir, "s-n-tensors", patched_u64(b, GgufLayout::n_tensors_at, ~uint64_t{0}),
                  {"tensor count 18446744073709551615 exceeds the file size"});
  expect_rejected(dir, "s-n-kv", patched_u64(b, GgufLayout::n_kv_at, uint64_t{1} << 60),
                  {"metadata count 1152921504606846976 exceeds the file size"});
  const auto& scores = l.kv("tokenizer.ggml.scores");
  expect_rejected(dir, "s-scores-count", patched_u64(b, scores.array_count_at, ~uint64_t{0}),
                  {"'tokenizer.ggml.scores': array length 18446744073709551615 exceeds"});
  expect_rejected(dir, "s-q4k", patched_u32(b, q.type_at, 12),
                  {"tensor 'blk.0.attn_q.weight' row length 64 is not a multiple of the Q4_K "
                   "block size"});
  expect_rejected(dir, "s-iq2", patched_u32(b, q.type_at, 16),
                  {"tensor 'blk.0.attn_q.weight' has unsupported type IQ2_XXS (16)"});
  expect_rejected(
      dir, "s-overflow",
      patched_u64(patched_u64(b, q.dim_at[0], uint64_t{1} << 33), q.dim_at[1], uint64_t{1} << 33),
      {"tensor 'blk.0.attn_q.weight' dimensions overflow"});
  expect_rejected(dir, "s-zero-dim", patched_u64(b, q.dim_at[1], 0), {"has a zero dimension"});
  expect_rejected(dir, "s-5-dims", patched_u32(b, q.n_dims_at, 5), {"has 5 dimensions"});
  expect_rejected(dir, "s-misaligned", patched_u64(b, q.offset_at, q.offset + 4),
                  {"is not aligned to 32"});
  expect_rejected(dir, "s-past-end", patched_u64(b, q.offset_at, b.size() / 32 * 32),
                  {"is not within the file bounds"});
  expect_rejected(dir, "s-value-type", patched_u32(b, embd_key.type_at, 13),
                  {"metadata 'llama.embedding_length': unknown value type 13"});
  // Renamed key and tensor, changed architecture and head counts, grown attn_k.
  expect_rejected(dir, "s-renamed-key",
                  patch_bytes(embd_key.key_len_at + 8 + embd_key.key.size() - 1, "X"),
                  {"missing metadata key 'llama.embedding_length'"});
  const auto& arch = l.kv("general.architecture");
  expect_rejected(dir, "s-arch", patch_bytes(arch.value_at + 8 + 4, "b"),
                  {"unsupported architecture 'llamb'"});
  const auto& embd = l.tensor("token_embd.weight");
  expect_rejected(dir, "s-renamed-tensor",
                  patch_bytes(embd.name_len_at + 8 + embd.name.size() - 1, "X"),
                  {"missing tensor 'token_embd.weight'"});
  const auto& heads = l.kv("llama.attention.head_count");
  const auto& heads_kv = l.kv("llama.attention.head_count_kv");
  ASSERT_EQ(heads.type, 4u);  // uint32
  expect_rejected(dir, "s-heads-3", patched_u32(b, heads.value_at, 3),
                  {"embedding length 64 is not divisible by 3 heads"});
  expect_rejected(dir, "s-heads-0", patched_u32(b, heads.value_at, 0),
                  {"'llama.attention.head_count' = 0 is out of range"});
  expect_rejected(dir, "s-kv-heads-3", patched_u32(b, heads_kv.value_at, 3),
                  {"8 query heads are not a multiple of 3 KV heads"});
  expect_rejected(dir, "s-attn-k-64", patched_u64(b, k.dim_at[1], 64),
                  {"tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]"});
  const auto& down = l.tensor("blk.0.ffn_down.weight");  // F32 [172, 64]
  expect_rejected(dir, "s-down-q8", patched_u32(b, down.type_at, 8),
                  {"row length 172 is not a multiple of the Q8_0 block size"});
}

// ---- random damage ---------------------------------------------------------------------

TEST(MalformedRandom, RandomBytes) {
  TempDir dir;
  std::mt19937 rng(2024);
  int n_loaded = 0;
  for (int i = 0; i < 200; ++i) {
    Bytes b(rng() % 2048);
    for (auto& x : b) x = uint8_t(rng());
    expect_rejected(dir, "random-" + std::to_string(i), b, {"bad magic"});
  }
  // Valid magic and version, random counts and bodies.
  for (int i = 0; i < 300; ++i) {
    test::ByteWriter w;
    const uint32_t version = 2 + rng() % 2;
    const uint64_t n_tensors = rng() % 8;
    w.header(version, n_tensors, rng() % 16);
    const size_t n = rng() % 4096;
    for (size_t j = 0; j < n; ++j) w.u8(uint8_t(rng() % 4 == 0 ? rng() % 16 : rng()));
    n_loaded += try_load(dir, "random-gguf-" + std::to_string(i) + ".gguf", w.bytes).loaded;
  }
  EXPECT_EQ(n_loaded, 0);
}

// Flips 1..4 bits, mostly in the header. A flipped file may load (a bit in a
// weight, a tokenizer string); it must then be usable, else fail cleanly.
void flip_bits(const Bytes& base, uint64_t header_end, uint32_t seed, int n_cases,
               const std::string& prefix, int* n_loaded) {
  TempDir dir;
  std::mt19937 rng(seed);
  for (int i = 0; i < n_cases; ++i) {
    Bytes b = base;
    const int n_flips = 1 + int(rng() % 4);
    for (int f = 0; f < n_flips; ++f) {
      const uint64_t at = rng() % 5 ? rng() % header_end : rng() % b.size();
      b[at] ^= uint8_t(1u << (rng() % 8));
    }
    SCOPED_TRACE(prefix + std::to_string(i));
    *n_loaded += try_load(dir, prefix + std::to_string(i) + ".gguf", b).loaded;
  }
}

TEST(MalformedRandom, BitFlipsInTheFixture) {
  int n_loaded = 0;
  flip_bits(base_bytes(), base_layout().header_end, 7, 300, "flip-", &n_loaded);
  EXPECT_LT(n_loaded, 300);
}

TEST(MalformedRandom, BitFlipsInStories260K) {
  int n_loaded = 0;
  const GgufLayout l = test::parse_gguf_layout(stories_bytes());
  flip_bits(stories_bytes(), l.header_end, 11, 200, "stories-flip-", &n_loaded);
  EXPECT_LT(n_loaded, 200);
}

}  // namespace
}  // namespace clchat
