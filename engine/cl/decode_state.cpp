#include "engine/cl/decode_state.h"

#include <algorithm>

namespace clchat {

int kv_ring_rows(const ModelConfig& c, int n_ctx, int chunk) {
  if (c.sliding_window <= 0) return n_ctx;
  return int(std::min<int64_t>(n_ctx, int64_t(c.sliding_window) + std::max(chunk, 1)));
}

std::vector<KvLayer> kv_layers(const ModelConfig& c, int n_ctx, int kv_ring) {
  std::vector<KvLayer> layers;
  cl_ulong offset = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const int rows = c.is_swa(il) ? kv_ring : n_ctx;
    layers.push_back({offset, rows});
    offset += cl_ulong(rows) * cl_ulong(c.n_embd_kv());
  }
  return layers;
}

uint64_t kv_cache_bytes(const ModelConfig& c, int n_ctx, int kv_ring) {
  const std::vector<KvLayer> layers = kv_layers(c, n_ctx, kv_ring);
  if (layers.empty()) return 0;
  const cl_ulong floats = layers.back().offset + cl_ulong(layers.back().rows) * c.n_embd_kv();
  return uint64_t(floats) * 4;
}

DecodeState::DecodeState(const ModelConfig& c, const ClRuntime& rt, int n_ctx_in, int kv_ring_in)
    : n_ctx(n_ctx_in), kv_ring(kv_ring_in), kv(kv_layers(c, n_ctx_in, kv_ring_in)) {
  x = rt.alloc(size_t(c.n_embd) * 4);
  q = rt.alloc(size_t(c.n_embd_q()) * 4);
  att_out = rt.alloc(size_t(c.n_embd_q()) * 4);
  h = rt.alloc(size_t(c.n_ff) * 4);
  logits = rt.alloc(size_t(c.n_vocab) * 4);
  scores = rt.alloc(size_t(c.n_head) * size_t(n_ctx) * 4);
  const size_t cache_bytes = kv_cache_bytes(c, n_ctx, kv_ring);
  k_cache = rt.alloc(cache_bytes);
  v_cache = rt.alloc(cache_bytes);
  ids = rt.alloc((size_t(n_ctx) + k_id_ring) * 4);
}

}  // namespace clchat
