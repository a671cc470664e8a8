// Tokenizer tests. The expected ids all come from files made by llama.cpp
// (shared/tokenizer-vectors, shared/reference) or from facts stated in
// shared/models/SOURCE.md and shared/reference/README.md, never from running
// this tokenizer. Also: decode round trips, special-token parsing, ill-formed
// UTF-8, loader errors on broken vocabularies, speed on long inputs and
// concurrent use.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode_bytes.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using test::read_file;
using test::shared_file;
using Ids = std::vector<int32_t>;

// The vocabulary name that stands for the Gemma 3 model file, which is not in
// ../shared (test::gemma3_model() finds it).
constexpr const char* k_gemma3 = "gemma3";

// Loading a 50k-token vocabulary takes a while: each file is loaded once.
// `relative` is a path under ../shared, or k_gemma3.
const Tokenizer& tokenizer_for(const std::string& relative) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::unique_ptr<GgufFile>, std::unique_ptr<Tokenizer>>>
      cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[relative];
  if (!entry.second) {
    entry.first =
        GgufFile::open(relative == k_gemma3 ? test::gemma3_model() : shared_file(relative));
    entry.second = Tokenizer::from_gguf(*entry.first);
  }
  return *entry.second;
}

// llama.cpp's test-tokenizer-0 format: cases separated (and ended) by the
// separator line; line i of .out holds the ids of case i.
std::vector<std::string> read_cases(const std::string& path) {
  const std::string separator = "\n__ggml_vocab_test__\n";
  const std::string text = read_file(path);
  std::vector<std::string> cases;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(separator, pos)) != std::string::npos;
       pos = hit + separator.size()) {
    cases.push_back(text.substr(pos, hit - pos));
  }
  EXPECT_EQ(pos, text.size()) << path << " does not end with the separator";
  return cases;
}

std::vector<Ids> read_expected(const std::string& path) {
  std::vector<Ids> expected;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    Ids ids;
    for (int32_t id; fields >> id;) ids.push_back(id);
    expected.push_back(ids);
  }
  return expected;
}

// Text with control characters and non-ASCII bytes escaped, for messages.
std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (b >= 0x20 && b < 0x7F) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02X", b);
      out += hex;
    }
  }
  return out;
}

std::string describe(const Tokenizer& tok, const Ids& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool ok = ids[i] >= 0 && ids[i] < tok.n_vocab();
    // The bytes a token stands for read better than 'Ġ'-style vocabulary text.
    const std::string shown = !ok                      ? "?"
                              : tok.is_control(ids[i]) ? tok.token_text(ids[i])
                                                       : tok.token_to_bytes(ids[i]);
    out += (i ? ", " : "") + std::to_string(ids[i]) + " '" + escaped(shown) + "'";
  }
  return out + "]";
}

// The diff of two id lists: where they part and both sides from there.
std::string diff(const Tokenizer& tok, const Ids& expected, const Ids& actual) {
  size_t first = 0;
  while (first < expected.size() && first < actual.size() && expected[first] == actual[first]) {
    ++first;
  }
  const auto tail = [&](const Ids& ids) { return Ids(ids.begin() + first, ids.end()); };
  return "first difference at index " + std::to_string(first) +
         "\n  expected from there: " + describe(tok, tail(expected)) +
         "\n  actual from there:   " + describe(tok, tail(actual));
}

// ---------------------------------------------------------------- vectors

struct VectorFile {
  const char* name;
  const char* vocab;  // GGUF file holding the vocabulary
  const char* cases;  // .inp
  const char* ids;    // .out
  bool parse_special;
};

std::ostream& operator<<(std::ostream& os, const VectorFile& f) { return os << f.name; }

