// The fast path of a decode step: the whole token as ONE launch of a
// persistent kernel whose work-groups meet at grid-wide barriers (5 per layer
// + 1 or 2): kernels/decode_persistent.cl on NVIDIA (warps, inline PTX),
// kernels/decode_persistent_cpu.cl on CPU devices (one work-group per core,
// spin barriers; PoCL wakes a sleeping worker thread for every launch, which
// cost ~35 us each on the 2-core VM). ClForward uses it for plain decode
// steps when create() succeeds; debug readback and prefill keep the
// multi-kernel plan.
//
// Eligibility (otherwise create() returns null and says why in the log):
// NVIDIA with the warp-shuffle self-test passed (inline PTX) and head size a
// power of two from 32 to 256; or a CPU device of an x86-64 host with the
// CPU kernels on (KernelTuning::cpu_kernels) and head size a multiple of 4.
// Either kernel runs llama's graph or any other ModelConfig describes (the
// same compile-time options); q's width (heads x head size) a multiple of
// 32; at most two
// weight types per role over the layers (LayerTypes: Q, K, V, Wo, gate and up,
// down; a layer's gate and up of one type), the weights fitting one extra
// allocation (they are copied into an arena so the kernel can address every
// layer through offsets: OpenCL 1.2 has no device pointers), and a start-up
// barrier test showing every work-group resident. DecodeTuning::persistent
// (engine/cl/tuning.h) turns the path off. NVIDIA: one work-group of 512
// work-items per SM is tried first, then two of 256 per SM, then one
// (persist_wg_size keeps one size); CPU devices: one work-group per core (one
// per PoCL worker thread). persist_wgs_per_cu sets work-groups per compute
// unit, persist_groups their total.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cl/decode_state.h"
#include "engine/cl/device_sampler.h"
#include "engine/cl/runtime.h"
#include "engine/cl/tuning.h"
#include "engine/cl/weights.h"
#include "engine/forward_reports.h"
#include "engine/model/model.h"

namespace clchat {

class PersistentDecode {
 public:
  // Null when the path is not eligible or its self-test fails (the log says
  // why). `tuning.plan` is the plan's tuning as ClPrograms fitted it (warp
  // shuffles on only after their self-test). `rt`, `w` and `s` must outlive
  // the decoder (the weights are copied into its arena; the RoPE table is
  // read from `w`).
  static std::unique_ptr<PersistentDecode> create(const ModelConfig& c, const ClRuntime& rt,
                                                  const DecodeTuning& tuning,
                                                  const DeviceWeights& w, DecodeState& s);

  // Enqueues the token at ids[token_index], position `pos`; the argmax lands
  // in ids[0] (-2 there means the barrier gave up: work-groups were not all
  // resident; the caller must then stop using this path).
  // traced: also record the device clock after every barrier and make profile()
  // this token's per-stage and per-layer times (a blocking read; profiling
  // samples a few tokens).
  // sample: the kernel draws the token with the sampling chain instead (only
  // where samples() says so), reading and writing `history` (the
  // DeviceSampler's) as sample.cl's chain does.
  void enqueue(int token_index, int pos, bool traced = false,
               const SampleStepArgs* sample = nullptr, const ClMem* history = nullptr);
  // Whether the kernel itself runs the sampling chain for `p` (NVIDIA: in the
  // token's launch, decode_persistent.cl; top_k at most the work-group count
  // and the model wide enough for its local scratch); else the caller runs
  // DeviceSampler's chain after the launch.
  bool samples(const SamplingParams& p) const;
  // For the tests: the kernel's chain alone on the logits buffer as it is,
  // at `pos` (history as for enqueue); the pick lands in ids[0], which must
  // hold an id (>= 0).
  void sample_logits(const SampleStepArgs& a, const ClMem& history, int pos);
  // Launches that drew their token with the kernel's own chain.
  uint64_t n_sampled_launches() const { return n_sampled_; }
  const ProfileReport& profile() const { return profile_; }
  int n_groups() const { return int(n_groups_); }

