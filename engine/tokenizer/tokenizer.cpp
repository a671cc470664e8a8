// Tokenizer: loading the vocabulary from GGUF, cutting out special tokens, and
// dispatching to byte-level BPE or SPM (see tokenizer.h).
//
// Everything that depends only on the vocabulary is computed here once: the
// merge table, the compiled pre-tokenizer, the byte -> token tables, the
// special tokens in matching order and the bytes every token decodes to.
// encode() then only reads these tables.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/spm.h"
#include "engine/tokenizer/unicode_bytes.h"
#include "engine/tokenizer/vocab.h"

namespace clchat {

namespace {

constexpr std::string_view k_spm_space = "\xE2\x96\x81";    // U+2581 '▁'
constexpr std::string_view k_spm_unknown = "\xE2\x96\x85";  // U+2585 '▅', as llama.cpp prints <unk>

// Special tokens that end a turn in common chat formats (the list llama.cpp
// checks by text besides the eos/eot/eom ids).
constexpr std::array<std::string_view, 10> k_eog_texts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",      "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<end_of_utterance>", "<|return|>",
};

// A piece of the text being encoded: either raw text or one special token.
struct Fragment {
  int32_t token = -1;  // -1: raw text
  std::string_view text;
};

bool is_special_type(TokenType type) {
  return type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown;
}

// Reads an optional token-id key. -1 and 0xFFFFFFFF (how converters write
// "none") give -1; any other id outside the vocabulary is an error.
int32_t read_token_id(const GgufFile& file, std::string_view key, int32_t n_vocab,
                      int32_t fallback) {
  const GgufValue* value = file.find(key);
  if (!value) return fallback < n_vocab ? fallback : -1;
  std::string shown;
  if (const auto* u = std::get_if<uint64_t>(&value->data)) {
    if (*u == 0xFFFFFFFFull || *u == std::numeric_limits<uint64_t>::max()) return -1;
    if (*u < static_cast<uint64_t>(n_vocab)) return static_cast<int32_t>(*u);
    shown = std::to_string(*u);
  } else if (const auto* i = std::get_if<int64_t>(&value->data)) {
    if (*i == -1) return -1;
    if (*i >= 0 && *i < n_vocab) return static_cast<int32_t>(*i);
    shown = std::to_string(*i);
  } else {
    file.fail(std::string(key) + " is not an integer");
  }
  file.fail(std::string(key) + " = " + shown + " is out of range (the vocabulary has " +
            std::to_string(n_vocab) + " tokens)");
}

std::vector<TokenType> read_token_types(const GgufFile& file, size_t n_vocab) {
  std::vector<TokenType> types;
  if (!file.has("tokenizer.ggml.token_type")) return types;
  const std::vector<int64_t> raw = file.get_int_array("tokenizer.ggml.token_type");
  if (raw.size() != n_vocab) {
    file.fail("tokenizer.ggml.token_type has " + std::to_string(raw.size()) + " entries for " +
              std::to_string(n_vocab) + " tokens");
  }
  types.reserve(n_vocab);
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] < 0 || raw[i] > static_cast<int64_t>(TokenType::Byte)) {
      file.fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(raw[i]) +
                " is not a token type (0..6)");
    }
    types.push_back(static_cast<TokenType>(raw[i]));
  }
  return types;
}

std::unique_ptr<Vocab> read_vocab(const GgufFile& file) {
  if (!file.has("tokenizer.ggml.tokens")) file.fail("missing tokenizer.ggml.tokens");
  std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) file.fail("tokenizer.ggml.tokens is empty");
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    file.fail("tokenizer.ggml.tokens has too many entries");
  }
  std::vector<float> scores;
  if (file.has("tokenizer.ggml.scores")) {
    scores = file.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != tokens.size()) {
      file.fail("tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                std::to_string(tokens.size()) + " tokens");
    }
  }
  std::vector<TokenType> types = read_token_types(file, tokens.size());
  return std::make_unique<Vocab>(std::move(tokens), std::move(scores), std::move(types));
}