const VectorFile k_vector_files[] = {
    {"gpt2", "tokenizer-vectors/ggml-vocab-gpt-2.gguf",
     "tokenizer-vectors/ggml-vocab-gpt-2.gguf.inp", "tokenizer-vectors/ggml-vocab-gpt-2.gguf.out",
     false},
    {"starcoder", "tokenizer-vectors/ggml-vocab-starcoder.gguf",
     "tokenizer-vectors/ggml-vocab-starcoder.gguf.inp",
     "tokenizer-vectors/ggml-vocab-starcoder.gguf.out", false},
    {"llama_bpe", "tokenizer-vectors/ggml-vocab-llama-bpe.gguf",
     "tokenizer-vectors/ggml-vocab-llama-bpe.gguf.inp",
     "tokenizer-vectors/ggml-vocab-llama-bpe.gguf.out", false},
    {"qwen2", "tokenizer-vectors/ggml-vocab-qwen2.gguf",
     "tokenizer-vectors/ggml-vocab-qwen2.gguf.inp", "tokenizer-vectors/ggml-vocab-qwen2.gguf.out",
     false},
    {"llama_spm", "tokenizer-vectors/ggml-vocab-llama-spm.gguf",
     "tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp",
     "tokenizer-vectors/ggml-vocab-llama-spm.gguf.out", false},
    {"smollm2", "models/SmolLM2-135M-Instruct.Q4_1.gguf", "reference/tokenizer-smollm2.inp",
     "reference/tokenizer-smollm2.out", false},
    {"smollm2_special", "models/SmolLM2-135M-Instruct.Q4_1.gguf",
     "reference/tokenizer-smollm2-special.inp", "reference/tokenizer-smollm2-special.out", true},
    // llama-2-tiny-random carries the same Llama 2 vocabulary (tokens, scores
    // and types) as ggml-vocab-llama-spm, so the same vectors apply
    // (SameLlama2Vocabulary checks that premise).
    {"llama2_tiny_random", "models/llama-2-tiny-random.gguf",
     "tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp",
     "tokenizer-vectors/ggml-vocab-llama-spm.gguf.out", false},
    // Gemma 3's SentencePiece vocabulary (262,144 tokens, no space prefix),
    // read from the model file; ids by llama.cpp (reference/gemma3/README.md).
    {"gemma3", k_gemma3, "reference/gemma3/tokenizer-gemma3.inp",
     "reference/gemma3/tokenizer-gemma3.out", false},
};

// Skips a test whose vocabulary is the Gemma 3 model file when it is absent.
#define SKIP_IF_VOCAB_MISSING(vocab)                                    \
  if (std::string(vocab) == k_gemma3 && test::gemma3_model().empty()) { \
    GTEST_SKIP() << test::kGemma3Missing;                               \
  }

class TokenizerVectors : public ::testing::TestWithParam<VectorFile> {};

// The .out files hold llama.cpp's ids with add_special = false: no BOS.
TEST_P(TokenizerVectors, EveryCaseMatchesLlamaCpp) {
  const VectorFile& f = GetParam();
  SKIP_IF_VOCAB_MISSING(f.vocab);
  const Tokenizer& tok = tokenizer_for(f.vocab);
  const std::vector<std::string> cases = read_cases(shared_file(f.cases));
  const std::vector<Ids> expected = read_expected(shared_file(f.ids));
  ASSERT_GT(cases.size(), 5u);
  ASSERT_EQ(cases.size(), expected.size()) << f.cases << " and " << f.ids << " disagree";
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Ids actual = tok.encode(cases[i], /*add_bos=*/false, f.parse_special);
    if (actual == expected[i]) {
      ++passed;
      continue;
    }
    ADD_FAILURE() << f.name << " case " << i << ": \"" << escaped(cases[i]) << "\"\n"
                  << diff(tok, expected[i], actual);
  }
  std::printf("[ vectors  ] %s: %zu/%zu cases match\n", f.name, passed, cases.size());
}

