// GGUF parsing and writing. Layout (little-endian):
//   magic "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 value type, value),
//   n_tensors x (string name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset),
//   padding to general.alignment, tensor data (each tensor at its offset, aligned).
// A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
// The Cursor below never reads past the end of the mapping, and every count is
// checked against the bytes left before anything is allocated for it. Keys and
// tensor names must be UTF-8; error messages escape control bytes so that a
// name quoted from the file cannot break the one-line message.
#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/input_file.h"
#include "common/utf8.h"
#include "engine/gguf/mapped_copy.h"

namespace clchat {

namespace {

constexpr uint32_t k_max_dims = 4;
constexpr uint32_t k_max_array_depth = 8;
constexpr uint64_t k_max_string_length = uint64_t{1} << 30;

bool is_valid_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::FLOAT64); }

// Smallest encoded size of one value of type t (used to bound counts).
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING:
      return 8;
    case GgufValueType::ARRAY:
      return 12;
  }
  return 1;
}

class Cursor {
 public:
  Cursor(const GgufFile& file, const uint8_t* base, uint64_t size)
      : file_(file), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    copy(&v, sizeof(T));
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > k_max_string_length) {
      file_.fail(std::string(what) + ": string length " + std::to_string(n) + " at offset " +
                 std::to_string(pos_ - 8) + " is implausible");
    }
    need(n, what);
    std::string s(n, '\0');
    copy(s.data(), n);
    return s;
  }

  // Copies n bytes checked with need() and moves past them.
  void copy(void* dst, uint64_t n) {
    if (!copy_from_mapping(dst, base_ + pos_, n)) file_.fail_changed();
    pos_ += n;
  }

  // Moves past n bytes already checked with need().
  void skip(uint64_t n) { pos_ += n; }

  void need(uint64_t n, const char* what) {
    if (n > left()) {
      file_.fail(std::string("truncated while reading ") + what + " at offset " +
                 std::to_string(pos_) + " (needs " + std::to_string(n) + " bytes, " +
                 std::to_string(left()) + " left)");
    }
  }

 private:
  const GgufFile& file_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// How many elements of arrays of keys the engine does not read may still be
// kept (GgufArray's comment); shared by every array of one file.
struct ArrayBudget {
  uint64_t other_items_left = k_gguf_max_other_array_items;
};

// Reads an array's element type and count; checks both against the file.
std::pair<GgufValueType, uint64_t> read_array_header(Cursor& cur, const GgufFile& file,
                                                     uint32_t depth, const std::string& key) {
  if (depth >= k_max_array_depth) file.fail("metadata '" + key + "': arrays nested too deeply");
  const uint32_t elem = cur.read<uint32_t>("array type");
  if (!is_valid_value_type(elem)) {
    file.fail("metadata '" + key + "': unknown array element type " + std::to_string(elem));
  }
  const uint64_t count = cur.read<uint64_t>("array length");
  const auto elem_type = GgufValueType(elem);
  if (count > cur.left() / min_encoded_size(elem_type)) {
    file.fail("metadata '" + key + "': array length " + std::to_string(count) +
              " exceeds the file size");
  }
  return {elem_type, count};
}

// Moves past `count` array elements of `type` (an array's contents, after
// read_array_header) without keeping them, bounds-checked as if read.
void skip_elements(Cursor& cur, const GgufFile& file, GgufValueType type, uint64_t count,
                   uint32_t depth, const std::string& key) {
  if (type == GgufValueType::STRING) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t n = cur.read<uint64_t>("string length");
      cur.need(n, "string value");
      cur.skip(n);
    }
  } else if (type == GgufValueType::ARRAY) {
    for (uint64_t i = 0; i < count; ++i) {
      const auto [elem_type, n] = read_array_header(cur, file, depth, key);
      skip_elements(cur, file, elem_type, n, depth + 1, key);
    }
  } else {
    // Fixed-size elements: read_array_header checked count * size <= left().
    cur.skip(count * min_encoded_size(type));
  }
}

