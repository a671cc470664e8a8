// ChatSession over both backends (CPU reference and OpenCL on the test device,
// PoCL here) with stories260K: incremental turns, context trimming, a turn too
// large for the cache, cancel. The check that matters is the cache's: after
// any of these, the reply must equal what a fresh backend generates from the
// same tokens processed from scratch in one prefill.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/chat/session.h"
#include "engine/cl/forward.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/cl/cl_test_support.h"
#include "tests/sampling_params.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

struct Stories {
  Model model = load_model(test::shared_file("models/stories260K.gguf"));
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(*model.file);
};
const Stories& stories() {
  static const Stories s;
  return s;
}

// A long prompt: `n` copies of one sentence.
std::string dog_sentences(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "The little dog ran to the park. ";
  return text;
}

class ChatSessionTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Backend> make_backend(int n_ctx) const {
    if (GetParam() == "reference") return make_reference_backend(stories().model, n_ctx);
    return std::make_unique<ClForward>(stories().model, test::cl_test_runtime(),
                                       ClForwardOptions{n_ctx});
  }
  const Tokenizer& tok() const { return *stories().tokenizer; }

  std::unique_ptr<ChatSession> make_session(Backend& backend, int max_tokens,
                                            const std::string& system = "") const {
    auto s =
        std::make_unique<ChatSession>(backend, tok(), ChatTemplate(TemplateStyle::Plain), system);
    SamplingParams p;
    p.max_tokens = max_tokens;
    s->set_sampling(p);
    return s;
  }

  std::string text_of(const std::vector<int32_t>& ids) const {
    Utf8StreamDecoder utf8;
    std::string out;
    for (int32_t id : ids) {
      if (!tok().is_control(id)) out += utf8.push(tok().token_to_bytes(id));
    }
    return out + utf8.finish();
  }

  // Greedy ids after `prompt` run on a fresh backend in one prefill, until an
  // end-of-generation token or `n` tokens.
  std::vector<int32_t> greedy_from_scratch(const std::vector<int32_t>& prompt, int n) const {
    auto backend = make_backend(int(prompt.size()) + n + 1);
    std::vector<int32_t> out;
    int32_t next = backend->prefill(prompt, 0);
    int pos = int(prompt.size());
    while (int(out.size()) < n && !tok().is_eog(next)) {
      out.push_back(next);
      if (int(out.size()) == n) break;
      next = backend->decode_argmax(next, pos++);
    }
    return out;
  }

  // The last reply must be what the cache's tokens before it give when
  // processed from scratch: the tokens fed for the reply are its last
  // decode_tokens entries.
  void expect_reply_matches_from_scratch(const ChatSession& s, const TurnResult& r,
                                         int max_tokens) const {
    const auto cache = s.cache_tokens();
    ASSERT_GE(int(cache.size()), r.decode_tokens);
    const std::vector<int32_t> prompt(cache.begin(), cache.end() - r.decode_tokens);
    EXPECT_EQ(text_of(greedy_from_scratch(prompt, max_tokens)), r.reply);
  }
};

TEST_P(ChatSessionTest, SecondTurnPrefillsOnlyItsOwnTokens) {
  const int max_tokens = 12;
  auto backend = make_backend(512);
  auto s = make_session(*backend, max_tokens);
  const TurnResult r1 = s->submit("Once upon a time");
  ASSERT_TRUE(r1.error.empty()) << r1.error;

  // Built by hand: the plain template's text and the greedy reply computed on
  // a fresh backend.
  const std::vector<int32_t> prompt1 =
      tok().encode("User: Once upon a time\nAssistant:", true, true);
  EXPECT_EQ(r1.prefill_tokens, int(prompt1.size()));
  const std::vector<int32_t> reply1 = greedy_from_scratch(prompt1, max_tokens);
  EXPECT_EQ(text_of(reply1), r1.reply);
  ASSERT_FALSE(r1.reply.empty());

  const TurnResult r2 = s->submit("The cat");
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  const std::vector<int32_t> turn2 = tok().encode("\nUser: The cat\nAssistant:", false, true);
  // Only the reply's unfed last token (when it did not end at EOS) and the
  // new turn's tokens are prefilled.
  const int unfed = r1.reason == ev::FinishReason::Eos ? 0 : 1;
  EXPECT_EQ(r2.prefill_tokens, unfed + int(turn2.size()));

  std::vector<int32_t> full = prompt1;
  full.insert(full.end(), reply1.begin(), reply1.end());
  full.insert(full.end(), turn2.begin(), turn2.end());
  const auto cache = s->cache_tokens();
  ASSERT_GE(cache.size(), full.size());
  EXPECT_TRUE(std::equal(full.begin(), full.end(), cache.begin()));
  EXPECT_EQ(text_of(greedy_from_scratch(full, max_tokens)), r2.reply);
  ASSERT_EQ(s->turns().size(), 4u);
  EXPECT_EQ(s->turns()[3].text, r2.reply);
}