// decode(encode(x)) == x: byte-level BPE loses nothing; SPM adds the space
// prefix in front (Gemma's has none). Special tokens are not parsed here (they decode to "").
TEST_P(TokenizerVectors, DecodeRoundTrip) {
  const VectorFile& f = GetParam();
  SKIP_IF_VOCAB_MISSING(f.vocab);
  const Tokenizer& tok = tokenizer_for(f.vocab);
  for (const std::string& text : read_cases(shared_file(f.cases))) {
    const Ids ids = tok.encode(text, false, false);
    const std::string expected =
        tok.kind() == Tokenizer::Kind::Spm && tok.add_space_prefix() && !text.empty() ? " " + text
                                                                                      : text;
    EXPECT_EQ(tok.decode(ids), expected) << f.name << ": \"" << escaped(text) << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(AllFiles, TokenizerVectors, ::testing::ValuesIn(k_vector_files),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Tokenizer, SameLlama2Vocabulary) {
  const Tokenizer& a = tokenizer_for("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  const Tokenizer& b = tokenizer_for("models/llama-2-tiny-random.gguf");
  ASSERT_EQ(a.n_vocab(), 32000);
  ASSERT_EQ(b.n_vocab(), a.n_vocab());
  for (int32_t id = 0; id < a.n_vocab(); ++id) ASSERT_EQ(a.token_text(id), b.token_text(id)) << id;
}

// prompt_ids in greedy-smollm2.json: special tokens parsed, no BOS added.
TEST(Tokenizer, SmolLM2GreedyPrompts) {
  const Tokenizer& tok = tokenizer_for("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const auto json = nlohmann::json::parse(read_file(shared_file("reference/greedy-smollm2.json")));
  ASSERT_GE(json["cases"].size(), 1u);
  for (const auto& c : json["cases"]) {
    const std::string prompt = c["prompt"];
    const Ids expected = c["prompt_ids"].get<Ids>();
    const Ids actual = tok.encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
    EXPECT_EQ(actual, expected) << "\"" << escaped(prompt) << "\"\n" << diff(tok, expected, actual);
  }
}

// ---------------------------------------------------------------- models

// Facts from shared/reference/README.md and shared/models/SOURCE.md.
TEST(Tokenizer, SmolLM2Metadata) {
  const Tokenizer& tok = tokenizer_for("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(tok.kind(), Tokenizer::Kind::Bpe);
  EXPECT_EQ(tok.pre(), "smollm");
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.pad_id(), 2);
  EXPECT_EQ(tok.find_token("<|im_start|>"), 1);
  EXPECT_EQ(tok.find_token("<|im_end|>"), 2);
  EXPECT_EQ(tok.find_token("<|endoftext|>"), 0);
  EXPECT_EQ(tok.find_token("<repo_name>"), 3);
  EXPECT_EQ(tok.find_token("no such token here"), std::nullopt);
  EXPECT_TRUE(tok.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(tok.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.is_eog(504));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(tok.n_vocab()));
  for (int32_t id = 0; id <= 16; ++id) {  // "ids 0..16 are special tokens"
    EXPECT_TRUE(tok.is_control(id)) << id;
    EXPECT_EQ(tok.token_to_bytes(id), "") << id;
  }
  EXPECT_FALSE(tok.is_control(17));
  EXPECT_EQ(tok.token_text(1), "<|im_start|>");
  EXPECT_THROW(tok.token_text(tok.n_vocab()), std::out_of_range);
  EXPECT_THROW(tok.token_text(-1), std::out_of_range);
  EXPECT_EQ(tok.token_to_bytes(-5), "");
  EXPECT_EQ(tok.token_to_bytes(tok.n_vocab()), "");
}

TEST(Tokenizer, Stories260KOnceUponATime) {
  const Tokenizer& tok = tokenizer_for("models/stories260K.gguf");
  EXPECT_EQ(tok.kind(), Tokenizer::Kind::Spm);
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), -1);  // stored as 0xFFFFFFFF: none
  EXPECT_EQ(tok.encode("Once upon a time", true, false), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.encode("Once upon a time", false, false), (Ids{403, 407, 261, 378}));
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_TRUE(tok.is_control(1));
  EXPECT_EQ(tok.token_to_bytes(1), "");
  EXPECT_EQ(tok.token_to_bytes(3 + '\n'), "\n");  // <0x0A>
}

// SOURCE.md: the prompt and its 60 greedy ids decode to this text. The SPM
// space prefix shows as a leading space.
TEST(Tokenizer, Stories260KDecode) {
  const Tokenizer& tok = tokenizer_for("models/stories260K.gguf");
  const Ids ids = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                   401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385,
                   328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267,
                   337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};
  EXPECT_EQ(tok.decode(ids),
            " Once upon a time, there was a little girl named Lily. She loved to play outside in "
            "the park. One day, she saw a big, red ball. She wanted to play with it, but it was "
            "too high.\nLily");
}

// Gemma 3: the vocabulary is read from the model file's GGUF keys alone,
// 262,144 tokens (the load time is printed, never asserted: about 0.1 s on a
// 2-core machine), and prompt_ids in greedy-gemma3.json (BOS 2 added,
// special tokens parsed) are reproduced.
TEST(Tokenizer, Gemma3LoadsAndEncodesTheGreedyPrompts) {
  const std::string path = test::gemma3_model();
  if (path.empty()) GTEST_SKIP() << test::kGemma3Missing;
  const auto start = std::chrono::steady_clock::now();
  const auto file = GgufFile::open(path);
  const auto tok = Tokenizer::from_gguf(*file);
  const double t_load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ timing   ] Gemma 3 vocabulary loaded in %.0f ms\n", t_load_s * 1e3);
  EXPECT_EQ(tok->n_vocab(), 262144);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::Spm);
  const auto j =
      nlohmann::json::parse(read_file(shared_file("reference/gemma3/greedy-gemma3.json")));
  ASSERT_FALSE(j["cases"].empty());
  for (const auto& c : j["cases"]) {
    const std::string prompt = c["prompt"];
    const Ids expected = c["prompt_ids"].get<Ids>();
    const Ids actual = tok->encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
    EXPECT_EQ(actual, expected) << escaped(prompt) << "\n" << diff(*tok, expected, actual);
  }
}

