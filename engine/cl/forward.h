// The OpenCL forward pass behind the Backend interface. It owns the parts of
// the engine by lifetime:
//   DeviceWeights (weights.h)        the model's weights, read-only, and the RoPE table
//   DecodeState (decode_state.h)     activations, KV cache, token ids
//   DecodePlan (decode_plan.h)       a decode step as ~5 launches per layer
//   PersistentDecode (persistent_decode.h)  a decode step as one launch, where eligible
//   ClPrefill (prefill.h)            prompts in chunks, matrix-matrix kernels
// The plan, the persistent decoder and the prefill each work on
// (const DeviceWeights&, DecodeState&). A step reads its input id from
// DecodeState::ids and leaves its argmax in ids[0], so greedy decoding never
// sends a token to the device: the host reads back 4 bytes.
//
// Plain decode steps take the persistent kernel when there is one (it is
// verified against the plan on the first token) and, greedy, enqueue the next
// steps ahead (lookahead); debug readback and profiling events use the plan,
// which also recomputes a token whose barrier gave up.
//
// Sampled steps (decode_sample) run the sampling chain on the device
// (DeviceSampler, device_sampler.h) right after the step's launch in the same
// in-order queue: it replaces the argmax in ids[0] with the sampled id, so
// the lookahead works as for greedy (each step enqueued ahead samples with
// the next draw number). Parameters the device chain does not take
// (device_samplable) and devices without cl_khr_fp64 sample on the host.
//
// Debug readback mode (set_debug) copies the hidden state after attention and
// after the FFN of every layer into a host-readable buffer and reads the
// logits, then computes per-layer statistics and the top-5 candidates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/cl/decode_plan.h"
#include "engine/cl/decode_state.h"
#include "engine/cl/device_sampler.h"
#include "engine/cl/persistent_decode.h"
#include "engine/cl/prefill.h"
#include "engine/cl/programs.h"
#include "engine/cl/runtime.h"
#include "engine/cl/tuning.h"
#include "engine/cl/weights.h"
#include "engine/forward_reports.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"

namespace clchat {

struct ClForwardOptions {
  int n_ctx = 0;  // KV cache positions; 0 = the model's training context
  // Batched prefill: tokens per chunk (matrix-matrix kernels, ClPrefill);
  // 1 = position by position through the decode plan.
  int prefill_chunk = 512;
  // Unset: Tuning::for_device(the runtime's device). Checked against the
  // device either way (std::invalid_argument names a bad value).
  std::optional<Tuning> tuning = std::nullopt;
};

class ClForward final : public Backend {
 public:
  // `rt` must outlive this object. Uploads the weights and builds the plan.
  ClForward(const Model& model, ClRuntime& rt, const ClForwardOptions& options);
  ~ClForward() override;

  std::string name() const override;
  int n_ctx() const override { return n_ctx_; }
  bool can_resume(int pos) const override;
  int32_t prefill(std::span<const int32_t> tokens, int pos) override;
  // Batched prefill (ClPrefill) of at most one chunk asks `stop` after
  // layers 1 .. n_layer - 1; one layer stays queued ahead of the host, so
  // the device does not wait for the checks.
  std::optional<int32_t> prefill_until(std::span<const int32_t> tokens, int pos,
                                       const std::function<bool()>& stop) override;
  int prefill_stop_points(size_t n_tokens) const override;
  int32_t decode_argmax(int32_t token, int pos) override;
  std::span<const float> decode_logits(int32_t token, int pos) override;
  int32_t decode_sample(int32_t token, int pos, const SamplingParams& params, uint64_t draw,
                        std::span<const int32_t> recent) override;
  // Whether decode_sample runs `params` on the device (device_samplable and
  // the device chain built here).
  bool device_sampling(const SamplingParams& params);
  // Waits for decode steps enqueued ahead (greedy lookahead on the persistent
  // path) and forgets them; every other entry point does this itself.
  void settle();
  // Batched prefill (ClPrefill) with the logits of positions first_out.. read
  // back; position by position when the chunk size is 1.
  void prefill_logits(std::span<const int32_t> tokens, int pos, int first_out,
                      std::vector<float>& out) override;
  int prefill_chunk() const { return prefill_ ? prefill_->chunk() : 1; }
  // Batched prefill's matrix products of the kind (none without it).
  int prefill_products(ClPrefill::Product kind) const {
    return prefill_ ? prefill_->matrix_products(kind) : 0;
  }
  int prefill_split_products() const { return prefill_ ? prefill_->split_products() : 0; }
  int prefill_large_tile_products() const { return prefill_ ? prefill_->large_tile_products() : 0; }
  std::vector<int> prefill_short_plan_tokens() const {
    return prefill_ ? prefill_->short_plan_tokens() : std::vector<int>{};
  }

  void set_debug(bool on) override;
  bool debug() const override { return debug_; }
  const DebugReport* debug_report() const override { return &debug_report_; }
  // Needs a runtime created with profiling; on by default then.
  void set_profiling(bool on) override;
  // Filled after each call while profiling is on.
  const ProfileReport* profile_report() const override { return &profile_; }
  const ProfileReport& profile() const { return profile_; }