TEST_P(ChatSessionTest, OverflowDropsOldestTurnsAndGoesOn) {
  const int max_tokens = 16, n_ctx = 96;
  auto backend = make_backend(n_ctx);
  auto s = make_session(*backend, max_tokens, "A story.");
  int trims = 0;
  TurnHooks hooks;
  hooks.on_trim = [&](int turns, int tokens) {
    ++trims;
    EXPECT_GT(turns, 0);
    EXPECT_EQ(turns % 2, 0) << "whole exchanges are dropped";
    EXPECT_GT(tokens, 0);
  };
  const std::vector<std::string> users = {"Tom had a dog",  "The sun was hot", "Lily saw a bird",
                                          "They went home", "A big red ball",  "The end"};
  for (const std::string& u : users) {
    const TurnResult r = s->submit(u, hooks);
    ASSERT_TRUE(r.error.empty()) << u << ": " << r.error;
    EXPECT_FALSE(r.reply.empty());
    EXPECT_LE(s->n_past(), n_ctx);
    expect_reply_matches_from_scratch(*s, r, max_tokens);
    if (r.turns_dropped > 0) {
      // The system prompt is kept and the kept conversation now starts with
      // a user turn.
      const Turn& first = s->turns().front();
      ASSERT_EQ(first.role, Role::User);
      const auto expected =
          tok().encode("A story.\n\nUser: " + first.text + "\nAssistant:", true, true);
      const auto cache = s->cache_tokens();
      ASSERT_GE(cache.size(), expected.size());
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), cache.begin()));
    }
  }
  EXPECT_GT(trims, 0);
  EXPECT_NE(s->turns().front().text, users.front());
  EXPECT_EQ(s->turns().back().role, Role::Assistant);
}