GgufValue read_value(Cursor& cur, const GgufFile& file, GgufValueType type, uint32_t depth,
                     const std::string& key, ArrayBudget& budget) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::UINT8:
      v.data = uint64_t{cur.read<uint8_t>("value")};
      break;
    case GgufValueType::INT8:
      v.data = int64_t{cur.read<int8_t>("value")};
      break;
    case GgufValueType::UINT16:
      v.data = uint64_t{cur.read<uint16_t>("value")};
      break;
    case GgufValueType::INT16:
      v.data = int64_t{cur.read<int16_t>("value")};
      break;
    case GgufValueType::UINT32:
      v.data = uint64_t{cur.read<uint32_t>("value")};
      break;
    case GgufValueType::INT32:
      v.data = int64_t{cur.read<int32_t>("value")};
      break;
    case GgufValueType::UINT64:
      v.data = cur.read<uint64_t>("value");
      break;
    case GgufValueType::INT64:
      v.data = cur.read<int64_t>("value");
      break;
    case GgufValueType::FLOAT32:
      v.data = double{cur.read<float>("value")};
      break;
    case GgufValueType::FLOAT64:
      v.data = cur.read<double>("value");
      break;
    case GgufValueType::BOOL: {
      const uint8_t b = cur.read<uint8_t>("value");
      if (b > 1) file.fail("metadata '" + key + "': bool value " + std::to_string(b));
      v.data = b != 0;
      break;
    }
    case GgufValueType::STRING:
      v.data = cur.read_string("string value");
      break;
    case GgufValueType::ARRAY: {
      const auto [elem_type, count] = read_array_header(cur, file, depth, key);
      GgufArray arr;
      arr.elem_type = elem_type;
      if (gguf_array_read_whole(key)) {
        if (count > k_gguf_max_vocab_items) {
          file.fail("metadata '" + key + "': array length " + std::to_string(count) +
                    " is over the " + std::to_string(k_gguf_max_vocab_items) +
                    " elements a tokenizer array may have");
        }
      } else if (count > budget.other_items_left) {
        skip_elements(cur, file, elem_type, count, depth + 1, key);
        arr.n_unread = count;
        v.data = std::move(arr);
        break;
      } else {
        budget.other_items_left -= count;
      }
      arr.items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        arr.items.push_back(read_value(cur, file, elem_type, depth + 1, key, budget));
      }
      v.data = std::move(arr);
      break;
    }
  }
  return v;
}

// Length of the well-formed UTF-8 sequence starting at s[i], or 0.
size_t utf8_length_at(std::string_view s, size_t i) {
  return size_t(decode_utf8_char(s, i).length);
}

// Messages quote names and values from the file; keep them one printable
// line: control characters (C0, DEL, C1) and bytes that are not UTF-8 become \xNN.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length_at(s, i);
    const uint8_t c = uint8_t(s[i]);
    const bool control =
        (n == 1 && (c < 0x20 || c == 0x7F)) || (n == 2 && c == 0xC2 && uint8_t(s[i + 1]) < 0xA0);
    if (n == 0 || control) {
      const size_t len = n == 0 ? 1 : n;
      for (size_t k = 0; k < len; ++k) {
        static const char hex[] = "0123456789abcdef";
        const uint8_t b = uint8_t(s[i + k]);
        out += {'\\', 'x', hex[b >> 4], hex[b & 0xF]};
      }
      i += len;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

std::string value_type_mismatch(std::string_view key, const GgufValue& v, const char* wanted) {
  return "metadata '" + std::string(key) + "' has type " + gguf_value_type_name(v.type) +
         ", expected " + wanted;
}

}  // namespace

