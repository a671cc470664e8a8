// The multi-kernel decode plan: a decode step as a fixed list of kernel
// launches, built once (arguments bound by name; only the token index and the
// position change per step) and enqueued with no host wait in between.
//
// Per token, in model order (enqueue_token):
//   embed (get_row) -> per layer: [norm+QKV+RoPE+KV append] -> attention ->
//   [Wo + residual] -> [norm+gate/up+SiLU] -> [down + residual]
//   -> [final norm + lm_head] -> argmax (2 stages), the id into ids[0]
// That is 5 launches per layer + 4, e.g. 154 for SmolLM2-135M. On CPU
// devices (PoCL) the attention runs inside the QKV launch and the argmax
// inside the lm_head launch (KernelTuning::cpu_fuse): 4 per layer + 2, 122
// for SmolLM2-135M; each launch saved spares PoCL ~20 us of waking its
// worker threads. Where a layer's Wq, Wk and Wv differ in type, its QKV
// step is three launches.
//
// Models of other architectures (ModelConfig::plain_llama() false) use only
// the head (enqueue_head); ClForward runs their layers on ClPrefill.
//
// Debug mode adds device-side copies of x after the attention and after the
// FFN of every layer into DecodeState::debug_hidden; profiling records an
// event per launch (take_profile() sums them per kernel and per layer).
#pragma once

#include <utility>
#include <vector>

#include "engine/cl/decode_state.h"
#include "engine/cl/programs.h"
#include "engine/cl/runtime.h"
#include "engine/cl/weights.h"
#include "engine/forward_reports.h"
#include "engine/model/model.h"

namespace clchat {

// The arguments of the matvec kernels (matvec.cl, matvec_cpu.cl):
// out (+)= m @ (x, or rmsnorm(x) * norm_w when norm_w is given).
KernelArgs matvec_args(const DeviceMatrix& m, const ClMem& x, const ClMem* norm_w, float eps,
                       bool accumulate, const ClMem& out);

// The arguments of attention_decode (attention.cl, attention_cpu.cl): query
// heads q (n_embd_q) over a layer's cache rows from its first, into out;
// n_pos is set per step (and, for a window in a ring, layer_off and wrap_at).
KernelArgs attention_decode_args(const ModelConfig& c, const DecodeState& s, const ClMem& q,
                                 const KvLayer& layer, const ClMem& out);

class DecodePlan {
 public:
  // `rt`, `w` and `s` must outlive the plan.
  DecodePlan(const ModelConfig& c, const ClRuntime& rt, ClPrograms& programs,
             const DeviceWeights& w, DecodeState& s);

  // The step of the token at ids[token_index], position `pos`; `with_head`:
  // also the lm_head and the argmax.
  void enqueue_token(int token_index, int pos, bool with_head);
  // logits = lm_head(rmsnorm(x)); ids[0] = argmax(logits).
  void enqueue_head();

  void set_debug(bool on);  // allocates DecodeState::debug_hidden
  void set_profiling(bool on) { profiling_ = on; }
  // Device times of the launches enqueued since the last call (profiling).
  ProfileReport take_profile();
  int launches_per_token() const;

 private:
  struct Launch {
    ClKernel kernel;
    size_t global = 0;
    size_t local = 0;  // 0: let the runtime choose
    const char* label = "";
    int layer = -1;
  };
  // qkv_rope (or qkv_rope_attention): its per-token arguments.
  struct QkvLaunch : Launch {
    cl_uint arg_pos = 0, arg_cache_off = 0;
  };
  struct LayerPlan {
    std::vector<QkvLaunch> qkv;  // one launch when Wq, Wk, Wv share a type
    Launch attention;            // empty when folded into qkv (CPU devices)
    cl_uint attention_arg_n_pos = 0;
    Launch wo, gate_up, down;
  };

  Launch matvec_launch(const DeviceMatrix& m, const ClMem& x, const ClMem* norm_w, bool accumulate,
                       const ClMem& out, const char* label, int layer);
  LayerPlan layer_plan(int il);
  QkvLaunch qkv_launch(const DeviceMatrix& m, int row_base, int il);
  void fuse_qkv_attention(const DeviceMatrix& m, const ClMem& norm_w, QkvLaunch& l);
  void plan_head();
  void enqueue(const Launch& l);
  void copy_x_to_debug(size_t slot);

  const ModelConfig config_;
  const ClRuntime& rt_;
  ClPrograms& programs_;
  const DeviceWeights& w_;
  DecodeState& s_;
  bool debug_ = false;
  bool profiling_ = false;

  Launch embed_;
  cl_uint embed_arg_token_index_ = 0;
  std::vector<LayerPlan> layers_;
  Launch lm_head_, argmax_partial_, argmax_final_;  // argmax_* empty when folded into lm_head_
  // The plan's own scratch:
  int argmax_groups_ = 0;
  ClMem argmax_val_, argmax_idx_;  // (argmax_groups) float, int: the argmax's partials
  // CPU devices, the argmax folded into the lm_head: (lm_head work-groups)
  // float, int partials and a (1) uint count of the groups done.
  ClMem head_part_val_, head_part_idx_, head_n_done_;
  // CPU devices, the attention folded into QKV: (n_head) uint, the q/k/v row
  // blocks written per head (each head's last group resets its own).
  ClMem head_done_;

  std::vector<std::pair<const Launch*, ClEvent>> events_;  // profiling, since take_profile()
};

}  // namespace clchat
