// The vocabulary tables shared by both tokenizer algorithms: token strings,
// SentencePiece scores, token types and a string -> id index.
//
// Token types are GGUF's `tokenizer.ggml.token_type` values (llama.cpp's
// llama_token_type). When a string appears twice, the index keeps the higher
// id, as llama.cpp's token_to_id does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace clchat {

enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Vocab {
 public:
  // `scores` and `types` are empty or as long as `tokens` (the caller checks);
  // empty means all 0 / all Normal.
  Vocab(std::vector<std::string> tokens, std::vector<float> scores, std::vector<TokenType> types);
  // The index points into `tokens_`: never copy or move a Vocab.
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  const std::string& text(int32_t id) const { return tokens_[id]; }
  float score(int32_t id) const { return scores_.empty() ? 0.0f : scores_[id]; }
  TokenType type(int32_t id) const { return types_.empty() ? TokenType::Normal : types_[id]; }
  // The id of the token spelled `text`, or -1.
  int32_t find(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, int32_t> index_;
};

}  // namespace clchat
