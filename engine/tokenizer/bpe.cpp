// The BPE merge loop (see tokenizer_bpe.h).
#include "engine/tokenizer/bpe.h"

#include <queue>

namespace clchat {

namespace {

// A candidate merge of the symbol at `left` with its right neighbour `right`,
// remembered with both ids so a stale entry can be recognised when popped.
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
};

// Lowest rank first, then leftmost (std::priority_queue pops the largest).
struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

}  // namespace

void BpeMerges::add(int32_t left, int32_t right, int32_t result, int32_t rank) {
  table_.emplace(key(left, right), Merge{rank, result});
}

void bpe_merge_word(const BpeMerges& merges, std::vector<int32_t>& symbols) {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  // symbols[i] is alive while alive[i]; next/prev link the living symbols.
  std::vector<int32_t> next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> heap(LaterCandidate{},
                                                                              std::move(storage));
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const BpeMerges::Merge* m = merges.find(symbols[left], symbols[right])) {
      heap.push({m->rank, left, right, symbols[left], symbols[right]});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right ||
        symbols[c.left] != c.left_id || symbols[c.right] != c.right_id) {
      continue;  // one side merged since this candidate was pushed
    }
    symbols[c.left] = merges.find(c.left_id, c.right_id)->result;
    alive[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }

  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace clchat
