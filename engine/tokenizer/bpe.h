// Byte-level BPE merging: the ranked merge table and the merge loop for one
// pre-tokenized word.
//
// `tokenizer.ggml.merges[r]` is "left right": the pair joins into the token
// left+right, and a lower rank r joins first. Since every merge names two
// tokens and makes a third (checked when the table is built), the loop works
// on ids: a word starts as one symbol per byte and, as in llama.cpp, the
// adjacent pair of lowest rank joins next, the leftmost one on a tie. A heap
// of candidate pairs with lazy deletion (a popped pair is dropped when either
// side has changed since it was pushed) makes this O(n log n) per word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace clchat {

class BpeMerges {
 public:
  struct Merge {
    int32_t rank = 0;
    int32_t result = -1;
  };

  // Adds the merge of rank `rank`; a pair listed twice keeps its first rank
  // (llama.cpp keeps the first too).
  void add(int32_t left, int32_t right, int32_t result, int32_t rank);
  // The merge of `left` followed by `right`, or nullptr.
  const Merge* find(int32_t left, int32_t right) const {
    auto it = table_.find(key(left, right));
    return it == table_.end() ? nullptr : &it->second;
  }
  size_t size() const { return table_.size(); }

 private:
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> table_;
};

// Merges one word in place: `symbols` holds one id per byte on entry (-1 for
// a byte the vocabulary lacks: it never merges) and the final ids on return.
void bpe_merge_word(const BpeMerges& merges, std::vector<int32_t>& symbols);

}  // namespace clchat