TEST(Tokenizer, Llama2AddsBosByDefault) {
  // llama-2-tiny-random has no add_bos_token key: SPM models default to BOS.
  const Tokenizer& tok = tokenizer_for("models/llama-2-tiny-random.gguf");
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.add_space_prefix());
  const Ids ids = tok.encode("Hello", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok.encode("", true, false), (Ids{1}));
  EXPECT_EQ(tok.encode("", false, false), Ids{});
}

// ---------------------------------------------------------------- special tokens

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  const Tokenizer& tok = tokenizer_for("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string text = "<|im_start|>user\nhi<|im_end|>\n";
  const Ids parsed = tok.encode(text, false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed[parsed.size() - 2], 2);
  const Ids plain = tok.encode(text, false, false);
  for (int32_t id : plain) EXPECT_GT(id, 16) << "special token matched in plain text";
  EXPECT_EQ(tok.decode(plain), text);
  // The text between special tokens is tokenized on its own.
  const Ids inner = tok.encode("user\nhi", false, false);
  EXPECT_EQ(Ids(parsed.begin() + 1, parsed.begin() + 1 + inner.size()), inner);
  // Adjacent special tokens and a special token alone.
  EXPECT_EQ(tok.encode("<|im_end|><|im_start|>", false, true), (Ids{2, 1}));
  EXPECT_EQ(tok.encode("<|endoftext|>", false, true), (Ids{0}));
  // A broken special token is text.
  for (int32_t id : tok.encode("<|im_start|", false, true)) EXPECT_GT(id, 16);
}

