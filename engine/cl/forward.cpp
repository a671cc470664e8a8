// ClForward: the parts built in order, and the step itself (which path runs
// it, lookahead, debug readback).
#include "engine/cl/forward.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/chat/sampler.h"

namespace clchat {

namespace {

// The options' tuning (else the device's), checked, with the attention
// work-group widened to cover a head.
Tuning tuning_for(const ModelConfig& c, const DeviceInfo& device,
                  const std::optional<Tuning>& given) {
  if (c.head_dim % 4 != 0) {
    throw std::runtime_error("head size " + std::to_string(c.head_dim) +
                             " is not a multiple of 4 (unsupported by the attention kernel)");
  }
  Tuning t = given ? *given : Tuning::for_device(device);
  t.check(device);
  int& att_wg = t.decode.plan.att_wg;
  while (att_wg < c.head_dim) att_wg *= 2;
  if (size_t(att_wg) > device.max_work_group_size) {
    throw std::runtime_error("head size " + std::to_string(c.head_dim) +
                             " exceeds the work-group limit of " + device.name);
  }
  return t;
}

// The KV cache positions: the wanted ones (0: the model's), reduced until
// the cache (its sliding-window layers rings for prefill chunks of `chunk`)
// fits one allocation and a quarter of the device memory.
int fit_context(const ModelConfig& c, const DeviceInfo& device, int wanted, int chunk) {
  const int n_ctx = wanted > 0 ? wanted : c.n_ctx_train;
  const uint64_t budget = std::min(device.max_alloc_bytes, device.global_mem_bytes / 4);
  const auto fits = [&](int n) {
    return kv_cache_bytes(c, n, kv_ring_rows(c, n, chunk)) <= budget;
  };
  if (fits(n_ctx)) return n_ctx;
  int lo = 0, hi = n_ctx;  // the most positions that fit: in lo..hi
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (lo < 1) throw std::runtime_error("the KV cache does not fit " + device.name);
  // Logged only: the caller tells the user (context_reduced_note, device_fit.h).
  spdlog::info("context {} does not fit {} memory; reduced to {}", n_ctx, device.name, lo);
  return lo;
}

}  // namespace

ClForward::ClForward(const Model& model, ClRuntime& rt, const ClForwardOptions& options)
    : config_(model.config),
      rt_(rt),
      tuning_(tuning_for(model.config, rt.device(), options.tuning)),
      n_ctx_(fit_context(model.config, rt.device(), options.n_ctx, options.prefill_chunk)),
      programs_(rt, tuning_.decode.plan),
      weights_(model, rt, n_ctx_),
      state_(model.config, rt, n_ctx_, kv_ring_rows(model.config, n_ctx_, options.prefill_chunk)),
      plan_(model.config, rt, programs_, weights_, state_),
      profiling_(rt.profiling()) {
  // Other architectures run every step on ClPrefill (decode: one token,
  // where the persistent kernel cannot take it).
  if (options.prefill_chunk > 1 || general()) {
    prefill_ = std::make_unique<ClPrefill>(
        config_, rt_, weights_, state_, std::clamp(options.prefill_chunk, 1, n_ctx_),
        programs_.tuning().build_options, tuning_.prefill, general() ? &programs_ : nullptr);
  }
  set_profiling(profiling_);
  start_persistent_decode();
}

// Takes the one-launch decode path only if its first token agrees with the
// multi-kernel plan (same logits within 1e-3 relative, same argmax).
void ClForward::start_persistent_decode() {
  DecodeTuning tuning = tuning_.decode;
  tuning.plan = programs_.tuning();  // warp shuffles as their self-test left them
  std::unique_ptr<PersistentDecode> fast =
      PersistentDecode::create(config_, rt_, tuning, weights_, state_);
  if (!fast) return;
  const int32_t token = 0;
  const bool profiling = profiling_;
  set_profiling(false);
  const std::span<const float> plan_logits = decode_logits(token, 0);  // the plan first
  const std::vector<float> want(plan_logits.begin(), plan_logits.end());
  persistent_ = std::move(fast);
  const std::span<const float> got = decode_logits(token, 0);
  set_profiling(profiling);
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  if (!persistent_ || persistent_->n_timeouts() > 0) {
    spdlog::warn("persistent decode kernel timed out on its first token; not used");
    persistent_.reset();
    return;
  }
  if (!(rel <= 1e-3) || device_token_ < 0) {
    spdlog::warn(
        "persistent decode kernel disagrees with the multi-kernel plan (relative error "
        "{:.3g}); not used",
        rel);
    persistent_.reset();
    return;
  }
  spdlog::info("persistent decode kernel verified (relative error {:.3g})", rel);
}

ClForward::~ClForward() = default;

std::string ClForward::name() const { return "opencl (" + rt_.device().name + ")"; }

uint64_t ClForward::decode_read_bytes(int pos) const {
  uint64_t bytes = weights_.n_bytes;
  if (weights_.output.q) bytes -= weights_.token_embd.n_bytes;
  const ModelConfig& c = config_;
  for (int il = 0; il < c.n_layer; ++il) {
    const int seen = c.is_swa(il) ? std::min(pos + 1, c.sliding_window) : pos + 1;
    bytes += 2 * uint64_t(seen) * uint64_t(c.n_embd_kv()) * sizeof(float);  // K and V rows
  }
  return bytes;
}

int ClForward::launches_per_token() const {
  if (persistent_ && !debug_) return 1;  // profiling traces the same launch
  // (the plan contributes its head only: not its embedding lookup)
  if (general()) return prefill_->launches_per_token() + plan_.launches_per_token() - 1;
  return plan_.launches_per_token();
}

int ClForward::sampled_launches_per_token(const SamplingParams& p) {
  if (!device_sampling(p)) return launches_per_token();
  if (persistent_ && !debug_ && persistent_->samples(p)) return 1;
  return launches_per_token() + 1;
}

int32_t ClForward::sample_in_decode_kernel(std::span<const float> logits, const SamplingParams& p,
                                           uint64_t draw, std::span<const int32_t> recent) {
  if (sampled_launches_per_token(p) != 1 || recent.empty() ||
      logits.size() != size_t(config_.n_vocab)) {
    throw std::logic_error("sample_in_decode_kernel: the decode kernel does not sample this");
  }
  const int pos = int(recent.size()) - 1;
  check_position(pos, 1);
  settle();
  write_ids(std::vector<int32_t>{0});
  cl_check(clEnqueueWriteBuffer(rt_.queue(), state_.logits.get(), CL_TRUE, 0, logits.size() * 4,
                                logits.data(), 0, nullptr, nullptr),
           "clEnqueueWriteBuffer(logits)");
  sampler_->sync(recent, pos, p);
  persistent_->sample_logits(sampler_->step_args(p, draw, pos), sampler_->history(), pos);
  const int32_t id = read_token();
  sampler_->picked(pos, id);
  return id;
}

void ClForward::check_position(int pos, size_t n_tokens) const {
  if (pos < 0 || n_tokens == 0 || uint64_t(pos) + n_tokens > uint64_t(n_ctx_)) {
    throw std::out_of_range("positions " + std::to_string(pos) + ".." +
                            std::to_string(pos + int64_t(n_tokens) - 1) +
                            " do not fit the context of " + std::to_string(n_ctx_));
  }
}

bool ClForward::can_resume(int pos) const {
  if (state_.kv_ring >= n_ctx_ || pos <= 0 || pos >= written_end_) return true;
  // The window of position pos starts at `first`; its rows are intact while
  // no later position of the same row was written (written_end_ counts the
  // lookahead steps queued, and a stopped prefill's positions).
  const int64_t first = std::max(0, pos - config_.sliding_window + 1);
  return first + state_.kv_ring >= int64_t(written_end_);
}

void ClForward::claim_positions(int pos, size_t n_tokens) {
  check_position(pos, n_tokens);
  if (!can_resume(pos)) {
    throw std::runtime_error(
        "the sliding-window layers' KV rings no longer hold the positions before " +
        std::to_string(pos) + " (written up to " + std::to_string(written_end_) +
        "); run the context again from position 0");
  }
  const int end = pos + int(n_tokens);
  written_end_ = pos == 0 ? end : std::max(written_end_, end);
}

void ClForward::write_ids(std::span<const int32_t> ids) {
  settle();
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.n_vocab) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  // Blocking: the host array may go away right after.
  cl_check(clEnqueueWriteBuffer(rt_.queue(), state_.ids.get(), CL_TRUE, 0, ids.size_bytes(),
                                ids.data(), 0, nullptr, nullptr),
           "clEnqueueWriteBuffer(ids)");
  device_token_ = ids.size() == 1 ? ids[0] : -1;
}