TEST_P(ChatSessionTest, TurnLargerThanTheCacheFailsCleanly) {
  const int max_tokens = 8, n_ctx = 64;
  auto backend = make_backend(n_ctx);
  auto s = make_session(*backend, max_tokens);
  const TurnResult r1 = s->submit("Tom had a dog");
  ASSERT_TRUE(r1.error.empty()) << r1.error;
  const std::vector<Turn> before = s->turns();
  const std::vector<int32_t> cache_before(s->cache_tokens().begin(), s->cache_tokens().end());

  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "the big dog ran to the park ";
  const TurnResult r = s->submit(huge);
  EXPECT_EQ(r.reason, ev::FinishReason::ContextFull);
  EXPECT_NE(r.error.find("context holds 64"), std::string::npos) << r.error;
  ASSERT_EQ(s->turns().size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(s->turns()[i].text, before[i].text);
  EXPECT_EQ(std::vector<int32_t>(s->cache_tokens().begin(), s->cache_tokens().end()), cache_before);

  // The chat goes on incrementally from where it was.
  const TurnResult r2 = s->submit("The end");
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  EXPECT_EQ(r2.turns_dropped, 0);
  const int unfed = r1.reason == ev::FinishReason::Eos ? 0 : 1;
  EXPECT_EQ(r2.prefill_tokens,
            unfed + int(tok().encode("\nUser: The end\nAssistant:", false, true).size()));
  expect_reply_matches_from_scratch(*s, r2, max_tokens);
}

TEST_P(ChatSessionTest, CancelKeepsThePartialReplyAndAConsistentCache) {
  const int max_tokens = 40;
  auto backend = make_backend(256);
  auto s = make_session(*backend, max_tokens);
  std::atomic<bool> cancel{false};
  TurnHooks hooks;
  hooks.cancelled = [&] { return cancel.load(); };
  hooks.after_step = [&](int step, const TurnResult&) {
    if (step == 2) cancel = true;
  };
  const TurnResult r1 = s->submit("Once upon a time", hooks);
  ASSERT_EQ(r1.reason, ev::FinishReason::Cancelled);
  // Stopped within one token: 3 steps fed, the 4th token shown and pending.
  EXPECT_EQ(r1.decode_tokens, 3);
  EXPECT_EQ(s->turns().back().text, r1.reply);
  const std::vector<int32_t> prompt1 =
      tok().encode("User: Once upon a time\nAssistant:", true, true);
  EXPECT_EQ(r1.reply, text_of(greedy_from_scratch(prompt1, 4)));

  const TurnResult r2 = s->submit("The cat");
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  EXPECT_EQ(r2.prefill_tokens,
            1 + int(tok().encode("\nUser: The cat\nAssistant:", false, true).size()));
  expect_reply_matches_from_scratch(*s, r2, max_tokens);
}

// Ctrl-C while a long prompt is processed. Where the backend stops between
// layers (OpenCL's batched prefill) the prompt is one chunk, and a Ctrl-C
// seen at the third check (after the loop's own, two layers in) leaves none
// of it fed; elsewhere (the CPU reference) it stops after the chunk in
// flight, the first, 32 tokens. Either way the cache holds exactly what was
// fed, and both the next turn and /regen go on from there.
TEST_P(ChatSessionTest, CancelDuringPrefillKeepsWhatWasFed) {
  const int max_tokens = 8;
  const std::string long_text = dog_sentences(12);
  const std::vector<int32_t> prompt1 =
      tok().encode("User: " + long_text + "\nAssistant:", true, true);
  ASSERT_GT(prompt1.size(), 64u);
  for (const bool regen : {false, true}) {
    SCOPED_TRACE(regen ? "then /regen" : "then a new turn");
    auto backend = make_backend(512);
    const bool stops = backend->prefill_stop_points(prompt1.size()) > 0;
    EXPECT_EQ(stops, GetParam() == std::string("opencl"));
    ASSERT_GE(stories().model.config.n_layer, 3);  // checks after layers 1 and 2
    auto s = make_session(*backend, max_tokens);
    bool cancel = false;
    int checks = 0;
    std::vector<std::pair<int, int>> progress;
    TurnHooks hooks;
    hooks.cancelled = [&] { return cancel || (stops && ++checks == 3); };
    hooks.on_prefill = [&](int done, int total) {
      progress.emplace_back(done, total);
      cancel = true;  // Ctrl-C during the first chunk
    };
    const TurnResult r1 = s->submit(long_text, hooks);
    ASSERT_EQ(r1.reason, ev::FinishReason::Cancelled);
    EXPECT_EQ(r1.reply, "");
    const int fed = stops ? 0 : 32;
    if (stops) {
      EXPECT_EQ(checks, 3);
      EXPECT_TRUE(progress.empty());
    } else {
      ASSERT_EQ(progress.size(), 1u);
      EXPECT_EQ(progress[0], std::make_pair(32, int(prompt1.size())));
    }
    EXPECT_EQ(r1.prefill_tokens, fed);
    ASSERT_EQ(s->n_past(), fed);
    EXPECT_TRUE(std::equal(prompt1.begin(), prompt1.begin() + fed, s->cache_tokens().begin()));
    ASSERT_EQ(s->turns().size(), 2u);

    if (regen) {
      const TurnResult r2 = s->regenerate();
      ASSERT_TRUE(r2.error.empty()) << r2.error;
      EXPECT_EQ(r2.prefill_tokens, int(prompt1.size()) - fed);
      EXPECT_EQ(r2.reply, text_of(greedy_from_scratch(prompt1, max_tokens)));
    } else {
      const TurnResult r2 = s->submit("The cat");
      ASSERT_TRUE(r2.error.empty()) << r2.error;
      const auto cache = s->cache_tokens();
      ASSERT_GE(cache.size(), prompt1.size());
      EXPECT_TRUE(std::equal(prompt1.begin(), prompt1.end(), cache.begin()));
      expect_reply_matches_from_scratch(*s, r2, max_tokens);
    }
  }
}

// Forwards to a real backend; the call numbered `fail_at` (0 = the next one)
// and every later one throw until fail_at is reset to -1. With
// can_step_back false it goes on only forward or from position 0, as the
// OpenCL engine's sliding-window rings after a step back of more than a
// prefill chunk (a call elsewhere throws, as theirs does).
class ScriptedBackend final : public Backend {
 public:
  explicit ScriptedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  int fail_at = -1;
  bool can_step_back = true;

  std::string name() const override { return inner_->name(); }
  int n_ctx() const override { return inner_->n_ctx(); }
  bool can_resume(int pos) const override { return can_step_back || pos == 0 || pos >= end_; }
  int32_t prefill(std::span<const int32_t> tokens, int pos) override {
    tick(pos, tokens.size());
    return inner_->prefill(tokens, pos);
  }
  int32_t decode_argmax(int32_t token, int pos) override {
    tick(pos, 1);
    return inner_->decode_argmax(token, pos);
  }
  std::span<const float> decode_logits(int32_t token, int pos) override {
    tick(pos, 1);
    return inner_->decode_logits(token, pos);
  }

 private:
  void tick(int pos, size_t n) {
    if (!can_resume(pos)) throw std::logic_error("a step back the backend cannot take");
    end_ = pos == 0 ? pos + int(n) : std::max(end_, pos + int(n));
    if (fail_at < 0) return;
    if (fail_at == 0) throw std::runtime_error("injected backend failure");
    --fail_at;
  }
  std::unique_ptr<Backend> inner_;
  int end_ = 0;  // one past the highest position fed since position 0
};

std::vector<std::string> texts_of(const std::vector<Turn>& turns) {
  std::vector<std::string> out;
  for (const Turn& t : turns) out.push_back(t.text);
  return out;
}

TEST_P(ChatSessionTest, FailedTurnLeavesTheConversationAsItWas) {
  const int max_tokens = 12;
  ScriptedBackend backend(make_backend(256));
  auto s = make_session(backend, max_tokens);
  const TurnResult r1 = s->submit("Tom had a dog");
  ASSERT_TRUE(r1.error.empty()) << r1.error;
  const std::vector<std::string> before = texts_of(s->turns());
  const std::vector<int32_t> cache_before(s->cache_tokens().begin(), s->cache_tokens().end());

  // Fails mid-reply: the prompt and 3 reply steps went through.
  backend.fail_at = 4;
  std::string streamed;
  TurnHooks hooks;
  hooks.on_text = [&](std::string_view piece) { streamed += piece; };
  const TurnResult failed = s->submit("The cat", hooks);
  ASSERT_EQ(failed.reason, ev::FinishReason::Error);
  EXPECT_FALSE(streamed.empty()) << "a partial reply was made";
  EXPECT_EQ(texts_of(s->turns()), before) << "no user turn, no partial reply";
  EXPECT_EQ(std::vector<int32_t>(s->cache_tokens().begin(), s->cache_tokens().end()), cache_before);

  // A failed regenerate keeps the reply it was to replace.
  backend.fail_at = 0;
  EXPECT_EQ(s->regenerate().reason, ev::FinishReason::Error);
  EXPECT_EQ(texts_of(s->turns()), before);

  // The chat goes on from where it was.
  backend.fail_at = -1;
  const TurnResult again = s->regenerate();
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_EQ(again.reply, r1.reply);
  const TurnResult r2 = s->submit("The cat");
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  EXPECT_EQ(s->turns().size(), 4u);
  expect_reply_matches_from_scratch(*s, r2, max_tokens);
}

// A backend that cannot step back: regenerate feeds the conversation again
// from position 0 instead of the prompt's last token, and a failed turn's
// restore forgets the cache; the replies stay the same.
TEST_P(ChatSessionTest, RegenerateRebuildsWhenTheBackendCannotStepBack) {
  const int max_tokens = 10;
  ScriptedBackend backend(make_backend(256));
  backend.can_step_back = false;
  auto s = make_session(backend, max_tokens);
  s->submit("Tom had a dog");
  const TurnResult r2 = s->submit("The sun was hot");
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  const TurnResult again = s->regenerate();
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_EQ(again.prefill_tokens, s->n_past() - again.decode_tokens);  // from position 0
  EXPECT_EQ(again.reply, r2.reply);

  backend.fail_at = 4;  // mid-reply: the cache moved past the turn's start
  EXPECT_EQ(s->submit("The cat").reason, ev::FinishReason::Error);
  backend.fail_at = -1;
  const TurnResult r3 = s->submit("The cat");
  ASSERT_TRUE(r3.error.empty()) << r3.error;
  EXPECT_EQ(r3.prefill_tokens, s->n_past() - r3.decode_tokens);  // rebuilt from the text
  expect_reply_matches_from_scratch(*s, r3, max_tokens);
}

TEST_P(ChatSessionTest, RefusedRegenerateKeepsTheReply) {
  auto backend = make_backend(64);
  auto s = make_session(*backend, 8);
  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "the big dog ran to the park ";
  // Loaded text: the cache is rebuilt for the regenerate, and the user turn
  // alone does not fit.
  s->load("", {{Role::User, huge}, {Role::Assistant, "It was fun."}});
  const std::vector<std::string> before = texts_of(s->turns());
  const TurnResult r = s->regenerate();
  EXPECT_EQ(r.reason, ev::FinishReason::ContextFull);
  EXPECT_EQ(texts_of(s->turns()), before);
  EXPECT_EQ(s->turns().back().role, Role::Assistant);
}

TEST_P(ChatSessionTest, RepeatPenaltyAppliesToGreedy) {
  // stories260K repeats tokens within 40 greedy tokens of this prompt (see
  // test_cli's reference ids), so a strong penalty must change the reply.
  auto backend = make_backend(256);
  auto reply = [&](float penalty) {
    auto s = make_session(*backend, 40);
    SamplingParams p;
    p.max_tokens = 40;
    p.repeat_penalty = penalty;
    s->set_sampling(p);
    return s->submit("Once upon a time");
  };
  const TurnResult plain = reply(1.0f);
  const TurnResult penalised = reply(2.0f);
  ASSERT_TRUE(plain.error.empty() && penalised.error.empty());
  EXPECT_NE(penalised.reply, plain.reply);
  // And greedy with the penalty is deterministic.
  EXPECT_EQ(reply(2.0f).reply, penalised.reply);
}

TEST_P(ChatSessionTest, RegenerateAndReloadGiveTheSameGreedyReply) {
  const int max_tokens = 10;
  auto backend = make_backend(256);
  auto s = make_session(*backend, max_tokens);
  s->submit("Tom had a dog");
  const TurnResult r2 = s->submit("The sun was hot");
  const TurnResult again = s->regenerate();
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_EQ(again.prefill_tokens, 1);  // only the prompt's last token is fed again
  EXPECT_EQ(again.reply, r2.reply);
  EXPECT_EQ(s->turns().size(), 4u);

  // A conversation loaded as text rebuilds its cache on the next turn.
  std::vector<Turn> turns(s->turns().begin(), s->turns().end() - 1);
  s->load("", turns);
  const TurnResult rebuilt = s->regenerate();
  EXPECT_EQ(rebuilt.reason, ev::FinishReason::Error);  // the last turn is a user's
  turns.pop_back();
  s->load("", turns);
  const TurnResult r = s->submit("The sun was hot");
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.prefill_tokens, s->n_past() - r.decode_tokens);  // all of it, from position 0
  expect_reply_matches_from_scratch(*s, r, max_tokens);

  s->clear();
  EXPECT_EQ(s->n_past(), 0);
  EXPECT_TRUE(s->turns().empty());
}