  // Lookahead for greedy decoding: the token at `pos` enqueued with the id in
  // ids[0] as its input (what the kernel before it chose), followed by a
  // non-blocking read of the id it chooses. Queued tokens run back to back on
  // the device while the host handles the ones before. `after_launch`, when
  // given, enqueues more work between the launch and the read (the sampling
  // chain, which replaces the argmax in ids[0]).
  // `in_kernel`, when given (samples() true), makes the launch at a position
  // sample, with the arguments it returns, in `history`.
  void enqueue_ahead(int pos, const std::function<void(int pos)>& after_launch = nullptr,
                     const std::function<SampleStepArgs(int pos)>& in_kernel = nullptr,
                     const ClMem* history = nullptr);
  // The oldest token in flight is at `pos`.
  bool ahead_at(int pos) const { return !ahead_.empty() && ahead_.front().pos == pos; }
  size_t n_ahead() const { return ahead_.size(); }
  // Waits for the oldest token in flight (at `pos`) and returns its id (-2:
  // the barrier gave up, see enqueue).
  int32_t take(int pos);
  // Forgets the tokens in flight after they finish (their cache writes are
  // past the last position the caller used: later steps overwrite them).
  void drop_ahead();
  // After a token came back as -2 (a barrier gave up: a work-group did not
  // run for ~0.1 s) and the tokens in flight were dropped: clears the abort
  // flag and counts from the barrier's current arrivals, so the next token
  // can use the kernel again. False after k_max_timeouts: stop using it.
  bool rearm();
  int n_timeouts() const { return n_timeouts_; }
  static constexpr int k_max_timeouts = 3;
  ~PersistentDecode();

 private:
  // Work-items per work-group and the work-group counts to try with them.
  struct Shape {
    size_t local;
    std::vector<size_t> groups;
  };
  PersistentDecode(const ModelConfig& c, const ClRuntime& rt, const DecodeTuning& tuning,
                   const DeviceWeights& w, DecodeState& s);
  // Why the path cannot run this model here; empty when it can.
  static std::string ineligible(const ModelConfig& c, const DeviceInfo& dev,
                                const DecodeTuning& tuning, const DeviceWeights& w);
  // The shapes to try, in order; empty when none fits local memory.
  static std::vector<Shape> shapes_to_try(const ModelConfig& c, const DeviceInfo& dev,
                                          const DecodeTuning& tuning);
  bool build(const std::vector<Shape>& shapes);
  void alloc_scratch();
  std::string defines() const;
  size_t xn_stride() const;
  std::string graph_defines() const;
  std::string prefetch_defines() const;
  size_t sample_scratch() const;
  void set_sample_args(const SampleStepArgs* a, const ClMem* history);
  void set_trace_arg(bool trace);
  // One launch of decode_token (its token_index and pos arguments), counting
  // the `barriers` grid barriers it passes in bar_base_.
  // `launched`: where to put the launch's event (null: none).
  void launch(int token_index, int pos_arg, uint32_t barriers, cl_event* launched = nullptr);
  // enqueue's body; `launched` as for launch.
  void enqueue_step(int token_index, int pos, bool traced, const SampleStepArgs* sample,
                    const ClMem* history, cl_event* launched);
  // ahead_'s read of the id a launch at `pos` chose (into ahead_ids_[slot]),
  // returning its event: NVIDIA, no work queued after the launch
  // (`launch_event` set): the id's copy at ids[n_ctx + pos % k_id_ring], on
  // read_queue_ after the launch; else ids[0] on the queue, after all of it.
  cl_event enqueue_id_read(int pos, size_t slot, cl_event launch_event);
  std::string source() const;
  bool try_shapes(const std::vector<Shape>& shapes, const std::string& source,
                  const std::string& defines);
  void build_kernel(const std::string& source, const std::string& defines);
  void read_trace(bool to_profile);
  bool barrier_self_test();
  double run_barrier_test(cl_kernel k, int rounds);
  void reset_barrier();
  cl_ulong spin_ticks() const;
  void log_trace_sums() const;

