// The device buffers a decode step reads and writes: the activations of one
// position, the KV cache and the token ids. The multi-kernel plan
// (decode_plan.h), the persistent kernel (persistent_decode.h) and the
// batched prefill (prefill.h) all work on one DecodeState, each with its own
// private scratch besides. Lives as long as the context (n_ctx positions).
#pragma once

#include <vector>

#include "engine/cl/runtime.h"
#include "engine/model/model.h"

namespace clchat {

// Rows of a sliding-window layer's K/V ring when chunks of up to `chunk`
// positions are prefilled: a chunk writes its rows before its first query
// attends back window - 1 positions, so window + chunk rows keep every key
// a query needs (capped at n_ctx). n_ctx for models without a window.
int kv_ring_rows(const ModelConfig& c, int n_ctx, int chunk);

// Where a layer's K and V rows are: `rows` rows of n_embd_kv floats from
// float `offset` of k_cache and v_cache; position p in row p % rows (rows is
// n_ctx, or a sliding-window layer's kv_ring).
struct KvLayer {
  cl_ulong offset = 0;
  int rows = 0;
};

// Every layer's KvLayer, one after the other, for n_ctx positions and rings
// of kv_ring rows.
std::vector<KvLayer> kv_layers(const ModelConfig& c, int n_ctx, int kv_ring);

// Bytes of each of the K and V caches laid out by kv_layers.
uint64_t kv_cache_bytes(const ModelConfig& c, int n_ctx, int kv_ring);

struct DecodeState {
  int n_ctx = 0;            // positions in the KV cache
  int kv_ring = 0;          // rows of each sliding-window layer (kv_ring_rows; n_ctx: no ring)
  std::vector<KvLayer> kv;  // n_layer entries
  ClMem x;                  // (n_embd) float: the residual stream
  ClMem q;                  // (n_embd_q) float: the roped queries
  ClMem att_out;            // (n_embd_q) float: the attention's output, before Wo
  ClMem h;                  // (n_ff) float: silu(Wgate xn) * (Wup xn)
  ClMem logits;             // (n_vocab) float
  ClMem scores;             // (n_head, n_ctx) float: attention scores (the CPU kernels')
  ClMem k_cache;            // the layers' K rows (kv)
  ClMem v_cache;            // the layers' V rows (kv)
  // (n_ctx + k_id_ring) int: the token ids of a step or a prompt; each step's
  // argmax lands in ids[0], the next step's input. The NVIDIA persistent
  // kernel also copies its id to ids[n_ctx + pos % k_id_ring], which the host
  // reads on a queue of its own (PersistentDecode::enqueue_ahead) while the
  // next token's launch, reading ids[0], runs.
  ClMem ids;
  static constexpr int k_id_ring = 4;
  // (2 n_layer, n_embd) float, host-readable: x after the attention and
  // after the FFN of every layer (debug readback; allocated on first use).
  ClMem debug_hidden;

  DecodeState(const ModelConfig& c, const ClRuntime& rt, int n_ctx, int kv_ring);
};

}  // namespace clchat