void ClForward::feed_token(int32_t token) {
  // device_token_ is -1 when unknown: token -1 must still reach the range check.
  if (token < 0 || token != device_token_) write_ids({&token, 1});
}

int32_t ClForward::read_token() {
  int32_t id = -1;
  cl_check(
      clEnqueueReadBuffer(rt_.queue(), state_.ids.get(), CL_TRUE, 0, 4, &id, 0, nullptr, nullptr),
      "clEnqueueReadBuffer(token)");
  device_token_ = id;
  return id;
}

int32_t ClForward::prefill(std::span<const int32_t> tokens, int pos) {
  if (batched(tokens.size())) return *prefill_until(tokens, pos, nullptr);
  claim_positions(pos, tokens.size());
  write_ids(tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    plan_.enqueue_token(int(i), pos + int(i), last);
  }
  const int32_t id = read_token();
  if (debug_) collect_debug(pos + int(tokens.size()) - 1);
  if (profiling_) profile_ = plan_.take_profile();
  return id;
}

std::optional<int32_t> ClForward::prefill_until(std::span<const int32_t> tokens, int pos,
                                                const std::function<bool()>& stop) {
  if (!batched(tokens.size())) return prefill(tokens, pos);
  claim_positions(pos, tokens.size());
  write_ids(tokens);
  // The last position leaves its hidden state in x. (Longer calls run
  // through: a stop after their first chunk would leave the sliding-window
  // rings without the window before pos.)
  const bool stops = prefill_stop_points(tokens.size()) > 0;
  if (!prefill_->run(int(tokens.size()), pos, state_.x, stops ? stop : nullptr)) {
    return std::nullopt;
  }
  plan_.enqueue_head();
  const int32_t id = read_token();
  if (debug_) collect_debug(pos + int(tokens.size()) - 1);
  if (profiling_) take_profile();
  return id;
}