TEST_P(ChatSessionTest, SeededSamplingRepeats) {
  auto backend = make_backend(256);
  auto run = [&] {
    auto s = make_session(*backend, 12);
    SamplingParams p;
    p.temperature = 0.9f;
    p.seed = 1234;
    p.max_tokens = 12;
    p.repeat_penalty = 1.1f;
    s->set_sampling(p);
    return s->submit("Once upon a time").reply;
  };
  const std::string a = run();
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(run(), a);
}

// A sampled turn that fails mid-reply is undone with the draws it took: sent
// again, it gives the reply a session that never failed gives.
TEST_P(ChatSessionTest, FailedSampledTurnGivesBackItsDraws) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 1234;
  p.max_tokens = 12;
  auto reply = [&](int fail_at) {
    ScriptedBackend backend(make_backend(256));
    auto s = make_session(backend, p.max_tokens);
    s->set_sampling(p);
    backend.fail_at = fail_at;  // the prompt and fail_at - 1 reply steps go through
    if (fail_at >= 0) {
      EXPECT_EQ(s->submit("Once upon a time").reason, ev::FinishReason::Error);
    }
    backend.fail_at = -1;
    const TurnResult r = s->submit("Once upon a time");
    EXPECT_TRUE(r.error.empty()) << r.error;
    return r.reply;
  };
  const std::string never_failed = reply(-1);
  EXPECT_FALSE(never_failed.empty());
  EXPECT_EQ(reply(6), never_failed);
}