bool gguf_array_read_whole(std::string_view key) {
  return key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" ||
         key == "tokenizer.ggml.token_type" || key == "tokenizer.ggml.merges";
}

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
      return "uint8";
    case GgufValueType::INT8:
      return "int8";
    case GgufValueType::UINT16:
      return "uint16";
    case GgufValueType::INT16:
      return "int16";
    case GgufValueType::UINT32:
      return "uint32";
    case GgufValueType::INT32:
      return "int32";
    case GgufValueType::FLOAT32:
      return "float32";
    case GgufValueType::BOOL:
      return "bool";
    case GgufValueType::STRING:
      return "string";
    case GgufValueType::ARRAY:
      return "array";
    case GgufValueType::UINT64:
      return "uint64";
    case GgufValueType::INT64:
      return "int64";
    case GgufValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  // O_NONBLOCK: opening a FIFO otherwise waits for a writer; it is refused
  // below like every other file that is not a regular one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) file->fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    file->fail(std::string("a ") + file_kind_name(st.st_mode) + ", not a regular file");
  }
  file->size_ = uint64_t(st.st_size);
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      file->fail(std::string("cannot map: ") + std::strerror(errno));
    }
    file->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  install_sigbus_guard();
  file->parse();
  return file;
}

GgufFile::~GgufFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

void GgufFile::fail(const std::string& message) const {
  throw GgufError(path_ + ": " + printable(message));
}

void GgufFile::fail_changed() const {
  fail("the model file changed while loading (it is now shorter than the " + std::to_string(size_) +
       " bytes it had when opened)");
}

std::vector<uint8_t> GgufFile::tensor_bytes(const GgufTensor& t) const {
  install_sigbus_guard();
  std::vector<uint8_t> bytes(t.n_bytes);
  if (!copy_from_mapping(bytes.data(), t.data, t.n_bytes)) fail_changed();
  return bytes;
}

void GgufFile::parse() {
  Cursor cur(*this, base_, size_);
  constexpr uint32_t k_magic = 0x46554747;  // "GGUF" read as a little-endian u32
  if (size_ < 4 || cur.read<uint32_t>("magic") != k_magic) fail("not a GGUF file (bad magic)");
  version_ = cur.read<uint32_t>("version");
  if (version_ == 1) fail("GGUF version 1 is not supported (convert the file to v3)");
  if (version_ != 2 && version_ != 3) fail("unsupported GGUF version " + std::to_string(version_));
  const uint64_t n_tensors = cur.read<uint64_t>("tensor count");
  const uint64_t n_kv = cur.read<uint64_t>("metadata count");
  // Each KV pair takes at least 8 (key length) + 4 (type) + 1 bytes; each
  // tensor info at least 8 + 4 + 4 + 8.
  if (n_kv > cur.left() / 13)
    fail("metadata count " + std::to_string(n_kv) + " exceeds the file size");
  if (n_tensors > cur.left() / 24) {
    fail("tensor count " + std::to_string(n_tensors) + " exceeds the file size");
  }

  ArrayBudget budget;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = cur.pos();
    std::string key = cur.read_string("metadata key");
    if (!is_valid_utf8(key)) {
      fail("metadata key at offset " + std::to_string(key_at) + " is not valid UTF-8");
    }
    const uint32_t type = cur.read<uint32_t>("metadata value type");
    if (!is_valid_value_type(type)) {
      fail("metadata '" + key + "': unknown value type " + std::to_string(type));
    }
    GgufValue value = read_value(cur, *this, GgufValueType(type), 0, key, budget);
    if (kv_.count(key)) fail("duplicate metadata key '" + key + "'");
    kv_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = find("general.alignment")) {
    const auto* u = std::get_if<uint64_t>(&a->data);
    if (!u || *u == 0 || (*u & (*u - 1)) != 0 || *u > 65536) {
      fail("general.alignment must be a power of two up to 65536");
    }
    alignment_ = *u;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    const uint64_t name_at = cur.pos();
    t.name = cur.read_string("tensor name");
    if (!is_valid_utf8(t.name)) {
      fail("tensor name at offset " + std::to_string(name_at) + " is not valid UTF-8");
    }
    if (t.name.empty()) fail("tensor " + std::to_string(i) + " has an empty name");
    const uint32_t n_dims = cur.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > k_max_dims) {
      fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1.." +
           std::to_string(k_max_dims) + " supported)");
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = cur.read<uint64_t>("tensor dimension");
      if (ne == 0) fail("tensor '" + t.name + "' has a zero dimension");
      if (!checked_mul(t.n_elements, ne, &t.n_elements) || t.n_elements > (uint64_t{1} << 48)) {
        fail("tensor '" + t.name + "' dimensions overflow");
      }
      t.dims.push_back(ne);
    }
    const uint32_t type_id = cur.read<uint32_t>("tensor type");
    const auto type = ggml_type_from_id(type_id);
    if (!type) {
      fail("tensor '" + t.name + "' has unsupported type " + ggml_type_name_for_id(type_id) + " (" +
           std::to_string(type_id) + "); supported: " + ggml_supported_type_names());
    }
    t.type = *type;
    const auto row_bytes = ggml_row_bytes(t.type, t.dims[0]);
    if (!row_bytes) {
      fail("tensor '" + t.name + "' row length " + std::to_string(t.dims[0]) +
           " is not a multiple of the " + ggml_type_name(t.type) + " block size");
    }
    if (!checked_mul(*row_bytes, t.n_elements / t.dims[0], &t.n_bytes)) {
      fail("tensor '" + t.name + "' size overflows");
    }
    t.offset = cur.read<uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0) {
      fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned to " +
           std::to_string(alignment_));
    }
    if (tensor_index_.count(t.name)) fail("duplicate tensor '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (cur.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
  for (auto& t : tensors_) {
    if (t.n_bytes > data_size || t.offset > data_size - t.n_bytes) {
      fail("tensor '" + t.name + "' data (offset " + std::to_string(t.offset) + ", " +
           std::to_string(t.n_bytes) +
           " bytes) is not within the file bounds; the model is corrupted or incomplete");
    }
    t.data = base_ + data_start + t.offset;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<uint64_t> GgufFile::opt_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v->data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v->data); i && *i >= 0) return uint64_t(*i);
  fail(value_type_mismatch(key, *v, "a non-negative integer"));
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  auto v = opt_uint(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  return *v;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  if (const auto* i = std::get_if<int64_t>(&v->data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v->data);
      u && *u <= uint64_t(std::numeric_limits<int64_t>::max())) {
    return int64_t(*u);
  }
  fail(value_type_mismatch(key, *v, "an integer"));
}