int ClForward::prefill_stop_points(size_t n_tokens) const {
  const bool one_chunk = n_tokens > 1 && n_tokens <= size_t(prefill_chunk());
  return batched(n_tokens) && one_chunk ? config_.n_layer - 1 : 0;
}

int32_t ClForward::decode_argmax(int32_t token, int pos) { return decode_step(token, pos, true); }

std::span<const float> ClForward::decode_logits(int32_t token, int pos) {
  decode_step(token, pos, false);  // no lookahead: it would overwrite the logits
  logits_host_.resize(size_t(config_.n_vocab));
  cl_check(clEnqueueReadBuffer(rt_.queue(), state_.logits.get(), CL_TRUE, 0,
                               logits_host_.size() * 4, logits_host_.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer(logits)");
  return logits_host_;
}

int32_t ClForward::decode_sample(int32_t token, int pos, const SamplingParams& params,
                                 uint64_t draw, std::span<const int32_t> recent) {
  if (!device_samplable(params) ||
      recent.size() < size_t(std::max(0, DeviceSampler::n_recent(params, pos))) ||
      !device_sampler()) {
    return Backend::decode_sample(token, pos, params, draw, recent);  // on the host
  }
  const SampleStep s{params, draw, pos, recent};
  return decode_step(token, pos, true, &s);
}

bool ClForward::device_sampling(const SamplingParams& params) {
  return device_samplable(params) && device_sampler() != nullptr;
}

DeviceSampler* ClForward::device_sampler() {
  if (!sampler_tried_) {
    sampler_tried_ = true;
    sampler_ =
        DeviceSampler::create(rt_, programs_, config_.n_vocab, n_ctx_, state_.logits, state_.ids);
  }
  return sampler_.get();
}

void ClForward::sync_history(const SampleStep& s) { sampler_->sync(s.recent, s.pos, s.params); }

void ClForward::enqueue_sample(const SampleStep& s, int at) {
  sampler_->enqueue(s.params, s.draw + uint64_t(at - s.pos), at);
}

bool ClForward::ahead_samples_as(const SampleStep* s) const {
  if (!s) return !ahead_sample_;
  return ahead_sample_ && ahead_sample_->params == s->params &&
         ahead_sample_->draw + uint64_t(s->pos - ahead_sample_->pos) == s->draw;
}

void ClForward::settle() {
  if (persistent_ && persistent_->n_ahead() > 0) {
    persistent_->drop_ahead();
    device_token_ = -1;  // the last of them wrote ids[0]
  }
}

int32_t ClForward::decode_step(int32_t token, int pos, bool lookahead, const SampleStep* sample) {
  claim_positions(pos, 1);
  if (persistent_ && !debug_) {
    const int32_t id =
        profiling_ ? persistent_traced_step(token, pos, sample)
                   : persistent_step(token, pos, lookahead && tuning_.decode.lookahead, sample);
    if (id >= 0) return id;
    after_persistent_timeout();
  }
  return plan_step(token, pos, sample);
}

void ClForward::after_persistent_timeout() {
  settle();
  device_token_ = -1;
  if (persistent_->rearm()) {
    spdlog::warn(
        "persistent decode kernel timed out at a grid barrier; this token runs on the "
        "multi-kernel plan");
  } else {
    spdlog::warn(
        "persistent decode kernel timed out at a grid barrier {} times; using the "
        "multi-kernel plan",
        PersistentDecode::k_max_timeouts);
    persistent_.reset();
  }
}

int32_t ClForward::plan_step(int32_t token, int pos, const SampleStep* sample) {
  feed_token(token);
  if (sample) sync_history(*sample);
  if (general()) {
    prefill_->run(1, pos, state_.x);
    plan_.enqueue_head();
  } else {
    plan_.enqueue_token(0, pos, true);
  }
  if (sample) enqueue_sample(*sample, pos);  // replaces the argmax in ids[0]
  const int32_t id = read_token();
  if (sample) sampler_->picked(pos, id);
  if (debug_) collect_debug(pos);
  if (profiling_) take_profile();
  return id;
}

int32_t ClForward::persistent_step(int32_t token, int pos, bool lookahead,
                                   const SampleStep* sample) {
  // A continuation finds its step already computed or running: the step
  // before enqueued it with the id it chose as input (and, sampled, the next
  // draw number and the history the chain before it wrote).
  const bool queued = lookahead && token == lookahead_token_ && persistent_->ahead_at(pos) &&
                      ahead_samples_as(sample) &&
                      (!sample || sampler_->holds(sample->recent, pos, sample->params));
  // Each launch's sampling: in the kernel, or a chain after it in the queue.
  std::function<void(int)> chain;
  std::function<SampleStepArgs(int)> in_kernel;
  if (sample) {
    const SampleStep s{sample->params, sample->draw, sample->pos, {}};
    if (persistent_->samples(s.params)) {
      in_kernel = [this, s](int at) {
        return sampler_->step_args(s.params, s.draw + uint64_t(at - s.pos), at);
      };
    } else {
      chain = [this, s](int at) { enqueue_sample(s, at); };
    }
  }
  const ClMem* history = sample ? &sampler_->history() : nullptr;
  if (!queued) {
    settle();
    feed_token(token);
    if (sample) sync_history(*sample);
    persistent_->enqueue_ahead(pos, chain, in_kernel, history);
    ahead_sample_.reset();
    if (sample) ahead_sample_ = SampleStep{sample->params, sample->draw, sample->pos, {}};
  }
  const int32_t id = persistent_->take(pos);
  if (id < 0) return id;
  if (sample) sampler_->picked(pos, id);
  lookahead_token_ = id;
  device_token_ = -1;  // unknown while steps are queued (and if queueing one throws)
  if (lookahead) {
    for (int next = pos + 1 + int(persistent_->n_ahead());
         persistent_->n_ahead() < k_lookahead && next < n_ctx_; ++next) {
      persistent_->enqueue_ahead(next, chain, in_kernel, history);
      written_end_ = std::max(written_end_, next + 1);
    }
  }
  if (persistent_->n_ahead() == 0) device_token_ = id;
  return id;
}

// Profiling on the persistent path: the kernel's own per-stage clock, not the
// multi-kernel plan's events (the bars show what really runs).
int32_t ClForward::persistent_traced_step(int32_t token, int pos, const SampleStep* sample) {
  settle();
  feed_token(token);
  if (sample) sync_history(*sample);
  if (sample && persistent_->samples(sample->params)) {
    const SampleStepArgs a = sampler_->step_args(sample->params, sample->draw, pos);
    persistent_->enqueue(0, pos, true, &a, &sampler_->history());
  } else {
    persistent_->enqueue(0, pos, true);
    if (sample) enqueue_sample(*sample, pos);
  }
  const int32_t id = read_token();
  if (id >= 0) {
    profile_ = persistent_->profile();
    if (sample) sampler_->picked(pos, id);
  }
  return id;
}

void ClForward::set_debug(bool on) {
  plan_.set_debug(on);
  debug_ = on;
}

void ClForward::set_profiling(bool on) {
  profiling_ = on && rt_.profiling();
  plan_.set_profiling(profiling_);
  if (prefill_ && general()) prefill_->set_decode_profiling(profiling_);
}

// The plan's launches, and for other architectures the decode steps' too.
void ClForward::take_profile() {
  profile_ = plan_.take_profile();
  if (!general()) return;
  prefill_->add_decode_profile(profile_);
}

void ClForward::collect_debug(int pos) {
  const ModelConfig& c = config_;
  // Per-layer hidden states come from the decode plan's copies (llama's
  // graph); other architectures report the top candidates only.
  const int n_layers = general() ? 0 : c.n_layer;
  std::vector<float> hidden(size_t(2 * n_layers) * size_t(c.n_embd));
  if (n_layers > 0) {
    cl_check(clEnqueueReadBuffer(rt_.queue(), state_.debug_hidden.get(), CL_TRUE, 0,
                                 hidden.size() * 4, hidden.data(), 0, nullptr, nullptr),
             "clEnqueueReadBuffer(debug)");
  }
  std::vector<float> logits(size_t(c.n_vocab));
  cl_check(clEnqueueReadBuffer(rt_.queue(), state_.logits.get(), CL_TRUE, 0, logits.size() * 4,
                               logits.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer(logits)");
  DebugReport r;
  r.pos = pos;
  for (int il = 0; il < n_layers; ++il) {
    const std::span<const float> all(hidden);
    r.after_attention.push_back(
        compute_hidden_stats(all.subspan(size_t(2 * il) * c.n_embd, c.n_embd)));
    r.after_ffn.push_back(
        compute_hidden_stats(all.subspan(size_t(2 * il + 1) * c.n_embd, c.n_embd)));
  }
  r.top = top_probabilities(logits, 5);
  debug_report_ = std::move(r);
}

// ---- batched prefill (ClPrefill, engine/cl/prefill.*) ----------------------

void ClForward::prefill_logits(std::span<const int32_t> tokens, int pos, int first_out,
                               std::vector<float>& out) {
  claim_positions(pos, tokens.size());
  if (!prefill_) {
    Backend::prefill_logits(tokens, pos, first_out, out);
    return;
  }
  write_ids(tokens);
  prefill_->run_logits(int(tokens.size()), pos, first_out, out);
}

}  // namespace clchat