// The same sampled conversation (two turns, a regenerated reply, a cleared
// one) on both backends: the same seed gives the same text. The OpenCL
// backend samples on the device, the reference on the host.
TEST(ChatSessionSampling, SameSeedSameTextOnBothBackends) {
  SamplingParams p =
      test::Sampling{.top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.1f, .max_tokens = 24}
          .params();
  auto conversation = [&](Backend& backend, uint64_t seed) {
    ChatSession s(backend, *stories().tokenizer, ChatTemplate(TemplateStyle::Plain));
    p.seed = seed;
    s.set_sampling(p);
    std::vector<std::string> replies;
    replies.push_back(s.submit("Once upon a time").reply);
    replies.push_back(s.submit("The cat was").reply);
    replies.push_back(s.regenerate().reply);
    s.clear();
    replies.push_back(s.submit("Tom had a dog").reply);
    return replies;
  };
  ClForward opencl(stories().model, test::cl_test_runtime(), ClForwardOptions{256});
  ASSERT_TRUE(opencl.device_sampling(p)) << "the device chain is not used";
  const auto reference = make_reference_backend(stories().model, 256);
  for (uint64_t seed : {1u, 2024u}) {
    const std::vector<std::string> want = conversation(*reference, seed);
    EXPECT_EQ(conversation(opencl, seed), want) << "seed " << seed;
    EXPECT_NE(want[1], want[2]) << "a regenerated reply draws on";
  }
}

