// The NVIDIA fast path of a decode step: the whole token as ONE launch of the
// persistent kernel in kernels/decode_persistent.cl, whose work-groups meet at
// grid-wide barriers (5 per layer + 1). ClForward uses it for plain decode
// steps when create() succeeds; debug readback, profiling and prefill keep the
// multi-kernel plan.
//
// Eligibility (otherwise create() returns null and says why in the log):
// NVIDIA platform with the warp-shuffle self-test passed (inline PTX), head
// size a multiple of 32, all layers sharing their weight types with Q/K/V
// stacked, the weights fitting one extra allocation (they are copied into an
// arena so the kernel can address every layer through offsets: OpenCL 1.2 has
// no device pointers), and a start-up barrier test showing every work-group
// resident. CLCHAT_NO_PERSISTENT=1 turns the path off; CLCHAT_PERSIST_WGS sets
// work-groups per compute unit (default 2).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cl_runtime.h"

namespace clchat {

class ClForward;

class PersistentDecode {
 public:
  static std::unique_ptr<PersistentDecode> create(ClForward& forward);

  // Enqueues the token at ids[token_index], position `pos`; the argmax lands
  // in ids[0] (-2 there means the barrier gave up: work-groups were not all
  // resident; the caller must then stop using this path).
  void enqueue(int token_index, int pos);
  int n_groups() const { return int(n_groups_); }
  ~PersistentDecode();

 private:
  explicit PersistentDecode(ClForward& forward) : f_(forward) {}
  bool build(uint32_t groups_per_cu);
  bool barrier_self_test();

  ClForward& f_;
  ClProgram program_;
  ClKernel kernel_;
  ClMem arena_, layer_off_, bar_, abort_, part_val_, part_idx_;
  size_t n_groups_ = 0;
  uint32_t barriers_per_token_ = 0;
  uint32_t bar_base_ = 0;  // arrivals counted so far (wraps)
  // CLCHAT_PERSIST_TRACE=1: GPU clock after every barrier, summed per stage
  // over the tokens and logged at the end.
  ClMem trace_;
  std::vector<double> trace_sum_us_;
  int trace_tokens_ = 0;
  double barrier_us_ = 0;
};

}  // namespace clchat