  struct Ahead {
    int pos;
    size_t slot;
    ClEvent read;
  };
  const ModelConfig config_;
  const ClRuntime& rt_;
  const DecodeTuning tuning_;
  const DeviceWeights& w_;  // the RoPE table; the matrices are read from arena_
  DecodeState& s_;
  const LayerTypes types_;  // the layers' weight types (the kernel's WT_* defines)
  const bool cpu_;          // decode_persistent_cpu.cl, else decode_persistent.cl (NVIDIA)
  std::deque<Ahead> ahead_;
  // Host slots the reads land in (a ring): a mapped CL_MEM_ALLOC_HOST_PTR
  // buffer, i.e. pinned memory. NVIDIA's OpenCL completes a non-blocking read
  // into ordinary (pageable) memory before returning from the enqueue, which
  // stalls the host until the token before it is done.
  static constexpr size_t k_slots = 4;
  ClMem ahead_buf_;  // (k_slots) int, host-mapped at ahead_ids_
  // NVIDIA: the queue the ids are read on, so that the next launch need not
  // wait for a read between them (in the one in-order queue the read held it
  // back ~9 us: H200 tg128 +1.7% at 1B, +2.1% at 135M). Created with ahead_buf_.
  ClQueue read_queue_;
  int32_t* ahead_ids_ = nullptr;
  size_t next_slot_ = 0;
  WeightArena arena_;
  ClProgram program_;
  ClKernel kernel_;
  // decode_token's per-token arguments (their indices in its list).
  cl_uint arg_token_index_ = 0, arg_pos_ = 0, arg_bar_base_ = 0, arg_trace_ = 0;
  // NVIDIA: the history buffer and the chain's parameters.
  cl_uint arg_history_ = 0;
  SampleArgSlots sample_slots_;
  cl_mem history_bound_ = nullptr;  // the history argument now set
  bool kernel_samples_ = false;     // top_k > 0 now set
  uint64_t n_sampled_ = 0;          // n_sampled_launches()
  // The kernel's own scratch:
  ClMem bar_;        // (1) uint: the grid barrier's arrival count
  ClMem abort_;      // (1) uint: set when a barrier gave up
  ClMem part_val_;   // (n_groups) float: per-group argmax partials
  ClMem part_idx_;   // (2 n_groups) int: the same (NVIDIA self-test: two words per group)
  ClMem att_part_;   // (n_head, ATT_SPLIT_MAX, head_dim + 2) float: attention split partials
  ClMem att_count_;  // (n_head) uint: attention splits done per head
  ClMem work_;       // CPU: (1) uint, the chunk-claim counter
  ClMem xn_;  // CPU: (n_groups, xn_stride()) floats, each group's normed input and its 16-bit form
  ClMem post_out_;  // (n_embd) float, Wo att and Wd h before their post-norms
  ClMem cand_;      // NVIDIA: (n_groups + list) ulong, the sampling chain's candidates
  ClMem cand_n_;    // NVIDIA: (1) uint, the list's length
  ClMem trace_;     // (barriers per token + 1) ulong, host-readable: the clock after each barrier
  size_t n_groups_ = 0;
  size_t local_size_ = 256;
  uint32_t lead_barriers_ = 0;  // barriers before layer 0 (CPU: after the embedding)
  uint32_t barriers_per_token_ = 0;
  uint32_t bar_base_ = 0;    // arrivals counted so far (wraps)
  uint64_t n_enqueued_ = 0;  // tokens launched (CLCHAT_FAULT=barrier_timeout)
  int n_timeouts_ = 0;
  // Clock after every barrier: the GPU's in ns, the CPU's TSC in ticks.
  // DecodeTuning::trace traces every token and logs the per-stage sums at
  // the end.
  bool trace_arg_ = false;  // the kernel's trace argument is set
  ProfileReport profile_;
  std::vector<double> trace_sum_us_;
  double trace_start_us_ = 0;
  int trace_tokens_ = 0;
  double barrier_us_ = 0;
  double trace_ticks_per_us_ = 1000.0;
};

}  // namespace clchat