// Settings changed between turns (a /set reaches the session only between
// turns, while the last turn's steps enqueued ahead may still be running on
// the device; the next turn's prefill drops them): each turn samples with its
// own settings, device chain and device argmax alike, as the reference does.
TEST(ChatSessionSampling, SettingsChangedBetweenTurnsOnBothBackends) {
  using S = test::Sampling;
  const std::vector<SamplingParams> settings = {
      S{.top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.1f, .seed = 11, .max_tokens = 20}
          .params(),
      S{.temperature = 1.4f, .top_k = 8, .seed = 11, .max_tokens = 20}.params(),
      S{.temperature = 0.0f, .max_tokens = 20}.params(),  // greedy: the device argmax
      S{.temperature = 0.6f,
        .top_k = 100,
        .repeat_penalty = 1.3f,
        .repeat_last_n = 8,
        .presence_penalty = 0.5f,
        .seed = 99,
        .max_tokens = 20}
          .params(),
  };
  auto conversation = [&](Backend& backend) {
    ChatSession s(backend, *stories().tokenizer, ChatTemplate(TemplateStyle::Plain));
    std::vector<std::string> replies;
    const char* turns[] = {"Once upon a time", "The cat was", "Tom had a dog", "Then"};
    for (size_t i = 0; i < settings.size(); ++i) {
      s.set_sampling(settings[i]);
      replies.push_back(s.submit(turns[i]).reply);
    }
    s.set_sampling(settings[1]);
    replies.push_back(s.regenerate().reply);
    return replies;
  };
  ClForward opencl(stories().model, test::cl_test_runtime(), ClForwardOptions{256});
  for (const SamplingParams& p : settings) {
    if (!p.greedy()) {
      ASSERT_TRUE(opencl.device_sampling(p)) << "the device chain is not used";
    }
  }
  const auto reference = make_reference_backend(stories().model, 256);
  EXPECT_EQ(conversation(opencl), conversation(*reference));
}