std::optional<double> GgufFile::opt_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const auto* d = std::get_if<double>(&v->data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v->data)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&v->data)) return double(*i);
  fail(value_type_mismatch(key, *v, "a number"));
}

double GgufFile::get_float(std::string_view key) const {
  auto v = opt_float(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  return *v;
}

std::optional<bool> GgufFile::opt_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  fail(value_type_mismatch(key, *v, "bool"));
}

bool GgufFile::get_bool(std::string_view key) const {
  auto v = opt_bool(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  return *v;
}

std::optional<std::string> GgufFile::opt_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  fail(value_type_mismatch(key, *v, "string"));
}

std::string GgufFile::get_string(std::string_view key) const {
  auto v = opt_string(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  return *v;
}

const GgufArray& GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("missing metadata key '" + std::string(key) + "'");
  if (const auto* a = std::get_if<GgufArray>(&v->data)) {
    if (a->n_unread) {
      fail("metadata '" + std::string(key) + "': the array of " + std::to_string(a->n_unread) +
           " elements was not read (clchat keeps " + std::to_string(k_gguf_max_other_array_items) +
           " elements of arrays it does not use)");
    }
    return *a;
  }
  fail(value_type_mismatch(key, *v, "array"));
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  if (a.elem_type != GgufValueType::STRING) {
    fail("metadata '" + std::string(key) + "' is an array of " + gguf_value_type_name(a.elem_type) +
         ", expected strings");
  }
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) out.push_back(std::get<std::string>(item.data));
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) {
    if (const auto* d = std::get_if<double>(&item.data)) {
      out.push_back(float(*d));
    } else if (const auto* u = std::get_if<uint64_t>(&item.data)) {
      out.push_back(float(*u));
    } else if (const auto* i = std::get_if<int64_t>(&item.data)) {
      out.push_back(float(*i));
    } else {
      fail("metadata '" + std::string(key) + "' is not an array of numbers");
    }
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufArray& a = get_array(key);
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) {
    if (const auto* i = std::get_if<int64_t>(&item.data)) {
      out.push_back(*i);
    } else if (const auto* u = std::get_if<uint64_t>(&item.data);
               u && *u <= uint64_t(std::numeric_limits<int64_t>::max())) {
      out.push_back(int64_t(*u));
    } else {
      fail("metadata '" + std::string(key) + "' is not an array of integers");
    }
  }
  return out;
}

