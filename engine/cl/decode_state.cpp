#include "engine/cl/decode_state.h"

namespace clchat {

DecodeState::DecodeState(const ModelConfig& c, const ClRuntime& rt, int n_ctx_in)
    : n_ctx(n_ctx_in) {
  x = rt.alloc(size_t(c.n_embd) * 4);
  q = rt.alloc(size_t(c.n_embd_q()) * 4);
  att_out = rt.alloc(size_t(c.n_embd_q()) * 4);
  h = rt.alloc(size_t(c.n_ff) * 4);
  logits = rt.alloc(size_t(c.n_vocab) * 4);
  scores = rt.alloc(size_t(c.n_head) * size_t(n_ctx) * 4);
  const size_t cache_bytes = size_t(c.n_layer) * size_t(n_ctx) * size_t(c.n_embd_kv()) * 4;
  k_cache = rt.alloc(cache_bytes);
  v_cache = rt.alloc(cache_bytes);
  ids = rt.alloc(size_t(n_ctx) * 4);
}

}  // namespace clchat