// The sizes of the prefill calls a backend gets.
class PrefillSizes final : public Backend {
 public:
  explicit PrefillSizes(Backend& b) : b_(b) {}
  std::string name() const override { return b_.name(); }
  int n_ctx() const override { return b_.n_ctx(); }
  int32_t prefill(std::span<const int32_t> tokens, int pos) override {
    sizes.push_back(tokens.size());
    return b_.prefill(tokens, pos);
  }
  int prefill_stop_points(size_t) const override { return stop_points; }
  int32_t decode_argmax(int32_t token, int pos) override { return b_.decode_argmax(token, pos); }
  std::span<const float> decode_logits(int32_t token, int pos) override {
    return b_.decode_logits(token, pos);
  }
  std::vector<size_t> sizes;
  int stop_points = 0;  // claimed (prefill_until stays the default: prefill)

 private:
  Backend& b_;
};

// A session's first prompt starts with a chunk of 32 tokens and grows them by
// the speed it measures (at most 4x a step); a later prompt starts where that
// speed says. stories260K on the CPU reference runs a chunk far below the
// 0.3 s a chunk may take, so each step grows 4x, and the second prompt (after
// the first's reply) starts past 32 tokens.
// A plain-template stories260K session whose replies stop after 2 tokens.
std::unique_ptr<ChatSession> two_token_session(Backend& backend) {
  auto s = std::make_unique<ChatSession>(backend, *stories().tokenizer,
                                         ChatTemplate(TemplateStyle::Plain));
  SamplingParams p;
  p.max_tokens = 2;
  s->set_sampling(p);
  return s;
}

TEST(ChatSessionPrefill, LaterPromptsStartAtTheMeasuredChunkSize) {
  const auto reference = make_reference_backend(stories().model, 1024);
  PrefillSizes backend(*reference);
  const auto session = two_token_session(backend);
  ChatSession& s = *session;
  const std::string long_text = dog_sentences(20);
  ASSERT_TRUE(s.submit(long_text).error.empty());
  ASSERT_GE(backend.sizes.size(), 3u);
  EXPECT_EQ(backend.sizes[0], 32u);
  EXPECT_EQ(backend.sizes[1], 128u);
  const size_t first_prompt_calls = backend.sizes.size();
  ASSERT_TRUE(s.submit(long_text).error.empty());
  ASSERT_GT(backend.sizes.size(), first_prompt_calls);
  EXPECT_GT(backend.sizes[first_prompt_calls], 32u);
}

// A backend with stop points starts a session at chunks of 128 tokens, then
// 4x a step up to prefill_chunk (the chunk may take (points + 1) / 2 x 0.3 s).
TEST(ChatSessionPrefill, StoppingBackendsStartAt128Tokens) {
  const auto reference = make_reference_backend(stories().model, 1024);
  PrefillSizes backend(*reference);
  backend.stop_points = 4;
  const auto s = two_token_session(backend);
  s->set_prefill_chunk(256);
  ASSERT_TRUE(s->submit(dog_sentences(50)).error.empty());
  ASSERT_GE(backend.sizes.size(), 3u);
  EXPECT_EQ(backend.sizes[0], 128u);
  EXPECT_EQ(backend.sizes[1], 256u);
}