// Parses "left right" merges into ids; rank = position in the list.
void read_merges(const GgufFile& file, const Vocab& vocab, BpeMerges& merges) {
  if (!file.has("tokenizer.ggml.merges")) file.fail("missing tokenizer.ggml.merges");
  const std::vector<std::string> lines = file.get_string_array("tokenizer.ggml.merges");
  if (lines.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    file.fail("tokenizer.ggml.merges has too many entries");
  }
  std::string joined;
  for (size_t rank = 0; rank < lines.size(); ++rank) {
    const std::string& line = lines[rank];
    const auto where = [&] { return "tokenizer.ggml.merges[" + std::to_string(rank) + "] '"; };
    // Search from 1: a merge's left side is never empty.
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos) file.fail(where() + line + "' is not 'left right'");
    const std::string_view left = std::string_view(line).substr(0, space);
    const std::string_view right = std::string_view(line).substr(space + 1);
    joined.assign(left).append(right);
    const int32_t left_id = vocab.find(left), right_id = vocab.find(right);
    const int32_t result = vocab.find(joined);
    if (left_id < 0 || right_id < 0 || result < 0) {
      const std::string_view missing = left_id < 0 ? left : right_id < 0 ? right : joined;
      file.fail(where() + line + "' names a token not in the vocabulary: '" + std::string(missing) +
                "'");
    }
    merges.add(left_id, right_id, result, static_cast<int32_t>(rank));
  }
}

// "<0x41>" -> 0x41; nullopt for any other text.
std::optional<uint8_t> parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') {
      value += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value += c - 'a' + 10;
    } else {
      return std::nullopt;
    }
  }
  return static_cast<uint8_t>(value);
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos;
       pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos)).append(to);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

struct Tokenizer::Tables {
  Kind kind = Kind::Bpe;
  std::unique_ptr<Vocab> vocab;
  std::string pre;
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  bool add_bos = false;
  bool add_space_prefix = false;

  // BPE only: the merge table and the pre-tokenizer.
  BpeMerges merges;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  bool ignore_merges = false;
  // BPE: token of each byte's alphabet character (-1 when missing); SPM:
  // <0xNN> byte tokens.
  ByteTokens byte_tokens{};
  // BPE: the byte tokens of U+FFFD, written for a byte the vocabulary lacks.
  std::vector<int32_t> replacement;

  std::vector<int32_t> special;    // special tokens, longest text first
  std::vector<char> eog;           // per id: ends generation
  std::vector<std::string> bytes;  // per id: token_to_bytes()

  bool valid(int32_t id) const { return vocab->valid(id); }
  std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                  std::span<const TextSpan> plain) const;
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special,
                              std::span<const TextSpan> plain) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, bool after_special, std::vector<int32_t>& out) const;
  std::string bytes_of(int32_t id) const;
  void init_special();
};

std::string Tokenizer::Tables::bytes_of(int32_t id) const {
  const std::string& text = vocab->text(id);
  switch (vocab->type(id)) {
    case TokenType::Normal:
      return kind == Kind::Bpe ? unicode_text_to_bytes(text) : replace_all(text, k_spm_space, " ");
    case TokenType::UserDefined:
      return kind == Kind::Bpe ? text : replace_all(text, k_spm_space, " ");
    case TokenType::Byte:
      if (auto b = parse_byte_token(text)) return std::string(1, static_cast<char>(*b));
      return kind == Kind::Bpe ? unicode_text_to_bytes(text) : text;
    case TokenType::Unknown:
      return kind == Kind::Spm ? std::string(k_spm_unknown) : std::string();
    default:  // control, unused, undefined: markup, never printed
      return {};
  }
}

void Tokenizer::Tables::init_special() {
  const int32_t n = vocab->size();
  for (int32_t id = 0; id < n; ++id) {
    if (is_special_type(vocab->type(id)) && !vocab->text(id).empty()) special.push_back(id);
  }
  // Longest first, so <|im_start|> wins over a shorter token inside it.
  std::stable_sort(special.begin(), special.end(), [&](int32_t a, int32_t b) {
    return vocab->text(a).size() > vocab->text(b).size();
  });

  eog.assign(n, 0);
  for (int32_t id : {eos, eot, eom}) {
    if (id >= 0) eog[id] = 1;
  }
  for (std::string_view text : k_eog_texts) {
    const int32_t id = vocab->find(text);
    if (id >= 0 && is_special_type(vocab->type(id))) eog[id] = 1;
  }

  bytes.reserve(n);
  for (int32_t id = 0; id < n; ++id) bytes.push_back(bytes_of(id));
}