// ---- writer ----------------------------------------------------------------

namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
  }
  std::vector<uint8_t> bytes;
};

void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
      out.put<uint8_t>(uint8_t(std::get<uint64_t>(v.data)));
      break;
    case GgufValueType::INT8:
      out.put<int8_t>(int8_t(std::get<int64_t>(v.data)));
      break;
    case GgufValueType::UINT16:
      out.put<uint16_t>(uint16_t(std::get<uint64_t>(v.data)));
      break;
    case GgufValueType::INT16:
      out.put<int16_t>(int16_t(std::get<int64_t>(v.data)));
      break;
    case GgufValueType::UINT32:
      out.put<uint32_t>(uint32_t(std::get<uint64_t>(v.data)));
      break;
    case GgufValueType::INT32:
      out.put<int32_t>(int32_t(std::get<int64_t>(v.data)));
      break;
    case GgufValueType::UINT64:
      out.put<uint64_t>(std::get<uint64_t>(v.data));
      break;
    case GgufValueType::INT64:
      out.put<int64_t>(std::get<int64_t>(v.data));
      break;
    case GgufValueType::FLOAT32:
      out.put<float>(float(std::get<double>(v.data)));
      break;
    case GgufValueType::FLOAT64:
      out.put<double>(std::get<double>(v.data));
      break;
    case GgufValueType::BOOL:
      out.put<uint8_t>(std::get<bool>(v.data) ? 1 : 0);
      break;
    case GgufValueType::STRING:
      out.put_string(std::get<std::string>(v.data));
      break;
    case GgufValueType::ARRAY: {
      const auto& a = std::get<GgufArray>(v.data);
      if (a.n_unread) throw std::invalid_argument("GgufWriter: an array that was not read");
      out.put<uint32_t>(uint32_t(a.elem_type));
      out.put<uint64_t>(a.items.size());
      for (const auto& item : a.items) put_value(out, item);
      break;
    }
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                            std::vector<uint8_t> data) {
  uint64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  const auto row_bytes = ggml_row_bytes(type, dims.empty() ? 0 : dims[0]);
  if (dims.empty() || !row_bytes || *row_bytes * rows != data.size()) {
    throw std::invalid_argument("GgufWriter: tensor '" + name + "' data does not match its shape");
  }
  tensors_.push_back({name, type, std::move(dims), std::move(data)});
}

std::vector<uint8_t> GgufWriter::serialize() const {
  ByteSink out;
  out.bytes.insert(out.bytes.end(), {'G', 'G', 'U', 'F'});
  out.put<uint32_t>(version_);
  out.put<uint64_t>(tensors_.size());
  const bool custom_alignment = alignment_ != 32;
  out.put<uint64_t>(kv_.size() + (custom_alignment ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    out.put_string(key);
    out.put<uint32_t>(uint32_t(value.type));
    put_value(out, value);
  }
  if (custom_alignment) {
    out.put_string("general.alignment");
    out.put<uint32_t>(uint32_t(GgufValueType::UINT32));
    out.put<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) out.put<uint64_t>(d);
    out.put<uint32_t>(uint32_t(t.type));
    out.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  for (const auto& t : tensors_) {
    out.bytes.insert(out.bytes.end(), t.data.begin(), t.data.end());
    out.pad_to(alignment_);
  }
  return out.bytes;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace clchat
