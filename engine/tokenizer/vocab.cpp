// Builds the string -> id index of a Vocab (see tokenizer_vocab.h).
#include "engine/tokenizer/vocab.h"

namespace clchat {

Vocab::Vocab(std::vector<std::string> tokens, std::vector<float> scores,
             std::vector<TokenType> types)
    : tokens_(std::move(tokens)), scores_(std::move(scores)), types_(std::move(types)) {
  index_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    index_.insert_or_assign(std::string_view(tokens_[id]), static_cast<int32_t>(id));
  }
}

}  // namespace clchat