std::vector<Fragment> Tokenizer::Tables::partition(std::string_view text, bool parse_special,
                                                   std::span<const TextSpan> plain) const {
  // Whether bytes [at, at + n) of `text` touch a plain span.
  auto in_plain = [&](size_t at, size_t n) {
    return std::any_of(plain.begin(), plain.end(),
                       [&](const TextSpan& s) { return at < s.end && s.begin < at + n; });
  };
  std::vector<Fragment> fragments{{-1, text}}, next;
  for (int32_t id : special) {
    // Control and unknown tokens are text unless asked for; user-defined
    // tokens always match (llama.cpp, Hugging Face "added tokens").
    const bool user_defined = vocab->type(id) == TokenType::UserDefined;
    if (!parse_special && !user_defined) continue;
    const std::string& needle = vocab->text(id);
    if (text.find(needle) == std::string_view::npos) continue;  // cheap common case
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t base = size_t(f.text.data() - text.data());
      size_t pos = 0;  // start of the text not yet emitted
      for (size_t from = 0, hit; (hit = f.text.find(needle, from)) != std::string_view::npos;) {
        if (!user_defined && in_plain(base + hit, needle.size())) {
          from = hit + 1;  // a message's text, not markup
          continue;
        }
        if (hit > pos) next.push_back({-1, f.text.substr(pos, hit - pos)});
        next.push_back({id, {}});
        pos = from = hit + needle.size();
      }
      if (pos < f.text.size()) next.push_back({-1, f.text.substr(pos)});
    }
    fragments.swap(next);
  }
  return fragments;
}

void Tokenizer::Tables::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> words;
  pre_tokenizer->split(text, words);
  std::vector<int32_t> symbols;
  for (std::string_view word : words) {
    if (ignore_merges) {
      const int32_t whole = vocab->find(bytes_to_unicode_text(word));
      if (whole >= 0) {
        out.push_back(whole);
        continue;
      }
    }
    symbols.clear();
    for (char c : word) {
      const int32_t id = byte_tokens[static_cast<uint8_t>(c)];
      if (id >= 0) {
        symbols.push_back(id);
      } else {
        symbols.insert(symbols.end(), replacement.begin(), replacement.end());
      }
    }
    bpe_merge_word(merges, symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
  }
}