TEST(Tokenizer, SpmSpecialTokens) {
  const Tokenizer& tok = tokenizer_for("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  const Ids ids = tok.encode("<s>Hi</s>", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.decode(ids), " Hi");  // space prefix after <s>; <s>, </s> print nothing
  EXPECT_NE(tok.encode("<s>", false, false), (Ids{1}));
}

// ---------------------------------------------------------------- ill-formed input

const std::vector<std::string>& ill_formed_texts() {
  static const std::vector<std::string> texts = {
      "\xFF",
      "\xC3",
      "abc\xC3",
      "\xE2\x82",
      "\xE2\x82 euro",
      "\xED\xA0\x80 surrogate",
      "\xC0\xAF overlong",
      "\xF4\x90\x80\x80 too big",
      "\xF0\x9F\x98 cut emoji \xF0\x9F\x98\x80 whole emoji",
      "a\x80\x80\x80 b",
      std::string("nul\0byte", 8),
      "\xFE\xFE\xFF\xFF 123 \xE4\xB8\xAD\xE6",
      "<|im_start|>\xFF<|im_end|>",
  };
  return texts;
}

// Byte-level BPE keeps every byte its vocabulary has a token for; a byte it
// lacks (SmolLM2 has none for 0xC0, 0xC1, 0xF5..0xFF, ...) becomes U+FFFD.
TEST(Tokenizer, IllFormedUtf8Bpe) {
  for (const char* vocab :
       {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "tokenizer-vectors/ggml-vocab-gpt-2.gguf"}) {
    const Tokenizer& tok = tokenizer_for(vocab);
    for (const std::string& text : ill_formed_texts()) {
      std::string expected;
      for (char c : text) {
        const bool known =
            tok.find_token(byte_to_unicode_utf8(static_cast<uint8_t>(c))).has_value();
        expected += known ? std::string(1, c) : "\xEF\xBF\xBD";
      }
      const Ids ids = tok.encode(text, false, false);
      for (int32_t id : ids) {
        ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
        EXPECT_FALSE(tok.is_control(id)) << "control token " << id << " from plain text";
      }
      EXPECT_EQ(tok.decode(ids), expected) << vocab << ": " << escaped(text);
      EXPECT_NO_THROW(tok.encode(text, true, true));
    }
  }
  // The gpt-2 vocabulary has all 256 bytes: nothing is replaced there.
  const Tokenizer& gpt2 = tokenizer_for("tokenizer-vectors/ggml-vocab-gpt-2.gguf");
  for (const std::string& text : ill_formed_texts()) {
    EXPECT_EQ(gpt2.decode(gpt2.encode(text, false, false)), text) << escaped(text);
  }
}

TEST(Tokenizer, IllFormedUtf8Spm) {
  const Tokenizer& tok = tokenizer_for("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  for (const std::string& text : ill_formed_texts()) {
    const Ids ids = tok.encode(text, false, false);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
    EXPECT_EQ(tok.decode(ids), " " + text) << escaped(text);  // byte fallback keeps every byte
  }
}

// ---------------------------------------------------------------- speed and threads

double seconds_to_encode(const Tokenizer& tok, const std::string& text, size_t* n_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  *n_tokens = tok.encode(text, false, false).size();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Speed is measured and printed, never asserted (timings belong to benchmarks).
TEST(Tokenizer, PerplexityTextEncodes) {
  const Tokenizer& tok = tokenizer_for("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string text = read_file(shared_file("reference/ppl-text.txt"));
  ASSERT_GT(text.size(), 30000u);
  size_t n = 0;
  const double s = seconds_to_encode(tok, text, &n);
  std::printf("[ timing   ] ppl-text.txt: %zu bytes -> %zu tokens in %.1f ms\n", text.size(), n,
              s * 1e3);
  // ppl.json scores 14 windows of 512 tokens: the text has at least 7168.
  EXPECT_GE(n, 14u * 512u);
}

// 64 KiB of one repeated character is one pre-tokenizer word (or, for SPM,
// one merge problem); it must encode and decode back exactly. The time is
// printed for inspection (quadratic merging would show here).
TEST(Tokenizer, LongRepetitiveInputRoundTrips) {
  const size_t size = 1 << 16;
  const std::string a(size, 'a'), spaces(size, ' '), digits(size, '7');
  std::string cjk;
  while (cjk.size() < size) cjk += "\xE4\xB8\xAD";  // 中
  struct Case {
    const char* vocab;
    const std::string* text;
  };
  for (const Case& c : {Case{"models/SmolLM2-135M-Instruct.Q4_1.gguf", &a},
                        Case{"models/SmolLM2-135M-Instruct.Q4_1.gguf", &spaces},
                        Case{"models/SmolLM2-135M-Instruct.Q4_1.gguf", &digits},
                        Case{"tokenizer-vectors/ggml-vocab-gpt-2.gguf", &cjk},
                        Case{"tokenizer-vectors/ggml-vocab-llama-spm.gguf", &a},
                        Case{"tokenizer-vectors/ggml-vocab-llama-spm.gguf", &spaces},
                        Case{"tokenizer-vectors/ggml-vocab-llama-spm.gguf", &cjk}}) {
    const Tokenizer& tok = tokenizer_for(c.vocab);
    size_t n = 0;
    const double s = seconds_to_encode(tok, *c.text, &n);
    std::printf("[ timing   ] %s: 64 KiB of '%s' -> %zu tokens in %.0f ms\n", c.vocab,
                escaped(c.text->substr(0, 3)).c_str(), n, s * 1e3);
    EXPECT_GT(n, 0u);
    const auto ids = tok.encode(*c.text, false, false);
    std::string decoded = tok.decode(ids);
    if (std::string(c.vocab).find("spm") != std::string::npos && !decoded.empty() &&
        decoded[0] == ' ') {
      decoded.erase(0, 1);  // SPM's space prefix
    }
    EXPECT_EQ(decoded, *c.text) << c.vocab;
  }
}

TEST(Tokenizer, SharedAcrossThreads) {
  const Tokenizer& tok = tokenizer_for("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string text = read_file(shared_file("reference/ppl-text.txt"));
  const Ids reference = tok.encode(text, false, false);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = tok.encode(text, false, false); });
  for (auto& t : threads) t.join();
  for (const Ids& r : results) EXPECT_EQ(r, reference);
}

// ---------------------------------------------------------------- pre-tokenizer

// Splits worked out by hand from the patterns' definitions.
std::vector<std::string> split(std::string_view pre, std::string_view text) {
  const PreTokenizer pretok(pre_tokenizer_spec(pre).patterns);
  std::vector<std::string_view> pieces;
  pretok.split(text, pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}
using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  test 123"),
            (Pieces{"Hello", " world", "'s", " ", " test", " 123"}));
  EXPECT_EQ(split("gpt-2", "I'M"), (Pieces{"I", "'", "M"}));  // contractions are lowercase
  EXPECT_EQ(split("gpt-2", "a\tb  "), (Pieces{"a", "\t", "b", "  "}));
  EXPECT_EQ(split("gpt-2", "caf\xC3\xA9!!"), (Pieces{"caf\xC3\xA9", "!!"}));
  // Ill-formed bytes never match: they form pieces of their own.
  EXPECT_EQ(split("gpt-2", "a\xFF\xFE b"), (Pieces{"a", "\xFF\xFE", " b"}));
  EXPECT_EQ(split("default", "x 12"), split("gpt-2", "x 12"));
  EXPECT_EQ(split("no-such-pre", "x 12"), (Pieces{"x", " 12"}));
  EXPECT_EQ(split("gpt-2", ""), Pieces{});
}

TEST(PreTokenizer, StarcoderSplitsDigits) {
  for (const char* pre : {"starcoder", "smollm", "refact"}) {
    EXPECT_EQ(split(pre, "a 123"), (Pieces{"a", " ", "1", "2", "3"})) << pre;
    // U+00BD '½' is \p{N} too.
    EXPECT_EQ(split(pre, "4 \xC2\xBD"), (Pieces{"4", " ", "\xC2\xBD"})) << pre;
  }
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama-bpe", "12345 abc\n\nDEF's I'M"),
            (Pieces{"123", "45", " abc", "\n\n", "DEF", "'s", " I", "'M"}));
  EXPECT_EQ(split("llama3", "x  !?\ny"), (Pieces{"x", " ", " !?\n", "y"}));
  EXPECT_TRUE(pre_tokenizer_spec("llama3").ignore_merges);
  EXPECT_FALSE(pre_tokenizer_spec("smollm").ignore_merges);
  EXPECT_EQ(split("qwen2", "12345"), (Pieces{"1", "2", "3", "4", "5"}));
}

