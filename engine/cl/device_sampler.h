// The sampling chain on the device (kernels/sample.cl): from the logits of a
// decode step to the next token, with the penalties, top-k, temperature,
// top-p, min-p and the draw of engine/chat/sampler.h, choosing the same id as
// sample_token() for the same seed and draw number. The chosen id lands in
// ids[0] (the next step's input, where the argmax would) and in the device's
// history of recent ids, so sampled decoding runs without the host between
// tokens: the host reads back 4 bytes, and steps can be enqueued ahead.
//
// What runs here is device_samplable() (engine/chat/sampler.h): top_k 1..256
// (or greedy with penalties), penalties over at most 1024 recent tokens;
// anything else (top_k 0 = all, above 256, repeat_last_n -1) stays with the
// host sampler. The penalties change the logits buffer in place (the debug
// readback's top-5 then shows penalised logits). Needs cl_khr_fp64 (see sample.cl: the chain
// computes the CPU's roundings); create() says null without it.
//
// History: `history` (n_ctx + 1 ints) holds the token at each position; the
// chain at pos reads positions pos + 1 - n_recent .. pos and writes its pick
// at pos + 1. The host keeps what it knows the buffer holds and, before a
// step, uploads only the window positions that differ from the context it is
// given (a new turn, a rolled-back /regen, a rebuilt cache): in a running
// reply nothing, since the device wrote each position itself.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/cl/programs.h"
#include "engine/cl/runtime.h"
#include "engine/messages.h"

namespace clchat {

// One step's chain parameters as the kernels take them (sample.cl's
// sample_chain; decode_persistent.cl's decode_token, which runs the chain
// itself where PersistentDecode::samples() says so).
struct SampleStepArgs {
  cl_int n_recent = 0, top_k = 1;
  cl_float repeat_penalty = 1, frequency_penalty = 0, presence_penalty = 0, temperature = 0,
           top_p = 1, min_p = 0;
  cl_ulong seed = 0, draw = 0;

  // The kernel arguments of these values, under the names and in the order
  // both kernels give them, to bind with the kernel's others.
  std::vector<KernelArg> kernel_args() const;
};

// Where those arguments sit in a kernel's bound list, to set them per step.
class SampleArgSlots {
 public:
  SampleArgSlots() = default;
  explicit SampleArgSlots(const KernelArgs& bound);
  void set(cl_kernel k, const SampleStepArgs& a) const;
  void set_top_k(cl_kernel k, cl_int top_k) const;

 private:
  std::array<cl_uint, 10> index_{};  // in the kernels' order
};

class DeviceSampler {
 public:
  // Null when the device lacks cl_khr_fp64 or sample.cl does not build
  // there (logged). `logits` (n_vocab floats; the penalties change it in
  // place) and `ids` must outlive the sampler.
  static std::unique_ptr<DeviceSampler> create(const ClRuntime& rt, ClPrograms& programs,
                                               int n_vocab, int n_ctx, const ClMem& logits,
                                               const ClMem& ids);

  // Tokens the penalties of a step at `pos` look back over.
  static int n_recent(const SamplingParams& p, int pos);
  // Whether the device's history holds `recent` (its last element at pos)
  // over the window of `p` (nothing to upload).
  bool holds(std::span<const int32_t> recent, int pos, const SamplingParams& p) const;
  // Uploads the window positions the device does not hold (blocking).
  // `recent` must hold at least n_recent(p, pos) tokens.
  void sync(std::span<const int32_t> recent, int pos, const SamplingParams& p);
  // Enqueues the chain on the logits of position `pos` (one launch; never
  // waits). ids[0] < 0 on entry (a failed step's mark) is kept.
  void enqueue(const SamplingParams& p, uint64_t draw, int pos);
  // The arguments of the chain at `pos`, for a kernel that runs it (the
  // persistent one): counted as enqueued (the pick at pos + 1 unknown until
  // picked()).
  SampleStepArgs step_args(const SamplingParams& p, uint64_t draw, int pos);
  // The recent ids' buffer the chain reads and writes.
  const ClMem& history() const { return history_; }
  // The id the chain at `pos` chose, as the caller read it back: now known
  // to be in the history at pos + 1.
  void picked(int pos, int32_t id);
  int n_groups() const { return n_groups_; }

 private:
  DeviceSampler(const ClRuntime& rt, ClPrograms& programs, int n_vocab, int n_ctx,
                const ClMem& logits, const ClMem& ids);

  const ClRuntime& rt_;
  const int n_vocab_;
  const int n_ctx_;
  int wg_ = 1;  // work-items per group (KernelTuning::sample_wg)
  int n_groups_ = 1;
  int chunk_ = 0;           // vocabulary ids per group
  ClMem history_;           // (n_ctx + 1) int: the token at each position
  ClMem part_;              // (n_groups, k_device_top_k_max) ulong: each group's candidates
  ClMem part_n_;            // (n_groups) int: how many
  ClMem done_;              // (1) uint: groups finished, over all launches (wraps)
  uint32_t done_base_ = 0;  // its value when the next launch begins
  ClKernel kernel_;
  // Per-step arguments (indices in the kernel's list).
  cl_uint arg_pos_ = 0, arg_done_base_ = 0;
  SampleArgSlots step_slots_;
  std::vector<int32_t> known_;  // (n_ctx + 1): what history holds, -1: not known
};

}  // namespace clchat
