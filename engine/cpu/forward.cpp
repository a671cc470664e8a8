#include "engine/cpu/forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/ops.h"
#include "engine/gguf/quant.h"

namespace clchat {

namespace {

// (A copy first: GgufFile::tensor_bytes turns a file that shrank under us
// into a GgufError instead of SIGBUS.)
std::vector<float> dequantize(const GgufFile& file, const GgufTensor* t) {
  if (!t) return {};  // an optional tensor the model does not have
  return dequantize_matrix(t->type, file.tensor_bytes(*t), t->dims[0], t->n_rows());
}

}  // namespace

CpuForward::CpuForward(const Model& model, int n_ctx)
    : config_(model.config), n_ctx_(n_ctx > 0 ? n_ctx : model.config.n_ctx_train) {
  const ModelConfig& c = config_;
  const ModelTensors& t = model.tensors;
  const GgufFile& f = *model.file;
  token_embd_ = dequantize(f, t.token_embd);
  output_norm_ = dequantize(f, t.output_norm);
  if (!c.tied_embeddings) output_ = dequantize(f, t.output);
  rope_freqs_ = dequantize(f, t.rope_freqs);
  for (const LayerTensors& l : t.layers) {
    layers_.push_back({dequantize(f, l.attn_norm), dequantize(f, l.wq), dequantize(f, l.wk),
                       dequantize(f, l.wv), dequantize(f, l.wo), dequantize(f, l.ffn_norm),
                       dequantize(f, l.ffn_gate), dequantize(f, l.ffn_up),
                       dequantize(f, l.ffn_down), dequantize(f, l.bq), dequantize(f, l.bk),
                       dequantize(f, l.bv), dequantize(f, l.q_norm), dequantize(f, l.k_norm),
                       dequantize(f, l.post_attn_norm), dequantize(f, l.post_ffn_norm)});
  }
  x_.resize(c.n_embd);
  xb_.resize(c.n_embd);
  xb2_.resize(c.n_embd);
  q_.resize(c.n_embd_q());
  att_.resize(c.n_embd_q());
  k_.resize(c.n_embd_kv());
  v_.resize(c.n_embd_kv());
  scores_.resize(n_ctx_);
  hb_.resize(c.n_ff);
  hb2_.resize(c.n_ff);
  logits_.resize(c.n_vocab);
  const size_t cache = size_t(c.n_layer) * size_t(n_ctx_) * size_t(c.n_embd_kv());
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

// q, k, v for this position (+ biases); per-head RMSNorm of q and k; RoPE;
// store k, v in the cache; softmax(q k^T / sqrt(head_dim)) v per head over
// the positions the layer sees (all, or the last sliding_window), with
// n_head / n_head_kv query heads sharing one KV head; then the output
// projection into xb2_ (and its RMSNorm when the model has post-norms).
void CpuForward::attention(int il, int pos) {
  const ModelConfig& c = config_;
  const Layer& w = layers_[il];
  const int kv_dim = c.n_embd_kv(), q_dim = c.n_embd_q();
  cpu::matvec(q_.data(), xb_.data(), w.wq.data(), c.n_embd, q_dim);
  cpu::matvec(k_.data(), xb_.data(), w.wk.data(), c.n_embd, kv_dim);
  cpu::matvec(v_.data(), xb_.data(), w.wv.data(), c.n_embd, kv_dim);
  if (c.qkv_bias) {
    for (int i = 0; i < q_dim; ++i) q_[i] += w.bq[i];
    for (int i = 0; i < kv_dim; ++i) k_[i] += w.bk[i], v_[i] += w.bv[i];
  }
  if (c.qk_norm) {
    for (int h = 0; h < c.n_head; ++h) {
      float* qh = q_.data() + h * c.head_dim;
      cpu::rmsnorm(qh, qh, w.q_norm.data(), c.head_dim, c.rms_eps);
    }
    for (int h = 0; h < c.n_head_kv; ++h) {
      float* kh = k_.data() + h * c.head_dim;
      cpu::rmsnorm(kh, kh, w.k_norm.data(), c.head_dim, c.rms_eps);
    }
  }
  const cpu::RopeParams rope{c.rope_style, c.n_rot, c.rope_base(il), c.rope_scale(il),
                             rope_freqs_.empty() ? nullptr : rope_freqs_.data()};
  cpu::rope(q_.data(), c.n_head, c.head_dim, pos, rope);
  cpu::rope(k_.data(), c.n_head_kv, c.head_dim, pos, rope);

  const size_t layer_off = size_t(il) * n_ctx_ * kv_dim;
  float* k_cache = k_cache_.data() + layer_off;
  float* v_cache = v_cache_.data() + layer_off;
  std::copy(k_.begin(), k_.end(), k_cache + size_t(pos) * kv_dim);
  std::copy(v_.begin(), v_.end(), v_cache + size_t(pos) * kv_dim);

  const int first = c.is_swa(il) ? std::max(0, pos - c.sliding_window + 1) : 0;
  const int group = c.n_head / c.n_head_kv;
  const double scale =
      c.attn_scale > 0.0f ? double(c.attn_scale) : 1.0 / std::sqrt(double(c.head_dim));
  for (int h = 0; h < c.n_head; ++h) {
    const float* q = q_.data() + h * c.head_dim;
    const int kvh = h / group;
    for (int t = first; t <= pos; ++t) {
      const float* k = k_cache + size_t(t) * kv_dim + kvh * c.head_dim;
      double dot = 0.0;
      for (int i = 0; i < c.head_dim; ++i) dot += double(q[i]) * double(k[i]);
      scores_[t - first] = float(dot * scale);
    }
    cpu::softmax(scores_.data(), pos - first + 1);
    float* out = att_.data() + h * c.head_dim;
    for (int i = 0; i < c.head_dim; ++i) {
      double sum = 0.0;
      for (int t = first; t <= pos; ++t) {
        sum +=
            double(scores_[t - first]) * double(v_cache[size_t(t) * kv_dim + kvh * c.head_dim + i]);
      }
      out[i] = float(sum);
    }
  }
  cpu::matvec(xb2_.data(), att_.data(), w.wo.data(), q_dim, c.n_embd);
  if (c.post_norms) {
    cpu::rmsnorm(xb2_.data(), xb2_.data(), w.post_attn_norm.data(), c.n_embd, c.rms_eps);
  }
}

// self.w2(act(self.w1(x)) * self.w3(x)) with act SiLU or GELU (tanh form),
// result in xb2_ (RMSNorm'ed when the model has post-norms).
void CpuForward::feed_forward(int il) {
  const ModelConfig& c = config_;
  const Layer& w = layers_[il];
  cpu::matvec(hb_.data(), xb_.data(), w.ffn_gate.data(), c.n_embd, c.n_ff);
  cpu::matvec(hb2_.data(), xb_.data(), w.ffn_up.data(), c.n_embd, c.n_ff);
  for (int i = 0; i < c.n_ff; ++i) {
    const float g = c.ffn_act == FfnActivation::Silu ? cpu::silu(hb_[i]) : cpu::gelu_tanh(hb_[i]);
    hb_[i] = g * hb2_[i];
  }
  cpu::matvec(xb2_.data(), hb_.data(), w.ffn_down.data(), c.n_ff, c.n_embd);
  if (c.post_norms) {
    cpu::rmsnorm(xb2_.data(), xb2_.data(), w.post_ffn_norm.data(), c.n_embd, c.rms_eps);
  }
}

const std::vector<float>& CpuForward::forward(int32_t token, int pos) {
  const ModelConfig& c = config_;
  if (token < 0 || token >= c.n_vocab) {
    throw std::out_of_range("token id " + std::to_string(token) + " is outside the vocabulary");
  }
  if (pos < 0 || pos >= n_ctx_) {
    throw std::out_of_range("position " + std::to_string(pos) + " is outside the context (" +
                            std::to_string(n_ctx_) + ")");
  }
  // embedding lookup (scaled: Gemma)
  std::copy_n(token_embd_.begin() + size_t(token) * c.n_embd, c.n_embd, x_.begin());
  if (c.embed_scale != 1.0f) {
    for (float& v : x_) v = float(double(v) * double(c.embed_scale));
  }
  for (int il = 0; il < c.n_layer; ++il) {
    // attention block with residual
    cpu::rmsnorm(xb_.data(), x_.data(), layers_[il].attn_norm.data(), c.n_embd, c.rms_eps);
    attention(il, pos);
    for (int i = 0; i < c.n_embd; ++i) x_[i] += xb2_[i];
    // feed-forward block with residual
    cpu::rmsnorm(xb_.data(), x_.data(), layers_[il].ffn_norm.data(), c.n_embd, c.rms_eps);
    feed_forward(il);
    for (int i = 0; i < c.n_embd; ++i) x_[i] += xb2_[i];
  }
  // final norm and lm_head (the token embedding when tied)
  cpu::rmsnorm(xb_.data(), x_.data(), output_norm_.data(), c.n_embd, c.rms_eps);
  const std::vector<float>& head = c.tied_embeddings ? token_embd_ : output_;
  cpu::matvec(logits_.data(), xb_.data(), head.data(), c.n_embd, c.n_vocab);
  return logits_;
}

}  // namespace clchat