TEST(PreTokenizer, PiecesCoverRandomBytes) {
  std::mt19937 rng(7);
  for (const char* pre : {"gpt-2", "starcoder", "llama3", "qwen2"}) {
    for (int round = 0; round < 200; ++round) {
      std::string text;
      const int n = static_cast<int>(rng() % 64);
      for (int i = 0; i < n; ++i) text += static_cast<char>("a1 \n'!\xC3\xA9\xFF"[rng() % 9]);
      std::string joined;
      for (const std::string& piece : split(pre, text)) {
        EXPECT_FALSE(piece.empty());
        joined += piece;
      }
      EXPECT_EQ(joined, text) << pre;
    }
  }
}

// ---------------------------------------------------------------- byte alphabet

TEST(UnicodeBytes, Gpt2Alphabet) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), uint32_t{'A'});
  EXPECT_EQ(byte_to_unicode(0xE9), 0xE9u);   // 'é' is printable Latin-1
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // soft hyphen: the last extra
  EXPECT_EQ(byte_to_unicode_utf8(' '), "\xC4\xA0");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(unicode_to_byte(0x144), std::nullopt);
  EXPECT_EQ(unicode_text_to_bytes("Hello\xC4\xA0world\xC4\x8A"), "Hello world\n");
}

// ---------------------------------------------------------------- broken vocabularies

