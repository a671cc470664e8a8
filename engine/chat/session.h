// A conversation and the KV cache that mirrors it, over the Backend interface.
//
// The cache holds `cache_tokens()` at positions 0..n_past-1. A backend call at
// `pos` overwrites the cache from `pos` on, so rolling back is just shrinking
// that list. After a reply the cache holds the conversation up to the reply's
// last token fed back; the token that ended the reply is not fed: an
// end-of-generation token is re-created by the template's assistant_end()
// text, and a reply cut by max tokens or cancel keeps its last token
// `pending`, fed first with the next turn. So a new user turn prefills only
//   [pending] + tokenize(assistant_end + user turn + assistant header)
// and earlier turns are never processed again.
//
// A long prompt is fed in chunks (at most prefill_chunk tokens) with the
// cancel flag checked between them and at the backend's stop points inside
// them (Backend::prefill_stop_points: OpenCL's batched prefill, between
// layers), sized by the measured speed so that a Ctrl-C waits for about
// 0.3 s at most: a prompt stopped part-way keeps its
// unfed tokens `pending` (the reply is empty, Cancelled), so the cache stays
// equal to what was fed and the next turn or /regen goes on from there.
//
// Context policy (n_ctx = the backend's cache size): a turn fits when its
// prompt plus a reserve for the reply (min(max_tokens, n_ctx / 4)) fits. When
// it does not, the oldest whole exchanges (user turn + reply) are dropped,
// never the system prompt, and the cache is rebuilt from the kept text. When
// even the new turn alone (with the system prompt) needs n_ctx positions or
// more, the turn fails with an error and the conversation is left as it was.
// A reply that fills the cache ends with ContextFull. A turn that fails in
// the backend (FinishReason::Error) is undone too: its user turn and partial
// reply are dropped (a regenerated reply is restored).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/sampler.h"
#include "engine/chat/template.h"
#include "engine/messages.h"
#include "engine/model/backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat {

// What a turn did, for statistics and the TurnFinished event.
struct TurnResult {
  ev::FinishReason reason = ev::FinishReason::Eos;
  std::string reply;  // as kept in the conversation (valid UTF-8)
  std::string error;  // reason == Error or ContextFull before generation
  int prefill_tokens = 0;
  int decode_tokens = 0;  // backend decode steps (reply tokens fed back)
  double t_prefill_s = 0;
  double t_decode_s = 0;
  double ttft_ms = 0;  // turn start -> first reply token known
  int turns_dropped = 0;
  int tokens_dropped = 0;
};

// Callbacks into the caller while a turn runs; every one is optional.
struct TurnHooks {
  std::function<void(std::string_view piece)> on_text;  // valid UTF-8
  // Around each decode step (step = 0, 1, ...), e.g. to sample profiling.
  std::function<void(int step)> before_step;
  std::function<void(int step, const TurnResult& so_far)> after_step;
  std::function<void(int turns_dropped, int tokens_dropped)> on_trim;
  // After each prefill chunk of a prompt longer than one chunk.
  std::function<void(int done, int total)> on_prefill;
  std::function<bool()> cancelled;  // checked between tokens, prefill chunks and layers
};

class ChatSession {
 public:
  // `backend` and `tokenizer` must outlive the session. `system` empty = the
  // template's default system prompt.
  ChatSession(Backend& backend, const Tokenizer& tokenizer, ChatTemplate chat_template,
              std::string system = "");

  // Adds a user turn and generates the reply.
  TurnResult submit(std::string_view user_text, const TurnHooks& hooks = {});
  // Drops the last reply and generates it again (error result when the last
  // turn is not a reply). A refused or failed regenerate keeps the old reply.
  TurnResult regenerate(const TurnHooks& hooks = {});
  // Empties the conversation and the cache (system prompt kept).
  void clear();
  // Empty = the template's default. The cache is rebuilt on the next turn.
  void set_system_prompt(std::string system);
  // Replaces the conversation; the cache is rebuilt on the next turn.
  void load(std::string system, std::vector<Turn> turns);
  void set_sampling(const SamplingParams& params);
  void set_prefill_chunk(int n) { prefill_chunk_ = n > 0 ? n : 512; }

  const std::vector<Turn>& turns() const { return turns_; }
  const std::string& system_prompt() const { return system_; }
  const ChatTemplate& chat_template() const { return template_; }
  const SamplingParams& sampling() const { return sampler_.params(); }
  std::span<const int32_t> cache_tokens() const { return tokens_; }
  int n_past() const { return int(tokens_.size()); }
  int capacity() const { return backend_.n_ctx(); }
  // End of a reply: the tokenizer's end-of-generation ids and the template's
  // stop markers.
  bool is_stop(int32_t id) const;
  // The tokens the cache would hold for `turns` rebuilt from their text.
  std::vector<int32_t> tokenize_conversation(std::span<const Turn> turns) const;

 private:
  // Tokens to prefill for the last (user) turn, trimming when needed; false
  // with result.error set when it cannot fit (a refused `new_turn` is
  // removed again, so the conversation is as it was).
  bool plan_prompt(std::vector<int32_t>& prompt, TurnResult& result, const TurnHooks& hooks,
                   bool new_turn);
  int reply_reserve() const;
  // The state a failed turn returns to.
  struct Snapshot {
    std::vector<Turn> turns;
    std::vector<int32_t> tokens;
    std::vector<int32_t> pending;
    bool synced = true;
    size_t reply_start = 0;
    uint64_t draws = 0;  // the sampler's draw count
  };
  Snapshot snapshot() const;
  // Back to `before` after a failed backend call; the cache is marked for a
  // rebuild when the failure may have overwritten what `before` lists.
  void restore(Snapshot before);
  // Feeds `prompt` at n_past (in chunks), then generates the reply. On an
  // error the session goes back to `before`.
  TurnResult respond(std::vector<int32_t> prompt, TurnResult result, const TurnHooks& hooks,
                     Snapshot before);
  // Greedy without a repeat penalty: the backend's argmax, no logits read
  // back. Otherwise Backend::decode_sample with the sampler's next draw
  // number (the draw counter restarts with set_sampling and clear()).
  bool device_argmax() const;
  // The first reply token, or nullopt when cancelled (the unfed rest of
  // `prompt` is then pending).
  std::optional<int32_t> run_prompt(std::span<const int32_t> prompt, const TurnHooks& hooks);
  int32_t step(int32_t token);
  void generate(int32_t first, TurnResult& result, const TurnHooks& hooks);

  Backend& backend_;
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  std::string system_;
  std::vector<Turn> turns_;
  Sampler sampler_;
  std::vector<int32_t> stop_ids_;  // template markers found in the vocabulary
  int prefill_chunk_ = 512;
  // The prefill speed (tokens/s) of the last prompt's largest chunk (one of
  // at least k_first_chunk tokens, or as many as before) and that chunk's
  // size (0: none yet): where the next prompt's first chunk starts.
  double prefill_rate_ = 0;
  size_t prefill_rate_chunk_ = 0;

  std::vector<int32_t> tokens_;  // what the cache holds, position by position
  // Tokens of the conversation not fed yet: the last reply token, or the
  // rest of a prompt whose prefill was stopped.
  std::vector<int32_t> pending_;
  bool synced_ = true;      // tokens_ (+ pending_) mirror turns_
  size_t reply_start_ = 0;  // n_past where the last reply began (0: unknown)
};

}  // namespace clchat