void Tokenizer::Tables::encode_spm(std::string_view text, bool after_special,
                                   std::vector<int32_t>& out) const {
  // llama.cpp prefixes a space at the start and after every special token.
  std::string escaped = add_space_prefix && after_special ? std::string(k_spm_space) : "";
  escaped += replace_all(text, " ", k_spm_space);
  spm_tokenize(*vocab, byte_tokens, escaped, out);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  auto t = std::make_unique<Tables>();
  const std::optional<std::string> model = file.opt_string("tokenizer.ggml.model");
  if (!model) file.fail("missing tokenizer.ggml.model");
  if (*model == "gpt2") {
    t->kind = Kind::Bpe;
  } else if (*model == "llama") {
    t->kind = Kind::Spm;
  } else {
    file.fail("unsupported tokenizer.ggml.model '" + *model + "' (clchat reads gpt2 and llama)");
  }
  const bool spm = t->kind == Kind::Spm;
  t->vocab = read_vocab(file);
  const int32_t n = t->vocab->size();

  // SentencePiece models fix unk/bos/eos at 0/1/2 when the keys are missing.
  t->bos = read_token_id(file, "tokenizer.ggml.bos_token_id", n, spm ? 1 : -1);
  t->eos = read_token_id(file, "tokenizer.ggml.eos_token_id", n, spm ? 2 : -1);
  t->unk = read_token_id(file, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1);
  t->pad = read_token_id(file, "tokenizer.ggml.padding_token_id", n, -1);
  t->eot = read_token_id(file, "tokenizer.ggml.eot_token_id", n, -1);
  t->eom = read_token_id(file, "tokenizer.ggml.eom_token_id", n, -1);
  t->add_bos = file.opt_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  t->add_space_prefix = file.opt_bool("tokenizer.ggml.add_space_prefix").value_or(spm);

  if (spm) {
    t->byte_tokens = spm_byte_tokens(*t->vocab, t->unk);
  } else {
    t->pre = file.opt_string("tokenizer.ggml.pre").value_or("default");
    const PreTokenizerSpec spec = pre_tokenizer_spec(t->pre);
    t->pre_tokenizer = std::make_unique<PreTokenizer>(spec.patterns);
    t->ignore_merges = spec.ignore_merges;
    read_merges(file, *t->vocab, t->merges);
    for (int b = 0; b < 256; ++b) {
      t->byte_tokens[b] = t->vocab->find(byte_to_unicode_utf8(static_cast<uint8_t>(b)));
    }
    // Trained vocabularies may lack bytes that (almost) never occur in UTF-8
    // text, such as 0xC0, 0xF5..0xFF or some control characters. llama.cpp
    // drops such a byte; writing U+FFFD instead keeps a trace of it. The unk
    // id is no fallback here: in StarCoder-style vocabularies it is
    // <|endoftext|>, which would end the text.
    for (char c : k_utf8_replacement) {
      const int32_t id = t->byte_tokens[static_cast<uint8_t>(c)];
      if (id < 0) {
        t->replacement.clear();
        break;
      }
      t->replacement.push_back(id);
    }
  }
  t->init_special();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(t)));
}

Tokenizer::Tokenizer(std::unique_ptr<const Tables> tables) : t_(std::move(tables)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::Tables::encode(std::string_view text, bool add_bos_token,
                                               bool parse_special,
                                               std::span<const TextSpan> plain) const {
  std::vector<int32_t> out;
  if (add_bos_token && add_bos && bos >= 0) out.push_back(bos);
  if (text.empty()) return out;
  out.reserve(out.size() + text.size() / 3 + 1);
  bool after_special = true;
  for (const Fragment& f : partition(text, parse_special, plain)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else if (kind == Kind::Bpe) {
      encode_bpe(f.text, out);
    } else {
      encode_spm(f.text, after_special, out);
      after_special = false;
    }
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  return t_->encode(text, add_bos, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_chat(std::string_view text, std::span<const TextSpan> plain,
                                            bool add_bos) const {
  return t_->encode(text, add_bos, true, plain);
}

Tokenizer::Kind Tokenizer::kind() const { return t_->kind; }
const std::string& Tokenizer::pre() const { return t_->pre; }
bool Tokenizer::add_bos() const { return t_->add_bos; }
bool Tokenizer::add_space_prefix() const { return t_->add_space_prefix; }
int32_t Tokenizer::bos_id() const { return t_->bos; }
int32_t Tokenizer::eos_id() const { return t_->eos; }
int32_t Tokenizer::unk_id() const { return t_->unk; }
int32_t Tokenizer::pad_id() const { return t_->pad; }
int32_t Tokenizer::n_vocab() const { return t_->vocab->size(); }

bool Tokenizer::is_eog(int32_t id) const { return t_->valid(id) && t_->eog[id]; }

bool Tokenizer::is_control(int32_t id) const {
  if (!t_->valid(id)) return false;
  const TokenType type = t_->vocab->type(id);
  return type == TokenType::Control || type == TokenType::Unused;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = t_->vocab->find(text);
  if (id < 0) return std::nullopt;
  return id;
}

std::string Tokenizer::token_to_bytes(int32_t id) const {
  return t_->valid(id) ? t_->bytes[id] : std::string();
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (t_->valid(id)) out += t_->bytes[id];
  }
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (!t_->valid(id)) {
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                            std::to_string(n_vocab()) + " tokens");
  }
  return t_->vocab->text(id);
}

}  // namespace clchat