class BrokenVocab : public ::testing::Test {
 protected:
  // A valid three-token BPE vocabulary: "a" + "b" -> "ab".
  GgufWriter base() {
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.tokens", strings({"a", "b", "ab"}));
    w.set("tokenizer.ggml.token_type",
          GgufValue::array(GgufValueType::INT32,
                           {GgufValue::i32(1), GgufValue::i32(1), GgufValue::i32(1)}));
    w.set("tokenizer.ggml.merges", strings({"a b"}));
    return w;
  }
  static GgufValue strings(std::vector<std::string> items) {
    std::vector<GgufValue> values;
    for (auto& s : items) values.push_back(GgufValue::str(s));
    return GgufValue::array(GgufValueType::STRING, std::move(values));
  }
  std::unique_ptr<Tokenizer> load(const GgufWriter& w) {
    const std::string path = ::testing::TempDir() + "/clchat_tokenizer_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             ".gguf";
    w.write(path);
    file_ = GgufFile::open(path);
    std::filesystem::remove(path);
    return Tokenizer::from_gguf(*file_);
  }
  // The GgufError message of loading `w`, or "" when it loads.
  std::string error_of(const GgufWriter& w) {
    try {
      load(w);
    } catch (const GgufError& e) {
      return e.what();
    }
    return "";
  }
  std::unique_ptr<GgufFile> file_;
};

TEST_F(BrokenVocab, ValidBaseLoads) {
  auto tok = load(base());
  EXPECT_EQ(tok->n_vocab(), 3);
  EXPECT_EQ(tok->encode("ab", true, false), (Ids{2}));  // gpt2 adds no BOS by default
  EXPECT_EQ(tok->encode("ba", false, false), (Ids{1, 0}));
  EXPECT_EQ(tok->bos_id(), -1);
  // A byte missing from the vocabulary is dropped, not a crash.
  EXPECT_EQ(tok->encode("a c", false, false), (Ids{0}));
}

TEST_F(BrokenVocab, UnknownModel) {
  GgufWriter w = base();
  w.set("tokenizer.ggml.model", GgufValue::str("bert"));
  EXPECT_NE(error_of(w).find("unsupported tokenizer.ggml.model 'bert'"), std::string::npos);
}

