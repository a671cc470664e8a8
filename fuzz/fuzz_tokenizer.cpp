// Tokenizer targets: arbitrary bytes (ill-formed UTF-8, NULs, control
// tokens' text) through encode() and decode() of a real vocabulary of each
// kind. The first input byte holds flags:
//   bit 0: add_bos, bit 1: parse_special (encode the rest as text);
//   bit 2: decode the rest as little-endian int32 ids (any value) instead.
// Invariants: ids are inside the vocabulary; without special tokens, byte-level
// BPE decodes back to the exact input (bytes the vocabulary lacks become
// U+FFFD), and SentencePiece to the input with its space prefix; streaming the
// decoded pieces gives valid UTF-8 equal to the sanitized decode().
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode_bytes.h"
#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {
namespace {

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const char* env, const std::string& fallback) {
  const char* path = std::getenv(env);
  Loaded l;
  l.file = GgufFile::open(path && *path ? path : shared_dir() + "/" + fallback);
  l.tok = Tokenizer::from_gguf(*l.file);
  return l;
}

const Tokenizer& bpe() {
  static const Loaded l = load("CLCHAT_FUZZ_BPE_VOCAB", "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  return *l.tok;
}

const Tokenizer& spm() {
  static const Loaded l =
      load("CLCHAT_FUZZ_SPM_VOCAB", "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  return *l.tok;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// What decode(encode(text)) must give without special-token parsing.
std::string expected_round_trip(const Tokenizer& tok, std::string_view text) {
  if (tok.kind() == Tokenizer::Kind::Bpe) {
    // Bytes the vocabulary has no token for are written as U+FFFD
    // (Tokenizer::from_gguf explains why).
    std::string out;
    for (char c : text) {
      const bool known = tok.find_token(byte_to_unicode_utf8(static_cast<uint8_t>(c))).has_value();
      out += known ? std::string_view(&c, 1) : k_utf8_replacement;
    }
    return out;
  }
  if (text.empty()) return "";
  // SentencePiece: spaces travel as U+2581 and come back as spaces, so a
  // U+2581 in the input also comes back as a space.
  std::string out = tok.add_space_prefix() ? " " : "";
  return out + replace_all(std::string(text), "\xE2\x96\x81", " ");
}

void stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  Utf8StreamDecoder stream;
  std::string shown;
  for (int32_t id : ids) {
    const std::string piece = stream.push(tok.token_to_bytes(id));
    require(is_valid_utf8(piece), "stream decoder gave ill-formed UTF-8");
    require(stream.pending() <= 3, "stream decoder holds more than 3 bytes");
    shown += piece;
  }
  shown += stream.finish();
  require(is_valid_utf8(shown), "stream decoder gave ill-formed UTF-8 at the end");
  require(shown == sanitize_utf8(tok.decode(ids)), "streamed text differs from decode()");
}

int fuzz_tokenizer(const Tokenizer& tok, const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (flags & 4) {
    std::vector<int32_t> ids(rest.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
    stream_decode(tok, ids);
    return 0;
  }
  const bool add_bos = flags & 1;
  const bool parse_special = flags & 2;
  const std::vector<int32_t> ids = tok.encode(rest, add_bos, parse_special);
  for (int32_t id : ids) require(id >= 0 && id < tok.n_vocab(), "encode() id out of range");
  if (!add_bos && !parse_special) {
    require(tok.decode(ids) == expected_round_trip(tok, rest), "decode(encode(text)) != text");
  }
  stream_decode(tok, ids);
  return 0;
}

}  // namespace

int fuzz_tokenizer_bpe(const uint8_t* data, size_t size) {
  require(bpe().kind() == Tokenizer::Kind::Bpe, "the BPE vocabulary is not BPE");
  return fuzz_tokenizer(bpe(), data, size);
}

int fuzz_tokenizer_spm(const uint8_t* data, size_t size) {
  require(spm().kind() == Tokenizer::Kind::Spm, "the SPM vocabulary is not SPM");
  return fuzz_tokenizer(spm(), data, size);
}

}  // namespace clchat::fuzz
