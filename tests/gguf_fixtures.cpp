// Small llama GGUF fixtures and raw GGUF byte tools (see gguf_fixtures.h).
#include "tests/gguf_fixtures.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "engine/gguf/quant.h"

namespace clchat::test {

namespace {

// llama.cpp's LLAMA_FTYPE_* for a file whose matrices are all `type`.
uint32_t file_type_id(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q4_1:
      return 3;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q5_0:
      return 8;
    case GgmlType::Q5_1:
      return 9;
    case GgmlType::Q2_K:
      return 10;
    case GgmlType::Q3_K:
      return 11;  // Q3_K_S
    case GgmlType::Q4_K:
      return 14;  // Q4_K_S
    case GgmlType::Q5_K:
      return 16;  // Q5_K_S
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::IQ4_NL:
      return 25;
    case GgmlType::IQ4_XS:
      return 30;
    case GgmlType::BF16:
      return 32;
  }
  return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Merges in priority order: common English pieces, enough for
// "Once upon a time, there was a little girl named Lily" to merge a bit.
const char* const k_merges[] = {
    "Ġ t",   "h e",   "i n",  "e r",  "a n",   "o n",   "Ġ a", "r e",  "Ġt he", "Ġ s",  "e n",
    "o u",   "Ġ w",   "a t",  "i s",  "o r",   "e s",   "Ġ o", "l l",  "i t",   "Ġ b",  "Ġ c",
    "Ġ h",   "Ġ m",   "Ġ f",  "Ġ d",  "a r",   "in g",  "e d", "Ġ p",  "Ġt o",  "Ġa n", "Ġ i",
    "Ġo f",  "Ġan d", "Ġ l",  "h i",  "Ġ n",   "o m",   "l e", "a s",  "Ġw as", "Ġ T",  "Ġ I",
    "Ġs he", "Ġh e",  "Ġi t", "Ġi s", "Ġ re",  "Ġ g",   "Ġ y", "ou r", "Ġy ou", "Ġ e",  "o w",
    "i l",   "l y",   "Ġ H",  "Ġ L",  "ĠL il", "ĠLil y"};

GgufValue u32_value(uint64_t v) { return GgufValue::u32(uint32_t(v)); }

}  // namespace

// ---- vocabulary ---------------------------------------------------------------

std::string gpt2_byte_to_unicode(uint8_t b) {
  // GPT-2's bytes_to_unicode(): '!'..'~', '¡'..'¬', '®'..'ÿ' keep their code
  // point; the remaining bytes get 256, 257, ... in byte order.
  auto printable = [](int c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  uint32_t cp = b;
  if (!printable(b)) {
    uint32_t n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  append_utf8(s, cp);
  return s;
}

std::vector<std::pair<std::string, GgufValue>> vocab_metadata(const TinyVocab& v) {
  std::vector<GgufValue> tokens, types, merges;
  for (const auto& t : v.tokens) tokens.push_back(GgufValue::str(t));
  for (int32_t t : v.token_types) types.push_back(GgufValue::i32(t));
  for (const auto& m : v.merges) merges.push_back(GgufValue::str(m));
  return {{"tokenizer.ggml.tokens", GgufValue::array(GgufValueType::STRING, std::move(tokens))},
          {"tokenizer.ggml.token_type", GgufValue::array(GgufValueType::INT32, std::move(types))},
          {"tokenizer.ggml.merges", GgufValue::array(GgufValueType::STRING, std::move(merges))}};
}

TinyVocab make_tiny_vocab(int n_vocab) {
  if (n_vocab < 1) throw std::invalid_argument("make_tiny_vocab: n_vocab must be positive");
  TinyVocab v;
  auto add = [&](std::string text, int32_t type) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
  };
  add("<|endoftext|>", 3);
  add("<|im_start|>", 3);
  add("<|im_end|>", 3);
  for (int b = 0; b < 256; ++b) add(gpt2_byte_to_unicode(uint8_t(b)), 1);
  for (const char* merge : k_merges) {
    const std::string m = merge;
    const size_t space = m.find(' ');
    const std::string result = m.substr(0, space) + m.substr(space + 1);
    if (std::find(v.tokens.begin(), v.tokens.end(), result) != v.tokens.end()) {
      throw std::logic_error("make_tiny_vocab: duplicate merge result " + result);
    }
    add(result, 1);
    v.merges.push_back(m);
  }
  for (int i = 0; int(v.tokens.size()) < n_vocab; ++i) {
    add("<|reserved_" + std::to_string(i) + "|>", 3);
  }
  if (int(v.tokens.size()) > n_vocab) {
    v.tokens.resize(size_t(n_vocab));
    v.token_types.resize(size_t(n_vocab));
    const auto has = [&](const std::string& t) {
      return std::find(v.tokens.begin(), v.tokens.end(), t) != v.tokens.end();
    };
    std::vector<std::string> kept;
    for (const std::string& m : v.merges) {
      const size_t space = m.find(' ');
      const std::string left = m.substr(0, space), right = m.substr(space + 1);
      if (has(left) && has(right) && has(left + right)) kept.push_back(m);
    }
    v.merges = std::move(kept);
  }
  return v;
}

// ---- tensors and models -------------------------------------------------------

FixtureTensor make_random_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                                 uint32_t seed, float lo, float hi) {
  if (dims.empty()) throw std::invalid_argument("make_random_tensor: no dimensions");
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> raw(n);
  for (float& x : raw) x = dist(rng);
  if (!ggml_row_bytes(type, dims[0])) {
    throw std::invalid_argument("make_random_tensor: '" + name + "' row length " +
                                std::to_string(dims[0]) + " does not fit " + ggml_type_name(type));
  }
  FixtureTensor t;
  t.name = name;
  t.type = type;
  t.dims = std::move(dims);
  t.data = quantize_matrix(type, raw, t.dims[0]);
  t.values = dequantize_matrix(type, t.data, t.dims[0], n / t.dims[0]);
  return t;
}

TinyModel make_tiny_model(const TinyModelSpec& spec) {
  if (spec.n_embd <= 0 || spec.n_layer <= 0 || spec.n_head <= 0 || spec.n_head_kv <= 0 ||
      spec.n_ff <= 0 || spec.n_vocab <= 0 || spec.n_embd % spec.n_head != 0 ||
      spec.n_head % spec.n_head_kv != 0) {
    throw std::invalid_argument("make_tiny_model: inconsistent hyper-parameters");
  }
  TinyModel m;
  m.spec = spec;
  const uint64_t embd = uint64_t(spec.n_embd), ff = uint64_t(spec.n_ff);
  const uint64_t head_dim = embd / uint64_t(spec.n_head);
  const uint64_t embd_kv = head_dim * uint64_t(spec.n_head_kv);
  const uint64_t vocab = uint64_t(spec.n_vocab);

  auto& md = m.metadata;
  md.emplace_back("general.architecture", GgufValue::str("llama"));
  md.emplace_back("general.name", GgufValue::str(spec.name));
  md.emplace_back("general.file_type", GgufValue::u32(file_type_id(spec.weight_type)));
  md.emplace_back("llama.vocab_size", u32_value(vocab));
  md.emplace_back("llama.context_length", u32_value(uint64_t(spec.n_ctx_train)));
  md.emplace_back("llama.embedding_length", u32_value(embd));
  md.emplace_back("llama.block_count", u32_value(uint64_t(spec.n_layer)));
  md.emplace_back("llama.feed_forward_length", u32_value(ff));
  md.emplace_back("llama.rope.dimension_count",
                  u32_value(spec.n_rot ? uint64_t(spec.n_rot) : head_dim));
  md.emplace_back("llama.attention.head_count", u32_value(uint64_t(spec.n_head)));
  md.emplace_back("llama.attention.head_count_kv", u32_value(uint64_t(spec.n_head_kv)));
  md.emplace_back("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(spec.rms_eps));
  md.emplace_back("llama.rope.freq_base", GgufValue::f32(spec.rope_freq_base));
  if (spec.tokenizer) {
    md.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
    md.emplace_back("tokenizer.ggml.pre", GgufValue::str(spec.tokenizer_pre));
    for (auto& kv : vocab_metadata(make_tiny_vocab(spec.n_vocab))) md.push_back(std::move(kv));
    // <|endoftext|> 0 doubles as unk and padding, as in SmolLM2.
    const std::pair<const char*, uint64_t> ids[] = {{"tokenizer.ggml.bos_token_id", 1},
                                                    {"tokenizer.ggml.eos_token_id", 2},
                                                    {"tokenizer.ggml.unknown_token_id", 0},
                                                    {"tokenizer.ggml.padding_token_id", 0}};
    for (const auto& [key, id] : ids) {
      if (id < vocab) md.emplace_back(key, u32_value(id));
    }
    md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  }

  // Weights ~ U(-a, a) with a = sqrt(3 / fan_in), so activations keep their
  // scale through the layers; norms near 1; embeddings in [-1, 1).
  uint32_t seed = spec.seed * 1000003u;
  const GgmlType wt = spec.weight_type;
  auto matrix = [&](const std::string& name, GgmlType type, uint64_t n_in, uint64_t n_out) {
    const float a = std::sqrt(3.0f / float(n_in));
    m.tensors.push_back(make_random_tensor(name, type, {n_in, n_out}, ++seed, -a, a));
  };
  auto norm = [&](const std::string& name) {
    m.tensors.push_back(make_random_tensor(name, GgmlType::F32, {embd}, ++seed, 0.8f, 1.2f));
  };
  m.tensors.push_back(make_random_tensor("token_embd.weight", spec.embd_type.value_or(wt),
                                         {embd, vocab}, ++seed, -1.0f, 1.0f));
  norm("output_norm.weight");
  if (!spec.tied) matrix("output.weight", wt, embd, vocab);
  for (int il = 0; il < spec.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    norm(b + "attn_norm.weight");
    matrix(b + "attn_q.weight", wt, embd, embd);
    matrix(b + "attn_k.weight", wt, embd, embd_kv);
    matrix(b + "attn_v.weight", wt, embd, embd_kv);
    matrix(b + "attn_output.weight", wt, embd, embd);
    norm(b + "ffn_norm.weight");
    matrix(b + "ffn_gate.weight", wt, embd, ff);
    matrix(b + "ffn_up.weight", wt, embd, ff);
    matrix(b + "ffn_down.weight", wt, ff, embd);
  }
  return m;
}

const GgufValue* TinyModel::find_metadata(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

void TinyModel::set_metadata(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata.emplace_back(key, std::move(value));
}

bool TinyModel::erase_metadata(std::string_view key) {
  const auto it = std::find_if(metadata.begin(), metadata.end(),
                               [&](const auto& kv) { return kv.first == key; });
  if (it == metadata.end()) return false;
  metadata.erase(it);
  return true;
}

FixtureTensor* TinyModel::find_tensor(std::string_view name) {
  for (auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const FixtureTensor& TinyModel::tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("TinyModel: no tensor " + std::string(name));
}

bool TinyModel::erase_tensor(std::string_view name) {
  const auto it =
      std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name == name; });
  if (it == tensors.end()) return false;
  tensors.erase(it);
  return true;
}

GgufWriter TinyModel::writer() const {
  GgufWriter w;
  w.set_version(spec.version);
  w.set_alignment(spec.alignment);
  for (const auto& [k, v] : metadata) w.set(k, v);
  for (const auto& t : tensors) w.add_tensor(t.name, t.type, t.dims, t.data);
  return w;
}

std::vector<uint8_t> TinyModel::bytes() const { return writer().serialize(); }

std::string TinyModel::write(const std::string& path) const {
  writer().write(path);
  return path;
}

// ---- files ----------------------------------------------------------------------

TempDir::TempDir() {
  // $TMPDIR when set; else /dev/shm, since the malformed-file corpus writes
  // thousands of small files and a disk file system makes that slow.
  std::filesystem::path root = std::filesystem::temp_directory_path();
  const char* tmpdir = std::getenv("TMPDIR");
  if ((!tmpdir || !*tmpdir) && access("/dev/shm", W_OK | X_OK) == 0) root = "/dev/shm";
  std::string tmpl = (root / "clchat-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("TempDir: mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort; never throw from here
}

std::string TempDir::write(const std::string& name, std::span<const uint8_t> bytes) const {
  const std::string p = file(name);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  if (!f) throw std::runtime_error("TempDir: cannot write " + p);
  return p;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("read_bytes: cannot open " + path);
  std::vector<uint8_t> bytes(size_t(f.tellg()));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("read_bytes: cannot read " + path);
  return bytes;
}

// ---- raw bytes --------------------------------------------------------------------

ByteWriter& ByteWriter::str(std::string_view s) {
  u64(s.size());
  return raw(s);
}

ByteWriter& ByteWriter::raw(std::span<const uint8_t> b) {
  bytes.insert(bytes.end(), b.begin(), b.end());
  return *this;
}

ByteWriter& ByteWriter::raw(std::string_view s) {
  bytes.insert(bytes.end(), s.begin(), s.end());
  return *this;
}

ByteWriter& ByteWriter::pad_to(uint64_t alignment) {
  while (bytes.size() % alignment != 0) bytes.push_back(0);
  return *this;
}

ByteWriter& ByteWriter::header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  raw(std::string_view("GGUF"));
  return u32(version).u64(n_tensors).u64(n_kv);
}

void patch_u32(std::vector<uint8_t>& bytes, uint64_t at, uint32_t v) {
  if (at + 4 > bytes.size()) throw std::out_of_range("patch_u32 past the end");
  std::memcpy(bytes.data() + at, &v, 4);
}

void patch_u64(std::vector<uint8_t>& bytes, uint64_t at, uint64_t v) {
  if (at + 8 > bytes.size()) throw std::out_of_range("patch_u64 past the end");
  std::memcpy(bytes.data() + at, &v, 8);
}

uint32_t load_u32(std::span<const uint8_t> bytes, uint64_t at) {
  if (at + 4 > bytes.size()) throw std::runtime_error("GGUF layout: truncated u32");
  uint32_t v;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

uint64_t load_u64(std::span<const uint8_t> bytes, uint64_t at) {
  if (at + 8 > bytes.size()) throw std::runtime_error("GGUF layout: truncated u64");
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}

namespace {

// Byte size of the scalar value types (GGUF spec numbering); 0 for string and
// array, which have their own encodings.
uint64_t scalar_size(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 7:
      return 1;
    case 2:
    case 3:
      return 2;
    case 4:
    case 5:
    case 6:
      return 4;
    case 10:
    case 11:
    case 12:
      return 8;
    case 8:
    case 9:
      return 0;
  }
  throw std::runtime_error("GGUF layout: unknown value type " + std::to_string(type));
}

class LayoutWalker {
 public:
  explicit LayoutWalker(std::span<const uint8_t> b) : b_(b) {}
  uint64_t pos = 0;

  uint32_t u32() {
    const uint32_t v = load_u32(b_, pos);
    pos += 4;
    return v;
  }
  uint64_t u64() {
    const uint64_t v = load_u64(b_, pos);
    pos += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (n > b_.size() - pos) throw std::runtime_error("GGUF layout: string past the end");
    std::string s(reinterpret_cast<const char*>(b_.data() + pos), n);
    pos += n;
    return s;
  }
  void skip_value(uint32_t type) {
    if (type == 8) {
      str();
    } else if (type == 9) {
      const uint32_t elem = u32();
      const uint64_t count = u64();
      for (uint64_t i = 0; i < count; ++i) skip_value(elem);
    } else {
      const uint64_t n = scalar_size(type);
      if (n > b_.size() - pos) throw std::runtime_error("GGUF layout: value past the end");
      pos += n;
    }
  }

 private:
  std::span<const uint8_t> b_;
};

}  // namespace

GgufLayout parse_gguf_layout(std::span<const uint8_t> bytes) {
  if (bytes.size() < 24 || std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    throw std::runtime_error("GGUF layout: bad magic");
  }
  GgufLayout l;
  LayoutWalker w(bytes);
  w.pos = 4;
  l.version = w.u32();
  const uint64_t n_tensors = w.u64();
  const uint64_t n_kv = w.u64();
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufLayout::Kv kv;
    kv.key_len_at = w.pos;
    kv.key = w.str();
    kv.type_at = w.pos;
    kv.type = w.u32();
    kv.value_at = w.pos;
    if (kv.type == 9) {
      kv.array_type_at = w.pos;
      kv.array_count_at = w.pos + 4;
    }
    w.skip_value(kv.type);
    kv.end = w.pos;
    if (kv.key == "general.alignment") {
      if (kv.type != 4) throw std::runtime_error("GGUF layout: general.alignment not u32");
      l.alignment = load_u32(bytes, kv.value_at);
    }
    l.kvs.push_back(std::move(kv));
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufLayout::TensorInfo t;
    t.name_len_at = w.pos;
    t.name = w.str();
    t.n_dims_at = w.pos;
    const uint32_t n_dims = w.u32();
    if (n_dims > 4) throw std::runtime_error("GGUF layout: too many dimensions");
    for (uint32_t d = 0; d < n_dims; ++d) {
      t.dim_at.push_back(w.pos);
      t.dims.push_back(w.u64());
    }
    t.type_at = w.pos;
    t.type = w.u32();
    t.offset_at = w.pos;
    t.offset = w.u64();
    t.end = w.pos;
    l.tensors.push_back(std::move(t));
  }
  l.header_end = w.pos;
  l.data_start = (w.pos + l.alignment - 1) / l.alignment * l.alignment;
  return l;
}

const GgufLayout::Kv& GgufLayout::kv(std::string_view key) const {
  for (const auto& kv : kvs) {
    if (kv.key == key) return kv;
  }
  throw std::out_of_range("GgufLayout: no key " + std::string(key));
}

const GgufLayout::TensorInfo& GgufLayout::tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("GgufLayout: no tensor " + std::string(name));
}

}  // namespace clchat::test