TEST_F(BrokenVocab, MissingPieces) {
  GgufWriter no_model;
  no_model.set("tokenizer.ggml.tokens", strings({"a"}));
  EXPECT_NE(error_of(no_model).find("missing tokenizer.ggml.model"), std::string::npos);
  GgufWriter no_tokens;
  no_tokens.set("tokenizer.ggml.model", GgufValue::str("llama"));
  EXPECT_NE(error_of(no_tokens).find("missing tokenizer.ggml.tokens"), std::string::npos);
  GgufWriter no_merges;
  no_merges.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  no_merges.set("tokenizer.ggml.tokens", strings({"a"}));
  EXPECT_NE(error_of(no_merges).find("missing tokenizer.ggml.merges"), std::string::npos);
}

TEST_F(BrokenVocab, MergeWithUnknownToken) {
  GgufWriter w = base();
  w.set("tokenizer.ggml.merges", strings({"a b", "b c"}));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.merges[1] 'b c' names a token not in the vocabulary"),
            std::string::npos);
  w.set("tokenizer.ggml.merges", strings({"ab"}));
  EXPECT_NE(error_of(w).find("is not 'left right'"), std::string::npos);
  w.set("tokenizer.ggml.merges", strings({"b a"}));  // "ba" is not a token
  EXPECT_NE(error_of(w).find("'ba'"), std::string::npos);
}

TEST_F(BrokenVocab, IdsOutOfRange) {
  GgufWriter w = base();
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(3));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.bos_token_id = 3 is out of range"), std::string::npos);
  w = base();
  w.set("tokenizer.ggml.eos_token_id", GgufValue::i32(-7));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.eos_token_id = -7 is out of range"),
            std::string::npos);
  w = base();
  w.set("tokenizer.ggml.padding_token_id", GgufValue::u32(0xFFFFFFFFu));  // "none"
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  auto tok = load(w);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->is_eog(2));
}

TEST_F(BrokenVocab, ArraysOfDifferentLengths) {
  GgufWriter w = base();
  w.set("tokenizer.ggml.token_type",
        GgufValue::array(GgufValueType::INT32, {GgufValue::i32(1), GgufValue::i32(1)}));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.token_type has 2 entries for 3 tokens"),
            std::string::npos);
  w = base();
  w.set("tokenizer.ggml.scores", GgufValue::array(GgufValueType::FLOAT32, {GgufValue::f32(0)}));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.scores has 1 entries for 3 tokens"),
            std::string::npos);
  w = base();
  w.set("tokenizer.ggml.token_type",
        GgufValue::array(GgufValueType::INT32,
                         {GgufValue::i32(1), GgufValue::i32(9), GgufValue::i32(1)}));
  EXPECT_NE(error_of(w).find("tokenizer.ggml.token_type[1] = 9"), std::string::npos);
}

// A tiny SPM vocabulary: the higher score joins first, unknown characters
// fall back to byte tokens.
TEST_F(BrokenVocab, TinySpmScoresAndByteFallback) {
  GgufWriter w;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x21>", "\xE2\x96\x81",
                                     "a",     "b",   "c",    "ab",     "bc"};
  std::vector<GgufValue> scores, types;
  for (size_t i = 0; i < tokens.size(); ++i) {
    scores.push_back(GgufValue::f32(tokens[i] == "bc" ? -1.0f : tokens[i] == "ab" ? -2.0f : -5.0f));
    types.push_back(GgufValue::i32(i == 0 ? 2 : i < 3 ? 3 : i == 3 ? 6 : 1));
  }
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", strings(tokens));
  w.set("tokenizer.ggml.scores", GgufValue::array(GgufValueType::FLOAT32, scores));
  w.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::INT32, types));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  auto tok = load(w);
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{5, 9}));  // "bc" outscores "ab"
  EXPECT_EQ(tok->encode("ab!", true, false), (Ids{1, 8, 3}));
  // '?' has neither a token nor a byte token: it becomes <unk>.
  EXPECT_EQ(tok->encode("a?", false, false), (Ids{5, 0}));
  EXPECT_EQ(tok->decode(Ids{1, 4, 8, 3, 2}), " ab!");
}

}  // namespace
}  // namespace clchat
