// The CPU reference forward pass (llama2.c style): weights dequantized to
// float32 once at construction, one token per call, a float KV cache. Slow and
// plain on purpose: it is the oracle for the OpenCL engine.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace clchat {

class CpuForward {
 public:
  // n_ctx: KV cache positions (0 = the model's training context).
  CpuForward(const Model& model, int n_ctx);

  // Runs `token` at position `pos` (0 <= pos < n_ctx, positions in order) and
  // returns the logits (n_vocab).
  const std::vector<float>& forward(int32_t token, int pos);

  const ModelConfig& config() const { return config_; }
  int n_ctx() const { return n_ctx_; }

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo;  // wq: (n_embd_q rows, n_embd), ...
    std::vector<float> ffn_norm, ffn_gate, ffn_up, ffn_down;
    // Empty unless the config asks for them (model.h's LayerTensors).
    std::vector<float> bq, bk, bv, q_norm, k_norm, post_attn_norm, post_ffn_norm;
  };
  void attention(int il, int pos);
  void feed_forward(int il);

  ModelConfig config_;
  int n_ctx_;
  std::vector<float> token_embd_;  // (n_vocab, n_embd)
  std::vector<float> output_norm_;
  std::vector<float> output_;      // (n_vocab, n_embd); empty when tied to token_embd_
  std::vector<float> rope_freqs_;  // (n_rot / 2) or empty
  std::vector<Layer> layers_;

  // Activations for the current token.
  std::vector<float> x_;                  // residual stream (n_embd)
  std::vector<float> xb_;                 // normed input / attention output (n_embd)
  std::vector<float> xb2_;                // projection output (n_embd)
  std::vector<float> q_;                  // (n_embd_q)
  std::vector<float> att_;                // attention output (n_embd_q)
  std::vector<float> k_, v_;              // (n_embd_kv)
  std::vector<float> scores_;             // (n_ctx)
  std::vector<float> hb_, hb2_;           // FFN hidden (n_ff)
  std::vector<float> logits_;             // (n_vocab)
  std::vector<float> k_cache_, v_cache_;  // (n_layer, n_ctx, n_embd_kv)
};

}  // namespace clchat
