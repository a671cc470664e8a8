// The device buffers a decode step reads and writes: the activations of one
// position, the KV cache and the token ids. The multi-kernel plan
// (decode_plan.h), the persistent kernel (persistent_decode.h) and the
// batched prefill (prefill.h) all work on one DecodeState, each with its own
// private scratch besides. Lives as long as the context (n_ctx positions).
#pragma once

#include "engine/cl/runtime.h"
#include "engine/model/model.h"

namespace clchat {

struct DecodeState {
  int n_ctx = 0;  // positions in the KV cache
  ClMem x;        // (n_embd) float: the residual stream
  ClMem q;        // (n_embd_q) float: the roped queries
  ClMem att_out;  // (n_embd_q) float: the attention's output, before Wo
  ClMem h;        // (n_ff) float: silu(Wgate xn) * (Wup xn)
  ClMem logits;   // (n_vocab) float
  ClMem scores;   // (n_head, n_ctx) float: attention scores (the CPU kernels')
  ClMem k_cache;  // (n_layer, n_ctx, n_embd_kv) float
  ClMem v_cache;  // (n_layer, n_ctx, n_embd_kv) float
  // (n_ctx) int: the token ids of a step or a prompt; each step's argmax
  // lands in ids[0], the next step's input.
  ClMem ids;
  // (2 n_layer, n_embd) float, host-readable: x after the attention and
  // after the FFN of every layer (debug readback; allocated on first use).
  ClMem debug_hidden;

  DecodeState(const ModelConfig& c, const ClRuntime& rt, int n_ctx);
};

}  // namespace clchat
