// The OpenCL forward pass. A decode step is a fixed plan of kernel launches
// built once at load (arguments preset; only position-dependent ones change
// per token), enqueued with no host wait in between; the host reads back 4
// bytes, the argmax token id, which also stays on the device as the next
// step's input.
//
// Per token (decode.cpp lists it in order):
//   embed (get_row) -> per layer: [norm+QKV+RoPE+KV append] -> attention ->
//   [Wo + residual] -> [norm+gate/up+SiLU] -> [down + residual]
//   -> [final norm + lm_head] -> argmax (2 stages)
// That is 5 launches per layer + 4, e.g. 154 for SmolLM2-135M. On CPU
// devices (PoCL) the attention runs inside the QKV launch and the argmax
// inside the lm_head launch (KernelTuning::cpu_fuse): 4 per layer + 2, 122
// for SmolLM2-135M; each launch saved spares PoCL ~20 us of waking its
// worker threads. Where engine/cl/persistent_decode.* is eligible (NVIDIA, x86-64
// CPU devices), plain decode steps are one launch instead; the plan then
// serves debug readback and recomputes a token whose barrier gave up.
//
// Debug readback mode (set_debug) adds device-side copies of the hidden state
// after attention and after the FFN of every layer into a host-readable
// buffer, and reads the logits, then computes per-layer statistics and the
// top-5 candidates. Normal mode never touches those buffers.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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
  int32_t prefill(std::span<const int32_t> tokens, int pos) override;
  int32_t decode_argmax(int32_t token, int pos) override;
  std::span<const float> decode_logits(int32_t token, int pos) override;
  // Waits for decode steps enqueued ahead (greedy lookahead on the persistent
  // path) and forgets them; every other entry point does this itself.
  void settle();
  // Batched prefill (ClPrefill) with the logits of positions first_out.. read
  // back; position by position when the chunk size is 1.
  void prefill_logits(std::span<const int32_t> tokens, int pos, int first_out,
                      std::vector<float>& out) override;
  int prefill_chunk() const { return prefill_ ? prefill_->chunk() : 1; }

  void set_debug(bool on) override;
  bool debug() const override { return debug_; }
  const DebugReport* debug_report() const override { return &debug_report_; }
  // Needs a runtime created with profiling; on by default then.
  void set_profiling(bool on) override { profiling_ = on && rt_.profiling(); }
  // Filled after each call while profiling is on.
  const ProfileReport* profile_report() const override { return &profile_; }
  const ProfileReport& profile() const { return profile_; }

  uint64_t weight_bytes() const { return weight_bytes_; }
  // Plain decode steps run as one persistent-kernel launch (NVIDIA, or a CPU
  // device of an x86-64 host; after self-tests); false: the multi-kernel plan.
  bool persistent_decode() const { return persistent_ != nullptr; }
  int launches_per_token() const;
  const ClRuntime& runtime() const { return rt_; }

 private:
  friend class PersistentDecode;  // reads the weights and buffers below
  struct Launch {
    ClKernel kernel;
    size_t global = 0;
    size_t local = 0;  // 0: let the runtime choose
    const char* label = "";
    int layer = -1;
  };
  struct LayerPlan {
    std::vector<Launch> qkv;  // one launch when Wq, Wk, Wv share a type
    std::vector<int> qkv_row_base;
    Launch attention, wo, gate_up, down;
  };

  void upload_weights(const Model& model);
  void build_plan();
  Launch matvec_launch(const DeviceMatrix& w, const ClMem& x, const ClMem* norm_w, bool accumulate,
                       const ClMem& out, const char* label, int layer);
  // Enqueues one position; the token id is read from ids_[token_index].
  void enqueue_token(int token_index, int pos, bool with_head);
  void enqueue(const Launch& l);
  void enqueue_head();  // lm_head and argmax
  void fuse_qkv_attention(const DeviceMatrix& m, const ClMem& norm_w, Launch& l);
  void check_position(int pos, size_t n_tokens) const;
  // One decode step; `lookahead`: on the persistent path, also enqueue the
  // next k_lookahead greedy steps (each reading the id the one before chose),
  // so the device never waits for the host between tokens.
  int32_t decode_step(int32_t token, int pos, bool lookahead);
  int32_t persistent_step(int32_t token, int pos, bool lookahead);
  int32_t persistent_traced_step(int32_t token, int pos);
  void write_ids(std::span<const int32_t> ids);
  // ids_[0] = token, unless it is known to hold it already.
  void feed_token(int32_t token);
  int32_t read_token();
  void collect_debug(int pos);
  void collect_profile();
  void start_persistent_decode();
  void make_prefill(int chunk);  // cl_forward.cpp, "batched prefill" section

  const ModelConfig config_;
  ClRuntime& rt_;
  const Tuning tuning_;  // checked; the plan's as ClPrograms fitted it is programs_.tuning()
  ClPrograms programs_;
  int n_ctx_ = 0;
  bool debug_ = false;
  bool profiling_ = false;
  uint64_t weight_bytes_ = 0;

  // Weights (read-only).
  DeviceMatrix token_embd_, output_;  // output_ unused (q empty) when tied
  DeviceMatrix output_norm_;
  struct LayerWeights {
    DeviceMatrix attn_norm, ffn_norm;
    std::vector<DeviceMatrix> qkv;  // stacked [Wq; Wk; Wv], or three when types differ
    DeviceMatrix wo, ffn_gate, ffn_up, ffn_down;
  };
  std::vector<LayerWeights> layers_;
  ClMem rope_cs_;  // (n_ctx, n_rot / 2) float2: cos, sin

  // Scratch (device-only).
  ClMem x_, q_, att_out_, h_, logits_, scores_, k_cache_, v_cache_;
  ClMem argmax_val_, argmax_idx_, ids_;
  int argmax_groups_ = 0;
  // Debug readback (host-readable; allocated on first use).
  ClMem debug_hidden_;

  // The plan.
  Launch embed_;
  std::vector<LayerPlan> plan_;
  Launch lm_head_, argmax_partial_, argmax_final_;     // argmax_* empty when folded into lm_head_
  ClMem head_part_val_, head_part_idx_, head_n_done_;  // the folded argmax's partials, count
  ClMem head_done_;  // (n_head) uint: q/k/v row blocks written per head (folded attention)

  std::unique_ptr<PersistentDecode> persistent_;  // null: not eligible
  std::unique_ptr<ClPrefill> prefill_;            // batched prefill; null: chunk size 1

  static constexpr size_t k_lookahead = 2;
  int32_t lookahead_token_ = -1;  // input of the oldest step in flight (the last id returned)
  int32_t device_token_ = -1;     // id known to be in ids_[0], or -1
  std::vector<ClEvent> events_;   // profiling events of the current token
  std::vector<std::pair<const Launch*, size_t>> event_owner_;
  std::vector<float> logits_host_;
  DebugReport debug_report_;
  ProfileReport profile_;
};

}  // namespace clchat
