// Test fixtures for GGUF files: small valid llama models and raw-byte tools.
//
// make_tiny_model(spec) builds an editable TinyModel: the metadata a llama
// GGUF carries (hyper-parameters plus a gpt2-style byte-level BPE vocabulary)
// and every tensor load_model() expects, filled with seeded random weights in
// the requested type. A test may change or drop metadata and tensors, then
// serialize it with GgufWriter (bytes(), write()). Each FixtureTensor keeps
// both its encoded bytes and the float values they decode to, so a reference
// implementation can use the exact weights the engine will see.
//
// The raw-byte side is independent of engine/gguf/gguf.cpp: ByteWriter appends
// little-endian fields by hand, and parse_gguf_layout() walks a header and
// records where each field lies, so malformed-file tests can patch one field
// (a count, a type id, a dimension) in an otherwise valid file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"

namespace clchat::test {

// ---- tiny llama models ------------------------------------------------------

struct TinyModelSpec {
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 96;
  int n_vocab = 320;                     // token_embd rows and, with `tokenizer`, vocabulary size
  GgmlType weight_type = GgmlType::F32;  // layer matrices and output.weight
  std::optional<GgmlType> embd_type;     // token_embd.weight; weight_type when unset
  bool tied = false;                     // no output.weight: lm_head is token_embd
  uint32_t seed = 1;
  int n_ctx_train = 256;
  int n_rot = 0;  // llama.rope.dimension_count; 0 writes head_dim
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tokenizer = true;  // write tokenizer.ggml.* (gpt2 model, n_vocab tokens)
  std::string tokenizer_pre = "gpt-2";
  std::string name = "tiny-llama";
  uint32_t version = 3;     // GGUF version
  uint32_t alignment = 32;  // general.alignment (written only when not 32)
};

struct FixtureTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims;  // ne0 first
  std::vector<uint8_t> data;   // encoded as `type`
  std::vector<float> values;   // what `data` decodes to, ne0 fastest
};

// A model under construction: edit, then serialize.
struct TinyModel {
  TinyModelSpec spec;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // file order
  std::vector<FixtureTensor> tensors;                       // file order

  const GgufValue* find_metadata(std::string_view key) const;
  void set_metadata(const std::string& key, GgufValue value);  // replaces or appends
  bool erase_metadata(std::string_view key);
  FixtureTensor* find_tensor(std::string_view name);
  const FixtureTensor& tensor(std::string_view name) const;  // throws std::out_of_range
  bool erase_tensor(std::string_view name);

  GgufWriter writer() const;
  std::vector<uint8_t> bytes() const;
  // Writes the file and returns `path`.
  std::string write(const std::string& path) const;
};

// Throws std::invalid_argument when the spec cannot be encoded (e.g. a Q4_0
// ffn_down with n_ff not a multiple of 32).
TinyModel make_tiny_model(const TinyModelSpec& spec = {});

// A tensor of seeded uniform values in [lo, hi), encoded as `type`.
FixtureTensor make_random_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                                 uint32_t seed, float lo, float hi);

// ---- gpt2-style vocabulary --------------------------------------------------

// GPT-2's byte-level alphabet: the UTF-8 text of the character standing for
// byte b (printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards; ' ' is "Ġ").
std::string gpt2_byte_to_unicode(uint8_t b);

struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // 1 normal, 3 control (llama.cpp's ids)
  std::vector<std::string> merges;   // "left right", highest priority first
};

// ids 0..2: <|endoftext|>, <|im_start|>, <|im_end|> (control); then the 256
// byte tokens in byte order (id 3 + b); then merged tokens ("Ġt", "he",
// "Ġthe", ...); then <|reserved_N|> fillers up to n_vocab. With n_vocab < 259
// the list is cut and only merges whose parts and result survive are kept.
TinyVocab make_tiny_vocab(int n_vocab);
// tokenizer.ggml.tokens, .token_type and .merges holding `v`.
std::vector<std::pair<std::string, GgufValue>> vocab_metadata(const TinyVocab& v);

// ---- files ------------------------------------------------------------------

// A fresh directory under $TMPDIR (else /dev/shm, else /tmp), removed with
// its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to file(name) and returns that path.
  std::string write(const std::string& name, std::span<const uint8_t> bytes) const;

 private:
  std::string path_;
};

std::vector<uint8_t> read_bytes(const std::string& path);

// ---- raw bytes --------------------------------------------------------------

// Appends little-endian fields by hand (no GgufWriter involved).
class ByteWriter {
 public:
  ByteWriter& u8(uint8_t v) { return put(v); }
  ByteWriter& i8(int8_t v) { return put(v); }
  ByteWriter& u16(uint16_t v) { return put(v); }
  ByteWriter& i16(int16_t v) { return put(v); }
  ByteWriter& u32(uint32_t v) { return put(v); }
  ByteWriter& i32(int32_t v) { return put(v); }
  ByteWriter& u64(uint64_t v) { return put(v); }
  ByteWriter& i64(int64_t v) { return put(v); }
  ByteWriter& f32(float v) { return put(v); }
  ByteWriter& f64(double v) { return put(v); }
  ByteWriter& str(std::string_view s);  // u64 length + bytes
  ByteWriter& raw(std::span<const uint8_t> b);
  ByteWriter& raw(std::string_view s);
  ByteWriter& pad_to(uint64_t alignment);
  // GGUF header: magic, version, n_tensors, n_kv.
  ByteWriter& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv);

  std::vector<uint8_t> bytes;

 private:
  template <typename T>
  ByteWriter& put(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) {
      bytes.push_back(uint8_t(reinterpret_cast<const unsigned char*>(&v)[i]));
    }
    return *this;
  }
};

// Where the fields of a GGUF header lie (byte offsets into the file).
struct GgufLayout {
  struct Kv {
    std::string key;
    uint64_t key_len_at = 0;  // u64 key length
    uint32_t type = 0;
    uint64_t type_at = 0;  // u32 value type
    uint64_t value_at = 0;
    uint64_t end = 0;  // one past the value
    // For arrays: the element type and count fields.
    uint64_t array_type_at = 0;
    uint64_t array_count_at = 0;
  };
  struct TensorInfo {
    std::string name;
    uint64_t name_len_at = 0;
    uint64_t n_dims_at = 0;
    std::vector<uint64_t> dims;
    std::vector<uint64_t> dim_at;
    uint32_t type = 0;
    uint64_t type_at = 0;
    uint64_t offset = 0;
    uint64_t offset_at = 0;
    uint64_t end = 0;
  };
  static constexpr uint64_t version_at = 4;
  static constexpr uint64_t n_tensors_at = 8;
  static constexpr uint64_t n_kv_at = 16;
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::vector<Kv> kvs;
  std::vector<TensorInfo> tensors;
  uint64_t header_end = 0;  // end of the last tensor info
  uint64_t data_start = 0;  // header_end rounded up to the alignment

  const Kv& kv(std::string_view key) const;               // throws std::out_of_range
  const TensorInfo& tensor(std::string_view name) const;  // throws std::out_of_range
};

// Walks a well-formed header; throws std::runtime_error on anything odd (it
// is meant for the valid files that tests then break on purpose).
GgufLayout parse_gguf_layout(std::span<const uint8_t> bytes);

void patch_u32(std::vector<uint8_t>& bytes, uint64_t at, uint32_t v);
void patch_u64(std::vector<uint8_t>& bytes, uint64_t at, uint64_t v);
uint32_t load_u32(std::span<const uint8_t> bytes, uint64_t at);
uint64_t load_u64(std::span<const uint8_t> bytes, uint64_t at);

}  // namespace clchat::test
