// GGUF v2/v3 reader and writer.
//
// GgufFile memory-maps a model file and parses its header, metadata and tensor
// infos. The file is distrusted: every count, length, offset and dimension
// product is checked against the file size before it is used (with overflow
// checks), so a malformed file gives one GgufError naming the file and the
// problem instead of a crash, hang or huge allocation. GgufTensor::data
// points into the mapping, which lives as long as the GgufFile; every read of
// the mapping (header, metadata, tensor_bytes()) is guarded against the file
// shrinking meanwhile (mapped_copy.h).
//
// GgufWriter builds a file in memory (metadata and tensors in insertion order)
// and writes it out; tests use it to make models and broken files, and
// `clchat synth` uses it to write synthetic models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace clchat {

// A malformed or unsupported model file. what() names the file and the problem.
class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

struct GgufValue;
// An array's elements all have elem_type (arrays may nest). The reader keeps
// every element of the arrays the engine reads (k_gguf_arrays_read_whole) and
// of other arrays until they hold k_gguf_max_other_array_items elements in
// all; a larger array of another key is skipped over in the file: items is
// empty and n_unread says how many elements it has (a 10^8-element array
// would otherwise take ~50 bytes of memory per byte of file).
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<GgufValue> items;
  uint64_t n_unread = 0;
};
constexpr uint64_t k_gguf_max_other_array_items = uint64_t{1} << 16;
// The most elements a tokenizer array may have (the largest vocabularies and
// merge lists have a few hundred thousand).
constexpr uint64_t k_gguf_max_vocab_items = uint64_t{1} << 22;
// The array keys the engine reads (engine/tokenizer/tokenizer.cpp).
bool gguf_array_read_whole(std::string_view key);

// One metadata value. Integers keep their signedness in `type`; the variant
// holds them widened.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> data;

  static GgufValue u32(uint32_t v) { return {GgufValueType::UINT32, uint64_t{v}}; }
  static GgufValue i32(int32_t v) { return {GgufValueType::INT32, int64_t{v}}; }
  static GgufValue u64(uint64_t v) { return {GgufValueType::UINT64, v}; }
  static GgufValue f32(float v) { return {GgufValueType::FLOAT32, double{v}}; }
  static GgufValue boolean(bool v) { return {GgufValueType::BOOL, v}; }
  static GgufValue str(std::string v) { return {GgufValueType::STRING, std::move(v)}; }
  static GgufValue array(GgufValueType elem_type, std::vector<GgufValue> items) {
    return {GgufValueType::ARRAY, GgufArray{elem_type, std::move(items)}};
  }
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims;  // ne0 first: ne0 is the row length
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping: read it with GgufFile::tensor_bytes()

  uint64_t ne(size_t i) const { return i < dims.size() ? dims[i] : 1; }
  uint64_t n_rows() const { return dims.empty() ? 1 : n_elements / dims[0]; }
};

class GgufFile {
 public:
  // Maps and parses `path`; throws GgufError on any problem.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }

  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. The plain ones throw GgufError if the key is missing or of
  // an incompatible type (any integer type converts when it fits); the opt_
  // ones return nullopt when the key is missing and throw on a wrong type.
  // The array getters throw for an array that was skipped (n_unread).
  uint64_t get_uint(std::string_view key) const;
  std::optional<uint64_t> opt_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // any numeric type
  std::optional<double> opt_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

  // A copy of t's data (t from tensors()). Reading the mapping is guarded
  // (engine/gguf/mapped_copy.h): when the file has shrunk since it was
  // opened, this throws GgufError("<path>: the model file changed while
  // loading ...") instead of the process dying of SIGBUS. Loaders copy
  // through here rather than reading t.data.
  std::vector<uint8_t> tensor_bytes(const GgufTensor& t) const;

  // Throws GgufError("<path>: <message>").
  [[noreturn]] void fail(const std::string& message) const;
  // fail() for a mapping that faulted: the file shrank under clchat.
  [[noreturn]] void fail_changed() const;

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  // `data` must hold exactly ggml_row_bytes(type, dims[0]) * rows bytes.
  void add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                  std::vector<uint8_t> data);
  void set_alignment(uint32_t alignment) { alignment_ = alignment; }
  void set_version(uint32_t version) { version_ = version; }

  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;  // throws std::runtime_error on I/O failure

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
  };
  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace clchat