  uint64_t weight_bytes() const { return weights_.n_bytes; }
  // Bytes a decode step at position pos reads from the device's memory: every
  // matrix in its device layout (the embedding's one row aside, when the
  // head is a matrix of its own) and the KV cache's rows it attends to.
  uint64_t decode_read_bytes(int pos) const;
  // Plain decode steps run as one persistent-kernel launch (NVIDIA, or a CPU
  // device of an x86-64 host; after self-tests); false: the multi-kernel plan.
  bool persistent_decode() const { return persistent_ != nullptr; }
  int launches_per_token() const;
  // Launches of a step sampled with `p`: 1 where the persistent kernel runs
  // the chain itself (NVIDIA), one more than launches_per_token() with the
  // device chain after the step, launches_per_token() on the host.
  int sampled_launches_per_token(const SamplingParams& p);
  // Tokens the persistent kernel drew with its own chain so far.
  uint64_t tokens_sampled_in_decode_kernel() const {
    return persistent_ ? persistent_->n_sampled_launches() : 0;
  }
  // For the tests, where the persistent kernel samples `p` (NVIDIA): its
  // chain alone on `logits`, at the position of recent's last token (the
  // context, as decode_sample takes it); the id it draws.
  int32_t sample_in_decode_kernel(std::span<const float> logits, const SamplingParams& p,
                                  uint64_t draw, std::span<const int32_t> recent);
  const ClRuntime& runtime() const { return rt_; }

 private:
  // A model whose graph is not llama's: every step runs on ClPrefill.
  bool general() const { return !config_.plain_llama(); }
  // Whether a prefill of n_tokens runs on ClPrefill (else the decode plan,
  // token by token).
  bool batched(size_t n_tokens) const { return general() || (prefill_ && n_tokens > 1 && !debug_); }
  void check_position(int pos, size_t n_tokens) const;
  // One decode step; `lookahead`: on the persistent path, also enqueue the
  // next k_lookahead greedy steps (each reading the id the one before chose),
  // so the device never waits for the host between tokens.
  // A sampled step: the parameters, the draw number at `pos`, the context.
  struct SampleStep {
    SamplingParams params;
    uint64_t draw = 0;
    int pos = 0;
    std::span<const int32_t> recent;  // ends with the token at pos
  };
  // `sample` null: the argmax stays in ids[0].
  int32_t decode_step(int32_t token, int pos, bool lookahead, const SampleStep* sample = nullptr);
  int32_t plan_step(int32_t token, int pos, const SampleStep* sample);
  int32_t persistent_step(int32_t token, int pos, bool lookahead, const SampleStep* sample);
  int32_t persistent_traced_step(int32_t token, int pos, const SampleStep* sample);
  // The device chain (created on first use; null: sampling stays on the host).
  DeviceSampler* device_sampler();
  // Before a step's chain runs: the device's history holds the context.
  void sync_history(const SampleStep& s);
  // The chain for the step at `at` of a run that began with `s`.
  void enqueue_sample(const SampleStep& s, int at);
  // The steps in flight sample as `s` would (null: they are greedy).
  bool ahead_samples_as(const SampleStep* s) const;
  // After the persistent kernel gave a token up: the plan runs it, and the
  // kernel is rearmed or (after k_max_timeouts) dropped.
  void after_persistent_timeout();
  // check_position, and that the sliding-window rings still hold what a
  // call at pos needs (can_resume); records the positions written.
  void claim_positions(int pos, size_t n_tokens);
  void write_ids(std::span<const int32_t> ids);
  // ids[0] = token, unless it is known to hold it already.
  void feed_token(int32_t token);
  int32_t read_token();
  void collect_debug(int pos);
  void take_profile();
  void start_persistent_decode();

  const ModelConfig config_;
  ClRuntime& rt_;
  const Tuning tuning_;  // checked; the plan's as ClPrograms fitted it is programs_.tuning()
  const int n_ctx_;
  ClPrograms programs_;
  DeviceWeights weights_;
  DecodeState state_;
  DecodePlan plan_;
  std::unique_ptr<PersistentDecode> persistent_;  // null: not eligible
  std::unique_ptr<ClPrefill> prefill_;            // batched prefill; null: chunk size 1
  std::unique_ptr<DeviceSampler> sampler_;        // null: not created yet, or unavailable
  bool sampler_tried_ = false;
  bool debug_ = false;
  bool profiling_ = false;
  // One past the highest position written since the last call at position
  // 0 (can_resume).
  int written_end_ = 0;

  static constexpr size_t k_lookahead = 2;
  int32_t lookahead_token_ = -1;  // input of the oldest step in flight (the last id returned)
  int32_t device_token_ = -1;     // id known to be in ids[0], or -1
  std::optional<SampleStep> ahead_sample_;  // how the steps in flight sample (none: greedy)
  std::vector<float> logits_host_;
  DebugReport debug_report_;
  ProfileReport profile_;
};

}  // namespace clchat
