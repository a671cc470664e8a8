// The SentencePiece-style merge loop (see tokenizer_spm.h).
#include "engine/tokenizer/spm.h"

#include <cstdio>
#include <queue>

#include "common/utf8.h"

namespace clchat {

namespace {

// A candidate join of the symbol at `left` with `right`, whose text is `size`
// bytes long. A popped candidate is stale when either side has changed since.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t size;
};

// Highest score first, then leftmost (std::priority_queue pops the largest).
struct WorseBigram {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  }
};

// Symbols of the text being merged: the living ones form a linked list.
struct Symbols {
  std::vector<size_t> start, length;  // length 0: joined into its left neighbour
  std::vector<int32_t> prev, next;
};

}  // namespace

ByteTokens spm_byte_tokens(const Vocab& vocab, int32_t unk_id) {
  ByteTokens tokens{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = vocab.find(name);
    const char byte = static_cast<char>(b);
    if (id < 0) id = vocab.find(std::string_view(&byte, 1));
    tokens[b] = id >= 0 ? id : unk_id;
  }
  return tokens;
}

void spm_tokenize(const Vocab& vocab, const ByteTokens& byte_tokens, std::string_view text,
                  std::vector<int32_t>& out) {
  Symbols sym;
  for (size_t pos = 0; pos < text.size();) {
    const int n = decode_utf8_char(text, pos).length;
    const size_t len = n > 0 ? static_cast<size_t>(n) : 1;
    const auto index = static_cast<int32_t>(sym.start.size());
    sym.start.push_back(pos);
    sym.length.push_back(len);
    sym.prev.push_back(index - 1);
    sym.next.push_back(index + 1);
    pos += len;
  }
  if (sym.start.empty()) return;
  sym.next.back() = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, WorseBigram> heap;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = sym.length[left] + sym.length[right];
    const int32_t id = vocab.find(text.substr(sym.start[left], size));
    if (id >= 0) heap.push({vocab.score(id), left, right, size});
  };
  for (size_t i = 1; i < sym.start.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    const size_t left_len = sym.length[b.left], right_len = sym.length[b.right];
    if (left_len == 0 || right_len == 0 || left_len + right_len != b.size ||
        sym.next[b.left] != b.right) {
      continue;
    }
    sym.length[b.left] = b.size;
    sym.length[b.right] = 0;
    sym.next[b.left] = sym.next[b.right];
    if (sym.next[b.left] >= 0) sym.prev[sym.next[b.left]] = b.left;
    try_add(sym.prev[b.left], b.left);
    try_add(b.left, sym.next[b.left]);
  }

  for (int32_t i = 0; i >= 0; i = sym.next[i]) {
    const std::string_view piece = text.substr(sym.start[i], sym.length[i]);
    const int32_t id = vocab.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_tokens[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace clchat