// The session's Backend with decode_sample left to the host (the default):
// the same OpenCL logits, sampled by the CPU sampler.
class HostSampled final : public Backend {
 public:
  explicit HostSampled(Backend& b) : b_(b) {}
  std::string name() const override { return b_.name(); }
  int n_ctx() const override { return b_.n_ctx(); }
  int32_t prefill(std::span<const int32_t> tokens, int pos) override {
    return b_.prefill(tokens, pos);
  }
  int32_t decode_argmax(int32_t token, int pos) override { return b_.decode_argmax(token, pos); }
  std::span<const float> decode_logits(int32_t token, int pos) override {
    return b_.decode_logits(token, pos);
  }

 private:
  Backend& b_;
};

// Longer sampled replies on OpenCL, on the device chain and on the host
// from the same backend's logits: the history the device keeps (synced per
// turn, appended per token) must be the context the host sees.
TEST(ChatSessionSampling, DeviceChainIsTheHostChainOnOpenCL) {
  const SamplingParams p = test::Sampling{.temperature = 1.0f,
                                          .top_k = 20,
                                          .repeat_penalty = 1.3f,
                                          .repeat_last_n = 16,
                                          .frequency_penalty = 0.2f,
                                          .presence_penalty = 0.1f,
                                          .seed = 7,
                                          .max_tokens = 48}
                               .params();
  auto conversation = [&](Backend& backend) {
    ChatSession s(backend, *stories().tokenizer, ChatTemplate(TemplateStyle::Plain));
    s.set_sampling(p);
    std::vector<std::string> replies;
    for (const char* turn : {"Once upon a time", "Lily saw a bird", "Then"}) {
      replies.push_back(s.submit(turn).reply);
    }
    replies.push_back(s.regenerate().reply);
    return replies;
  };
  ClForward device(stories().model, test::cl_test_runtime(), ClForwardOptions{512});
  ASSERT_TRUE(device.device_sampling(p));
  ClForward host_logits(stories().model, test::cl_test_runtime(), ClForwardOptions{512});
  HostSampled host(host_logits);
  EXPECT_EQ(conversation(device), conversation(host));
}

INSTANTIATE_TEST_SUITE_P(Backends, ChatSessionTest, ::testing::Values("reference", "opencl"),
                         [](const auto& info) { return info.param; });

// SmolLM2-135M-Instruct answers a ChatML turn on the OpenCL device; its first
// tokens match the CPU reference's.
TEST(ChatSessionSmolLM2, AnswersAChatMLTurn) {
  const Model model = load_model(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(*model.file);
  ClForward backend(model, test::cl_test_runtime(), ClForwardOptions{256});
  ChatSession s(backend, *tokenizer, ChatTemplate::from_gguf(*model.file, ""));
  SamplingParams p;
  p.max_tokens = 24;
  s.set_sampling(p);
  std::string streamed;
  TurnHooks hooks;
  hooks.on_text = [&](std::string_view piece) { streamed += piece; };
  const TurnResult r = s.submit("What is the capital of France?", hooks);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(streamed, r.reply);
  EXPECT_NE(r.reply.find("Paris"), std::string::npos) << r.reply;
  EXPECT_EQ(r.reply.find("<|im_"), std::string::npos) << "special tokens are never printed";

  // The prompt is SmolLM2's template with its default system prompt.
  const std::string text =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
      "<|im_start|>assistant\n";
  const auto prompt = tokenizer->encode(text, true, true);
  EXPECT_EQ(r.prefill_tokens, int(prompt.size()));
  auto reference = make_reference_backend(model, int(prompt.size()) + 4);
  int32_t next = reference->prefill(prompt, 0);
  const auto cache = s.cache_tokens();
  ASSERT_GT(cache.size(), prompt.size() + 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(next, cache[prompt.size() + size_t(i)]) << "token " << i;
    next = reference->decode_argmax(cache[prompt.size() + size_t(i)], int(prompt.size()) + i);
  }
}

}  // namespace
}  // namespace clchat
