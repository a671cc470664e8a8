// ChatSession: turns in, replies out, and the bookkeeping that keeps the KV
// cache equal to the conversation (see chat_session.h for the invariants).
#include "engine/chat/session.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>

namespace clchat {

namespace {

// A Ctrl-C should wait for about this long at most, so the time between two
// of the backend's stop points is kept near half of it: a prefill chunk
// takes about k_prefill_chunk_s where the backend has no stop points, (points
// + 1) / 2 times that where it has. The first chunk of a session's first
// prompt has k_first_chunk tokens (k_first_chunk_stopping with stop points),
// later prompts start at the size the speed measured before gives.
// (SmolLM2-135M Q4_1 through PoCL on 2 cores: 32 tokens take 0.33 s at 96
// tok/s, 16 take 0.23 s at 69 tok/s, 512 run at ~110 tok/s. With chunks of
// ~0.3 s and no stop points, a resumed 2,074-token conversation of the
// SmolLM2-shaped Q4_0 file waited 7.6-8.3 s for its first token there
// (32-64 tokens a chunk at a depth of 2,000), with stops between layers and
// 512-token chunks 6.0-7.2 s. Llama-3.2-1B on an H100: a 475-token turn took
// 28.6 ms in chunks of 32, 128 and 315, each with its own launches and
// read-back; one chunk of 475 runs at pp512's ~29k tok/s.)
constexpr double k_prefill_chunk_s = 0.3;
constexpr size_t k_first_chunk = 32;
constexpr size_t k_first_chunk_stopping = 128;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

ChatSession::ChatSession(Backend& backend, const Tokenizer& tokenizer, ChatTemplate chat_template,
                         std::string system)
    : backend_(backend), tokenizer_(tokenizer), template_(std::move(chat_template)) {
  set_system_prompt(std::move(system));
  for (const std::string& marker : template_.stop_markers()) {
    if (auto id = tokenizer_.find_token(marker)) stop_ids_.push_back(*id);
  }
}

bool ChatSession::is_stop(int32_t id) const {
  return tokenizer_.is_eog(id) || id == tokenizer_.eos_id() ||
         std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

void ChatSession::clear() {
  turns_.clear();
  tokens_.clear();
  pending_.clear();
  synced_ = true;
  reply_start_ = 0;
  sampler_.reseed();
}

void ChatSession::set_system_prompt(std::string system) {
  system_ = system.empty() ? template_.default_system() : std::move(system);
  synced_ = false;
}

void ChatSession::load(std::string system, std::vector<Turn> turns) {
  set_system_prompt(std::move(system));
  turns_.clear();
  for (Turn& t : turns) {
    if (t.role != Role::System) turns_.push_back(std::move(t));
  }
  synced_ = false;
}

void ChatSession::set_sampling(const SamplingParams& params) { sampler_.set_params(params); }

int ChatSession::reply_reserve() const {
  return std::max(0, std::min(sampler_.params().max_tokens, capacity() / 4));
}

std::vector<int32_t> ChatSession::tokenize_conversation(std::span<const Turn> turns) const {
  // Cut where the incremental path cuts: before each reply, so a rebuilt
  // cache is tokenized the way the turns were first fed, replies aside.
  std::vector<int32_t> out;
  ChatText segment = template_.prefix(system_);
  bool first_user = true;
  auto flush = [&] {
    const auto ids = tokenizer_.encode_chat(segment.text, segment.content, out.empty());
    out.insert(out.end(), ids.begin(), ids.end());
    segment = {};
  };
  for (const Turn& t : turns) {
    if (t.role == Role::User) {
      segment += template_.user_turn(t.text, system_, first_user);
      first_user = false;
    } else if (t.role == Role::Assistant) {
      flush();
      segment += template_.assistant_reply(t.text);
      segment += template_.assistant_end();
    }
  }
  if (!segment.text.empty() || out.empty()) flush();
  return out;
}

bool ChatSession::plan_prompt(std::vector<int32_t>& prompt, TurnResult& result,
                              const TurnHooks& hooks, bool new_turn) {
  const int n_ctx = capacity();
  const int reserve = reply_reserve();
  const bool first = turns_.size() == 1;
  if (synced_) {
    prompt = pending_;
    const ChatText turn = template_.next_turn(turns_.back().text, system_, first);
    const auto ids =
        tokenizer_.encode_chat(turn.text, turn.content, tokens_.empty() && pending_.empty());
    prompt.insert(prompt.end(), ids.begin(), ids.end());
    if (n_past() + int(prompt.size()) + reserve <= n_ctx) return true;
  }
  // Rebuild from text, dropping the oldest exchanges until the turn and the
  // reply reserve fit. The last turn is the new user turn: never dropped.
  const std::span<const Turn> all(turns_);
  size_t drop = 0;
  std::vector<int32_t> kept = tokenize_conversation(all);
  const size_t full_size = kept.size();
  while (int(kept.size()) + reserve > n_ctx && drop + 1 < turns_.size()) {
    ++drop;  // a user turn and the reply after it go together
    while (drop + 1 < turns_.size() && turns_[drop].role != Role::User) ++drop;
    kept = tokenize_conversation(all.subspan(drop));
  }
  if (int(kept.size()) >= n_ctx) {
    // Even alone with the system prompt it leaves no room for one reply
    // token: refuse it and leave the conversation and cache as they were.
    result.reason = ev::FinishReason::ContextFull;
    result.error = "the turn needs " + std::to_string(kept.size()) +
                   " tokens with the system prompt, but the context holds " +
                   std::to_string(n_ctx) + (new_turn ? "; it was not sent" : "");
    if (new_turn) turns_.pop_back();
    return false;
  }
  if (drop > 0) {
    result.turns_dropped = int(drop);
    result.tokens_dropped = int(full_size - kept.size());
    turns_.erase(turns_.begin(), turns_.begin() + std::ptrdiff_t(drop));
    if (hooks.on_trim) hooks.on_trim(result.turns_dropped, result.tokens_dropped);
  }
  tokens_.clear();
  pending_.clear();
  synced_ = true;
  prompt = std::move(kept);
  return true;
}

ChatSession::Snapshot ChatSession::snapshot() const {
  return {turns_, tokens_, pending_, synced_, reply_start_, sampler_.draws()};
}

void ChatSession::restore(Snapshot before) {
  // A failed backend call at pos may have written the cache from pos on, so
  // the old bookkeeping holds only when everything it lists is still in the
  // cache, untouched (the failed turn fed its prompt after it), and the
  // backend can go on from there (a sliding-window ring may not).
  const bool cache_intact =
      tokens_.size() >= before.tokens.size() &&
      std::equal(before.tokens.begin(), before.tokens.end(), tokens_.begin()) &&
      backend_.can_resume(int(before.tokens.size()));
  turns_ = std::move(before.turns);
  sampler_.set_draws(before.draws);  // the same seed then gives the same text
  if (cache_intact) {
    tokens_ = std::move(before.tokens);
    pending_ = before.pending;
    synced_ = before.synced;
    reply_start_ = before.reply_start;
  } else {
    // Rebuilt from the text on the next turn.
    pending_.clear();
    synced_ = false;
    reply_start_ = 0;
  }
}

TurnResult ChatSession::submit(std::string_view user_text, const TurnHooks& hooks) {
  Snapshot before = snapshot();
  turns_.push_back({Role::User, std::string(user_text)});
  TurnResult result;
  std::vector<int32_t> prompt;
  if (!plan_prompt(prompt, result, hooks, true)) return result;
  return respond(std::move(prompt), std::move(result), hooks, std::move(before));
}

TurnResult ChatSession::regenerate(const TurnHooks& hooks) {
  TurnResult result;
  if (turns_.empty() || turns_.back().role != Role::Assistant) {
    result.reason = ev::FinishReason::Error;
    result.error = "there is no reply to regenerate";
    return result;
  }
  Snapshot before = snapshot();
  Turn reply = std::move(turns_.back());
  turns_.pop_back();
  if (synced_ && reply_start_ > 0 && reply_start_ <= tokens_.size() &&
      backend_.can_resume(int(reply_start_) - 1)) {
    // Roll back to the end of the prompt and feed its last token again: that
    // gives the first reply token's logits without re-running the prompt
    // (unless the backend's sliding-window rings lost what it needs: then
    // the conversation is fed again from its text below).
    const std::vector<int32_t> last{tokens_[reply_start_ - 1]};
    tokens_.resize(reply_start_ - 1);
    pending_.clear();
    return respond(last, std::move(result), hooks, std::move(before));
  }
  if (synced_ && reply.text.empty() && !pending_.empty() &&
      reply_start_ == tokens_.size() + pending_.size()) {
    // The prompt's prefill was stopped: go on with its unfed rest.
    return respond(pending_, std::move(result), hooks, std::move(before));
  }
  const bool was_synced = synced_;
  synced_ = false;
  std::vector<int32_t> prompt;
  if (!plan_prompt(prompt, result, hooks, false)) {
    // Refused before the cache was touched: the reply stays as it was.
    turns_.push_back(std::move(reply));
    synced_ = was_synced;
    return result;
  }
  return respond(std::move(prompt), std::move(result), hooks, std::move(before));
}

bool ChatSession::device_argmax() const {
  // A penalty changes the logits before the argmax: the device's
  // argmax of the raw logits would ignore it.
  const SamplingParams& p = sampler_.params();
  return p.greedy() && !p.penalized();
}

std::optional<int32_t> ChatSession::run_prompt(std::span<const int32_t> prompt,
                                               const TurnHooks& hooks) {
  // Device argmax: the backend's prefill returns it. Sampling or a penalty
  // needs the last position's logits, so that one goes through step().
  const size_t n_batch = device_argmax() ? prompt.size() : prompt.size() - 1;
  const size_t max_chunk = size_t(prefill_chunk_);
  const int points = backend_.prefill_stop_points(std::min(max_chunk, n_batch));
  // A Ctrl-C waits for the stretch in flight and, with stop points, the
  // one queued after it: two of a chunk's points + 1.
  const double chunk_s = points > 0 ? k_prefill_chunk_s * (points + 1) / 2 : k_prefill_chunk_s;
  const size_t first = std::min(max_chunk, points > 0 ? k_first_chunk_stopping : k_first_chunk);
  // The next chunk takes about chunk_s at `rate` (tokens/s, as measured on
  // `measured` tokens), growing at most 4x (small chunks are slower per
  // token) or to the first chunk's size.
  auto fit = [max_chunk, chunk_s, first](double rate, size_t measured) {
    const double n = rate * chunk_s;
    const size_t cap = std::min(max_chunk, std::max(first, 4 * measured));
    return n >= double(cap) ? cap : std::max(size_t(1), size_t(n));
  };
  size_t chunk = prefill_rate_chunk_ > 0 ? fit(prefill_rate_, prefill_rate_chunk_) : first;
  size_t largest = 0;  // this prompt's largest chunk so far
  const bool report = prompt.size() > chunk;
  int32_t next = -1;
  for (size_t at = 0; at < prompt.size();) {
    if (hooks.cancelled && hooks.cancelled()) {
      pending_.assign(prompt.begin() + std::ptrdiff_t(at), prompt.end());
      return std::nullopt;
    }
    if (at == n_batch) {
      next = step(prompt.back());
      break;
    }
    const auto part = prompt.subspan(at, std::min(chunk, n_batch - at));
    const auto t0 = Clock::now();
    const std::optional<int32_t> id = backend_.prefill_until(part, n_past(), hooks.cancelled);
    if (!id) {  // stopped between layers: none of `part` counts as fed
      pending_.assign(prompt.begin() + std::ptrdiff_t(at), prompt.end());
      return std::nullopt;
    }
    next = *id;
    tokens_.insert(tokens_.end(), part.begin(), part.end());
    at += part.size();
    if (report && hooks.on_prefill) hooks.on_prefill(int(at), int(prompt.size()));
    const double dt = seconds_since(t0);
    const double rate = dt > 0 ? double(part.size()) / dt : 1e30;
    chunk = fit(rate, part.size());
    // Kept for the next prompt: this prompt's largest chunk, unless it is a
    // short one and the speed before came from a longer chunk.
    if (part.size() >= largest &&
        (part.size() >= k_first_chunk || part.size() >= prefill_rate_chunk_)) {
      largest = part.size();
      prefill_rate_ = rate;
      prefill_rate_chunk_ = part.size();
    }
  }
  return next;
}

int32_t ChatSession::step(int32_t token) {
  const int pos = n_past();
  if (device_argmax()) {
    const int32_t next = backend_.decode_argmax(token, pos);
    tokens_.push_back(token);
    return next;
  }
  // The backend samples (on the device where it can: 4 bytes read back)
  // with the context up to and including `token` as the penalties' window.
  tokens_.push_back(token);
  try {
    return backend_.decode_sample(token, pos, sampler_.params(), sampler_.take_draw(), tokens_);
  } catch (...) {
    tokens_.pop_back();  // not in the cache
    throw;
  }
}

TurnResult ChatSession::respond(std::vector<int32_t> prompt, TurnResult result,
                                const TurnHooks& hooks, Snapshot before) {
  const auto t0 = Clock::now();
  turns_.push_back({Role::Assistant, ""});
  pending_.clear();  // what there was leads `prompt`
  try {
    if (prompt.empty()) throw std::logic_error("respond: empty prompt");
    const size_t n_before = tokens_.size();
    const std::optional<int32_t> first = run_prompt(prompt, hooks);
    result.prefill_tokens = int(tokens_.size() - n_before);
    result.t_prefill_s = seconds_since(t0);
    result.ttft_ms = result.t_prefill_s * 1e3;
    reply_start_ = tokens_.size() + pending_.size();
    if (!first) {
      result.reason = ev::FinishReason::Cancelled;
      return result;  // an empty reply; the unfed prompt stays pending
    }
    generate(*first, result, hooks);
  } catch (const std::exception& e) {
    // The turn is undone: the user turn (or the regenerated reply's
    // replacement) and the partial reply go, as if it was never sent.
    result.reason = ev::FinishReason::Error;
    result.error = e.what();
    result.reply.clear();  // streamed, but not kept
    restore(std::move(before));
    return result;
  }
  turns_.back().text = result.reply;
  return result;
}

void ChatSession::generate(int32_t next, TurnResult& result, const TurnHooks& hooks) {
  const auto t0 = Clock::now();
  const int max_tokens = sampler_.params().max_tokens;
  Utf8StreamDecoder utf8;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.reply += text;
    if (hooks.on_text) hooks.on_text(text);
  };
  int n_reply = 0;
  for (;;) {
    if (max_tokens <= 0) {
      result.reason = ev::FinishReason::MaxTokens;
      break;
    }
    if (is_stop(next)) {
      result.reason = ev::FinishReason::Eos;
      break;
    }
    ++n_reply;
    if (!tokenizer_.is_control(next)) emit(utf8.push(tokenizer_.token_to_bytes(next)));
    // The token is in the reply but not in the cache until it is fed.
    pending_.assign(1, next);
    if (n_reply >= max_tokens) {
      result.reason = ev::FinishReason::MaxTokens;
      break;
    }
    if (hooks.cancelled && hooks.cancelled()) {
      result.reason = ev::FinishReason::Cancelled;
      break;
    }
    if (n_past() >= capacity()) {
      result.reason = ev::FinishReason::ContextFull;
      break;
    }
    if (hooks.before_step) hooks.before_step(result.decode_tokens);
    pending_.clear();
    next = step(next);
    ++result.decode_tokens;
    result.t_decode_s = seconds_since(t0);
    if (hooks.after_step) hooks.after_step(result.decode_tokens - 1, result);
  }
  emit(utf8.finish());
  result.t_decode_s = seconds_since(t0);
}

}  // namespace clchat
