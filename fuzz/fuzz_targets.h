// The bodies of clchat's libFuzzer targets, one function per target with
// LLVMFuzzerTestOneInput's signature. Each libFuzzer executable is
// libfuzzer_entry.cpp compiled with CLCHAT_FUZZ_TARGET naming one of them;
// the replay test (replay_test.cpp) calls them directly on every file under
// fuzz/regressions/<target>/, in the ordinary and the sanitizer builds.
//
// A target returns 0 for every input it handles as documented: the code under
// test may reject an input only with its documented exception (GgufError,
// ConfigError, ...), which the target catches. Anything else (a crash, a
// sanitizer report, another exception, a broken invariant) is a finding: the
// invariant checks throw FuzzFailure, which nothing catches, so libFuzzer sees
// an abort and the replay test sees an exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace clchat::fuzz {

// A broken invariant; what() says which.
class FuzzFailure : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw FuzzFailure(what);
}

// $CLCHAT_SHARED_DIR, else ../shared beside the checkout (the tokenizer
// targets read their vocabularies from there).
std::string shared_dir();

// Whole-file GGUF load from bytes, every metadata getter on every key,
// tensor lookups and data bounds, model config and tensor checks (what
// load_model() does), tokenizer and chat template from the file, and one CPU
// forward step when a small model loads.
int fuzz_gguf(const uint8_t* data, size_t size);
// Byte-level BPE (SmolLM2-135M-Instruct's vocabulary, or $CLCHAT_FUZZ_BPE_VOCAB).
int fuzz_tokenizer_bpe(const uint8_t* data, size_t size);
// SentencePiece (ggml-vocab-llama-spm.gguf, or $CLCHAT_FUZZ_SPM_VOCAB).
int fuzz_tokenizer_spm(const uint8_t* data, size_t size);
// Every chat template style on fuzzed system prompts and turns; style
// detection on the bytes as a Jinja template.
int fuzz_chat_template(const uint8_t* data, size_t size);
// config::parse_config() on the bytes as TOML.
int fuzz_config(const uint8_t* data, size_t size);
// ui::parse_input() on the bytes as a typed or pasted line; apply_set().
int fuzz_commands(const uint8_t* data, size_t size);
// decode_kernel_cache_entry() on the bytes as a cache file written for
// k_fuzz_kernel_cache_key; encode/decode round trip of the bytes as a payload.
int fuzz_kernel_cache(const uint8_t* data, size_t size);
constexpr uint64_t k_fuzz_kernel_cache_key = 0x636c636861746b63ull;

}  // namespace clchat::fuzz
