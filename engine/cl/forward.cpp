// ClForward: weights upload, the decode plan, and the step itself.
#include "engine/cl/forward.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace clchat {

namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// n zeroed uint counters the kernels count into (read-write: upload() makes
// read-only buffers, which kernels must not write).
ClMem zeroed_counters(const ClRuntime& rt, size_t n) {
  ClMem m = rt.alloc(n * sizeof(cl_uint));
  const std::vector<cl_uint> zeros(n, 0);
  cl_check(clEnqueueWriteBuffer(rt.queue(), m.get(), CL_TRUE, 0, n * sizeof(cl_uint), zeros.data(),
                                0, nullptr, nullptr),
           "clEnqueueWriteBuffer(counters)");
  return m;
}

DeviceMatrix upload_tensor(const ClRuntime& rt, const GgufTensor* t) {
  return upload_matrix(rt, repack_tensor(*t));
}

// The options' tuning (else the device's), checked, with the attention
// work-group widened to cover a head.
Tuning tuning_for(const ModelConfig& c, const DeviceInfo& device,
                  const std::optional<Tuning>& given) {
  if (c.head_dim % 4 != 0) {
    throw std::runtime_error("head size " + std::to_string(c.head_dim) +
                             " is not a multiple of 4 (unsupported by the attention kernel)");
  }
  Tuning t = given ? *given : Tuning::for_device(device);
  t.check(device);
  int& att_wg = t.decode.plan.att_wg;
  while (att_wg < c.head_dim) att_wg *= 2;
  if (size_t(att_wg) > device.max_work_group_size) {
    throw std::runtime_error("head size " + std::to_string(c.head_dim) +
                             " exceeds the work-group "
                             "limit of " +
                             device.name);
  }
  return t;
}

}  // namespace

ClForward::ClForward(const Model& model, ClRuntime& rt, const ClForwardOptions& options)
    : config_(model.config),
      rt_(rt),
      tuning_(tuning_for(model.config, rt.device(), options.tuning)),
      programs_(rt, tuning_.decode.plan),
      n_ctx_(options.n_ctx > 0 ? options.n_ctx : model.config.n_ctx_train),
      profiling_(rt.profiling()) {
  const ModelConfig& c = config_;
  // The KV cache must fit one allocation and half the device memory.
  const uint64_t per_pos = uint64_t(c.n_layer) * uint64_t(c.n_embd_kv()) * 4;
  const uint64_t max_pos = std::min(rt.device().max_alloc_bytes, rt.device().global_mem_bytes / 4) /
                           std::max<uint64_t>(per_pos, 1);
  if (uint64_t(n_ctx_) > max_pos) {
    spdlog::warn("context {} does not fit {} memory; reduced to {}", n_ctx_, rt.device().name,
                 max_pos);
    n_ctx_ = int(max_pos);
  }
  if (n_ctx_ < 1) throw std::runtime_error("the KV cache does not fit " + rt.device().name);
  upload_weights(model);
  build_plan();
  if (options.prefill_chunk > 1) make_prefill(std::min(options.prefill_chunk, n_ctx_));
  start_persistent_decode();
}

// Takes the one-launch decode path only if its first token agrees with the
// multi-kernel plan (same logits within 1e-3 relative, same argmax).
void ClForward::start_persistent_decode() {
  persistent_ = PersistentDecode::create(*this);
  if (!persistent_) return;
  const int32_t token = 0;
  const bool profiling = profiling_;
  profiling_ = false;
  std::unique_ptr<PersistentDecode> fast = std::move(persistent_);  // plan path first
  const std::span<const float> plan_logits = decode_logits(token, 0);
  const std::vector<float> want(plan_logits.begin(), plan_logits.end());
  persistent_ = std::move(fast);
  const std::span<const float> got = decode_logits(token, 0);
  profiling_ = profiling;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  if (!persistent_ || persistent_->n_timeouts() > 0) {
    spdlog::warn("persistent decode kernel timed out on its first token; not used");
    persistent_.reset();
    return;
  }
  if (!(rel <= 1e-3) || device_token_ < 0) {
    spdlog::warn(
        "persistent decode kernel disagrees with the multi-kernel plan (relative error "
        "{:.3g}); not used",
        rel);
    persistent_.reset();
    return;
  }
  spdlog::info("persistent decode kernel verified (relative error {:.3g})", rel);
}

ClForward::~ClForward() = default;

std::string ClForward::name() const { return "opencl (" + rt_.device().name + ")"; }

void ClForward::upload_weights(const Model& model) {
  const ModelConfig& c = config_;
  const ModelTensors& t = model.tensors;
  token_embd_ = upload_tensor(rt_, t.token_embd);
  weight_bytes_ += token_embd_.n_bytes;
  if (!c.tied_embeddings) {
    output_ = upload_tensor(rt_, t.output);
    weight_bytes_ += output_.n_bytes;
  }
  output_norm_ = upload_tensor(rt_, t.output_norm);
  for (const LayerTensors& l : t.layers) {
    LayerWeights w;
    w.attn_norm = upload_tensor(rt_, l.attn_norm);
    w.ffn_norm = upload_tensor(rt_, l.ffn_norm);
    if (l.wq->type == l.wk->type && l.wq->type == l.wv->type) {
      w.qkv.push_back(upload_matrix(
          rt_, stack_rows({repack_tensor(*l.wq), repack_tensor(*l.wk), repack_tensor(*l.wv)})));
    } else {
      for (const GgufTensor* m : {l.wq, l.wk, l.wv}) w.qkv.push_back(upload_tensor(rt_, m));
    }
    w.wo = upload_tensor(rt_, l.wo);
    w.ffn_gate = upload_tensor(rt_, l.ffn_gate);
    w.ffn_up = upload_tensor(rt_, l.ffn_up);
    w.ffn_down = upload_tensor(rt_, l.ffn_down);
    for (const auto* m : {&w.wo, &w.ffn_gate, &w.ffn_up, &w.ffn_down}) weight_bytes_ += m->n_bytes;
    for (const auto& m : w.qkv) weight_bytes_ += m.n_bytes;
    layers_.push_back(std::move(w));
  }

  // RoPE table in float64: (cos, sin) of pos * base^(-2i / n_rot).
  std::vector<float> cs(size_t(n_ctx_) * size_t(c.n_rot));
  for (int pos = 0; pos < n_ctx_; ++pos) {
    for (int i = 0; i < c.n_rot / 2; ++i) {
      const double theta = pos * std::pow(double(c.rope_freq_base), -2.0 * i / c.n_rot);
      cs[(size_t(pos) * (c.n_rot / 2) + i) * 2] = float(std::cos(theta));
      cs[(size_t(pos) * (c.n_rot / 2) + i) * 2 + 1] = float(std::sin(theta));
    }
  }
  rope_cs_ = rt_.upload(cs.data(), cs.size() * 4);
}

ClForward::Launch ClForward::matvec_launch(const DeviceMatrix& w, const ClMem& x,
                                           const ClMem* norm_w, bool accumulate, const ClMem& out,
                                           const char* label, int layer) {
  const KernelTuning& tune = programs_.tuning();
  Launch l{programs_.weight_kernel(w.type, "matvec"), 0, size_t(tune.matvec_wg()), label, layer};
  static const ClMem k_none;
  set_args(l.kernel, w.q, w.s, cl_int(w.n_in), cl_int(w.rows), x, norm_w ? *norm_w : k_none,
           config_.rms_eps, cl_int(accumulate ? 1 : 0), out);
  l.global = round_up(size_t(w.rows), size_t(tune.rows)) / size_t(tune.rows) * l.local;
  return l;
}

void ClForward::build_plan() {
  const ModelConfig& c = config_;
  const KernelTuning& tune = programs_.tuning();
  const size_t mv_wg = size_t(tune.matvec_wg());
  auto groups = [&](int rows) { return round_up(size_t(rows), size_t(tune.rows)) / tune.rows; };

  x_ = rt_.alloc(size_t(c.n_embd) * 4);
  q_ = rt_.alloc(size_t(c.n_embd) * 4);
  att_out_ = rt_.alloc(size_t(c.n_embd) * 4);
  h_ = rt_.alloc(size_t(c.n_ff) * 4);
  logits_ = rt_.alloc(size_t(c.n_vocab) * 4);
  scores_ = rt_.alloc(size_t(c.n_head) * size_t(n_ctx_) * 4);
  const size_t cache_bytes = size_t(c.n_layer) * size_t(n_ctx_) * size_t(c.n_embd_kv()) * 4;
  k_cache_ = rt_.alloc(cache_bytes);
  v_cache_ = rt_.alloc(cache_bytes);
  ids_ = rt_.alloc(size_t(n_ctx_) * 4);
  argmax_groups_ =
      int(std::clamp<size_t>(size_t(c.n_vocab) / (size_t(tune.argmax_wg) * 4), 1, 256));
  argmax_val_ = rt_.alloc(size_t(argmax_groups_) * 4);
  argmax_idx_ = rt_.alloc(size_t(argmax_groups_) * 4);

  // embedding lookup: x = token_embd[ids[token_index]]
  embed_ = {programs_.weight_kernel(token_embd_.type, "get_row"), size_t(c.n_embd), 0, "embed", -1};
  set_args(embed_.kernel, token_embd_.q, token_embd_.s, cl_int(c.n_embd), ids_, cl_int(0), x_);

  plan_.clear();
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& w = layers_[il];
    LayerPlan p;
    // norm + q/k/v projections + RoPE + KV append
    int row_base = 0;
    for (const DeviceMatrix& m : w.qkv) {
      Launch l{programs_.weight_kernel(m.type, "qkv_rope"), groups(m.rows) * mv_wg, mv_wg,
               "qkv_rope", il};
      set_args(l.kernel, m.q, m.s, cl_int(m.n_in), cl_int(m.rows), cl_int(row_base), x_,
               w.attn_norm.q, c.rms_eps, cl_int(c.n_embd), cl_int(c.n_embd_kv()),
               cl_int(c.head_dim), cl_int(c.n_rot), rope_cs_, cl_int(0), q_, k_cache_, v_cache_,
               cl_ulong(0));
      p.qkv_row_base.push_back(row_base);
      row_base += m.rows;
      p.qkv.push_back(std::move(l));
    }
    if (programs_.fused_qkv_attention() && w.qkv.size() == 1) {  // CPU: attention folded in
      fuse_qkv_attention(w.qkv[0], w.attn_norm.q, p.qkv[0]);
    } else {  // attention over the cache
      p.attention = {programs_.attention_kernel(), size_t(c.n_head) * size_t(tune.att_wg),
                     size_t(tune.att_wg), "attention", il};
      set_args(p.attention.kernel, q_, k_cache_, v_cache_,
               cl_ulong(size_t(il) * size_t(n_ctx_) * size_t(c.n_embd_kv())), cl_int(1),
               cl_int(c.n_head), cl_int(c.n_head_kv), cl_int(c.head_dim), scores_, cl_int(n_ctx_),
               att_out_);
    }
    // output projection + residual
    p.wo = matvec_launch(w.wo, att_out_, nullptr, true, x_, "wo", il);
    // norm + gate/up + SiLU
    p.gate_up = {programs_.weight_kernel(w.ffn_gate.type, "ffn_gate_up"), groups(c.n_ff) * mv_wg,
                 mv_wg, "ffn_gate_up", il};
    if (w.ffn_gate.type != w.ffn_up.type) {
      throw std::runtime_error("ffn_gate and ffn_up of layer " + std::to_string(il) +
                               " have different types; not supported yet");
    }
    set_args(p.gate_up.kernel, w.ffn_gate.q, w.ffn_gate.s, w.ffn_up.q, w.ffn_up.s, cl_int(c.n_embd),
             cl_int(c.n_ff), x_, w.ffn_norm.q, c.rms_eps, h_);
    // down projection + residual
    p.down = matvec_launch(w.ffn_down, h_, nullptr, true, x_, "ffn_down", il);
    plan_.push_back(std::move(p));
  }
  // final norm + lm_head (the token embedding when tied)
  const DeviceMatrix& head = c.tied_embeddings ? token_embd_ : output_;
  lm_head_ = matvec_launch(head, x_, &output_norm_.q, false, logits_, "lm_head", -1);
  if (programs_.fused_head_argmax()) {  // CPU devices: lm_head and argmax in one launch
    const size_t n_groups = lm_head_.global / lm_head_.local;
    lm_head_.kernel = programs_.head_argmax_kernel(head.type);
    lm_head_.label = "lm_head+argmax";
    head_part_val_ = rt_.alloc(n_groups * 4);
    head_part_idx_ = rt_.alloc(n_groups * 4);
    head_n_done_ = zeroed_counters(rt_, 1);
    set_args(lm_head_.kernel, head.q, head.s, cl_int(head.n_in), cl_int(head.rows), x_,
             output_norm_.q, c.rms_eps, logits_, head_part_val_, head_part_idx_, head_n_done_,
             ids_);
    return;
  }
  // argmax in two stages, result into ids[0]
  const int chunk = (c.n_vocab + argmax_groups_ - 1) / argmax_groups_;
  argmax_partial_ = {programs_.argmax_kernel("argmax_partial"),
                     size_t(argmax_groups_) * size_t(tune.argmax_wg), size_t(tune.argmax_wg),
                     "argmax", -1};
  set_args(argmax_partial_.kernel, logits_, cl_int(c.n_vocab), cl_int(chunk), argmax_val_,
           argmax_idx_);
  argmax_final_ = {programs_.argmax_kernel("argmax_final"), size_t(tune.argmax_wg),
                   size_t(tune.argmax_wg), "argmax", -1};
  set_args(argmax_final_.kernel, argmax_val_, argmax_idx_, cl_int(argmax_groups_), ids_);
}

// Replaces launch l (qkv_rope over the stacked q;k;v rows m) by
// qkv_rope_attention, which also writes att_out_; the per-token arguments
// (pos, cache_off) keep their indices 13 and 17.
void ClForward::fuse_qkv_attention(const DeviceMatrix& m, const ClMem& norm_w, Launch& l) {
  const ModelConfig& c = config_;
  if (!head_done_) {  // one set of counters: each head's last group resets its own
    head_done_ = zeroed_counters(rt_, size_t(c.n_head));
  }
  l.kernel = programs_.qkv_attention_kernel(m.type);
  l.label = "qkv_rope+attention";
  set_args(l.kernel, m.q, m.s, cl_int(m.n_in), cl_int(m.rows), cl_int(0), x_, norm_w, c.rms_eps,
           cl_int(c.n_embd), cl_int(c.n_embd_kv()), cl_int(c.head_dim), cl_int(c.n_rot), rope_cs_,
           cl_int(0), q_, k_cache_, v_cache_, cl_ulong(0), cl_int(c.n_head), cl_int(c.n_head_kv),
           scores_, cl_int(n_ctx_), att_out_, head_done_);
}

int ClForward::launches_per_token() const {
  if (persistent_ && !debug_) return 1;               // profiling traces the same launch
  size_t n = argmax_partial_.kernel ? 1 + 3 : 1 + 1;  // embed, lm_head, argmax x2 unless fused
  for (const auto& p : plan_) n += p.qkv.size() + (p.attention.kernel ? 4 : 3);
  return int(n);
}

void ClForward::enqueue(const Launch& l) {
  const size_t* local = l.local ? &l.local : nullptr;
  cl_event ev = nullptr;
  const cl_int err = clEnqueueNDRangeKernel(rt_.queue(), l.kernel.get(), 1, nullptr, &l.global,
                                            local, 0, nullptr, profiling_ ? &ev : nullptr);
  if (err != CL_SUCCESS) {
    throw ClError(std::string("enqueueing kernel ") + l.label + " (layer " +
                      std::to_string(l.layer) + ") failed: " + cl_error_name(err),
                  err);
  }
  if (ev) {
    events_.emplace_back(ev);
    event_owner_.emplace_back(&l, 0);
  }
}

// The whole decode step for one position, in model order.
void ClForward::enqueue_token(int token_index, int pos, bool with_head) {
  const ModelConfig& c = config_;
  const size_t n_embd_bytes = size_t(c.n_embd) * 4;
  set_arg(embed_.kernel.get(), 4, cl_int(token_index));
  enqueue(embed_);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerPlan& p = plan_[il];
    const cl_ulong cache_off = (cl_ulong(il) * cl_ulong(n_ctx_) + cl_ulong(pos)) * c.n_embd_kv();
    for (Launch& l : p.qkv) {  // rmsnorm -> q, k, v -> rope -> KV append
      set_arg(l.kernel.get(), 13, cl_int(pos));
      set_arg(l.kernel.get(), 17, cache_off);
      enqueue(l);
    }
    if (p.attention.kernel) {                                 // else folded into qkv (CPU devices)
      set_arg(p.attention.kernel.get(), 4, cl_int(pos + 1));  // attention over 0..pos
      enqueue(p.attention);
    }
    enqueue(p.wo);  // x += Wo att
    if (debug_) {
      cl_check(
          clEnqueueCopyBuffer(rt_.queue(), x_.get(), debug_hidden_.get(), 0,
                              size_t(2 * il) * n_embd_bytes, n_embd_bytes, 0, nullptr, nullptr),
          "clEnqueueCopyBuffer");
    }
    enqueue(p.gate_up);  // h = silu(Wg xn) * (Wu xn)
    enqueue(p.down);     // x += Wd h
    if (debug_) {
      cl_check(
          clEnqueueCopyBuffer(rt_.queue(), x_.get(), debug_hidden_.get(), 0,
                              size_t(2 * il + 1) * n_embd_bytes, n_embd_bytes, 0, nullptr, nullptr),
          "clEnqueueCopyBuffer");
    }
  }
  if (with_head) enqueue_head();
}

// logits = head(rmsnorm(x)); ids[0] = argmax(logits)
void ClForward::enqueue_head() {
  enqueue(lm_head_);
  if (!argmax_partial_.kernel) return;  // folded into lm_head_ (CPU devices)
  enqueue(argmax_partial_);
  enqueue(argmax_final_);
}

void ClForward::check_position(int pos, size_t n_tokens) const {
  if (pos < 0 || n_tokens == 0 || uint64_t(pos) + n_tokens > uint64_t(n_ctx_)) {
    throw std::out_of_range("positions " + std::to_string(pos) + ".." +
                            std::to_string(pos + int64_t(n_tokens) - 1) +
                            " do not fit the context of " + std::to_string(n_ctx_));
  }
}

void ClForward::write_ids(std::span<const int32_t> ids) {
  settle();
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.n_vocab) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  // Blocking: the host array may go away right after.
  cl_check(clEnqueueWriteBuffer(rt_.queue(), ids_.get(), CL_TRUE, 0, ids.size_bytes(), ids.data(),
                                0, nullptr, nullptr),
           "clEnqueueWriteBuffer(ids)");
  device_token_ = ids.size() == 1 ? ids[0] : -1;
}

void ClForward::feed_token(int32_t token) {
  // device_token_ is -1 when unknown: token -1 must still reach the range check.
  if (token < 0 || token != device_token_) write_ids({&token, 1});
}

int32_t ClForward::read_token() {
  int32_t id = -1;
  cl_check(clEnqueueReadBuffer(rt_.queue(), ids_.get(), CL_TRUE, 0, 4, &id, 0, nullptr, nullptr),
           "clEnqueueReadBuffer(token)");
  device_token_ = id;
  return id;
}

int32_t ClForward::prefill(std::span<const int32_t> tokens, int pos) {
  check_position(pos, tokens.size());
  write_ids(tokens);
  if (prefill_ && tokens.size() > 1 && !debug_) {  // batched (ClPrefill): the last position
    prefill_->run(int(tokens.size()), pos, x_);    // leaves its hidden state in x_
    enqueue_head();
    const int32_t id = read_token();
    if (profiling_) collect_profile();
    return id;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    enqueue_token(int(i), pos + int(i), last);
  }
  const int32_t id = read_token();
  if (debug_) collect_debug(pos + int(tokens.size()) - 1);
  if (profiling_) collect_profile();
  return id;
}

int32_t ClForward::decode_argmax(int32_t token, int pos) { return decode_step(token, pos, true); }

std::span<const float> ClForward::decode_logits(int32_t token, int pos) {
  decode_step(token, pos, false);  // no lookahead: it would overwrite logits_
  logits_host_.resize(size_t(config_.n_vocab));
  cl_check(clEnqueueReadBuffer(rt_.queue(), logits_.get(), CL_TRUE, 0, logits_host_.size() * 4,
                               logits_host_.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer(logits)");
  return logits_host_;
}

void ClForward::settle() {
  if (persistent_ && persistent_->n_ahead() > 0) {
    persistent_->drop_ahead();
    device_token_ = -1;  // the last of them wrote ids_[0]
  }
}

int32_t ClForward::decode_step(int32_t token, int pos, bool lookahead) {
  check_position(pos, 1);
  if (persistent_ && !debug_) {
    const int32_t id = profiling_
                           ? persistent_traced_step(token, pos)
                           : persistent_step(token, pos, lookahead && tuning_.decode.lookahead);
    if (id >= 0) return id;
    settle();
    device_token_ = -1;
    if (persistent_->rearm()) {
      spdlog::warn(
          "persistent decode kernel timed out at a grid barrier; this token runs on the "
          "multi-kernel plan");
    } else {
      spdlog::warn(
          "persistent decode kernel timed out at a grid barrier {} times; using the "
          "multi-kernel plan",
          PersistentDecode::k_max_timeouts);
      persistent_.reset();
    }
  }
  feed_token(token);
  enqueue_token(0, pos, true);
  const int32_t id = read_token();
  if (debug_) collect_debug(pos);
  if (profiling_) collect_profile();
  return id;
}

int32_t ClForward::persistent_step(int32_t token, int pos, bool lookahead) {
  // A greedy continuation finds its step already computed or running: the
  // step before enqueued it with the id it chose as input.
  const bool queued = lookahead && token == lookahead_token_ && persistent_->ahead_at(pos);
  if (!queued) {
    settle();
    feed_token(token);
    persistent_->enqueue_ahead(pos);
  }
  const int32_t id = persistent_->take(pos);
  if (id < 0) return id;
  lookahead_token_ = id;
  device_token_ = -1;  // unknown while steps are queued (and if queueing one throws)
  if (lookahead) {
    for (int next = pos + 1 + int(persistent_->n_ahead());
         persistent_->n_ahead() < k_lookahead && next < n_ctx_; ++next) {
      persistent_->enqueue_ahead(next);
    }
  }
  if (persistent_->n_ahead() == 0) device_token_ = id;
  return id;
}

// Profiling on the persistent path: the kernel's own per-stage clock, not the
// multi-kernel plan's events (the bars show what really runs).
int32_t ClForward::persistent_traced_step(int32_t token, int pos) {
  settle();
  feed_token(token);
  persistent_->enqueue(0, pos, true);
  const int32_t id = read_token();
  if (id >= 0) profile_ = persistent_->profile();
  return id;
}

void ClForward::set_debug(bool on) {
  if (on && !debug_hidden_) {
    debug_hidden_ = rt_.alloc(size_t(2 * config_.n_layer) * size_t(config_.n_embd) * 4, true);
  }
  debug_ = on;
}

void ClForward::collect_debug(int pos) {
  const ModelConfig& c = config_;
  std::vector<float> hidden(size_t(2 * c.n_layer) * size_t(c.n_embd));
  cl_check(clEnqueueReadBuffer(rt_.queue(), debug_hidden_.get(), CL_TRUE, 0, hidden.size() * 4,
                               hidden.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer(debug)");
  std::vector<float> logits(size_t(c.n_vocab));
  cl_check(clEnqueueReadBuffer(rt_.queue(), logits_.get(), CL_TRUE, 0, logits.size() * 4,
                               logits.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer(logits)");
  DebugReport r;
  r.pos = pos;
  for (int il = 0; il < c.n_layer; ++il) {
    const std::span<const float> all(hidden);
    r.after_attention.push_back(
        compute_hidden_stats(all.subspan(size_t(2 * il) * c.n_embd, c.n_embd)));
    r.after_ffn.push_back(
        compute_hidden_stats(all.subspan(size_t(2 * il + 1) * c.n_embd, c.n_embd)));
  }
  r.top = top_probabilities(logits, 5);
  debug_report_ = std::move(r);
}

void ClForward::collect_profile() {
  ProfileReport p;
  p.layer_us.assign(size_t(config_.n_layer), 0.0);
  for (size_t i = 0; i < events_.size(); ++i) {
    cl_ulong start = 0, end = 0;
    const cl_event e = events_[i].get();
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
    const double us = double(end - start) / 1000.0;
    const Launch* l = event_owner_[i].first;
    p.kernel_us[l->label] += us;
    if (l->layer >= 0) p.layer_us[size_t(l->layer)] += us;
    p.total_us += us;
    ++p.n_launches;
  }
  events_.clear();
  event_owner_.clear();
  profile_ = std::move(p);
}

// ---- batched prefill (ClPrefill, engine/cl/prefill.*) ----------------------

void ClForward::make_prefill(int chunk) {
  PrefillModel m;
  m.token_embd = &token_embd_;
  m.output_norm = &output_norm_;
  m.head = config_.tied_embeddings ? &token_embd_ : &output_;
  for (const LayerWeights& w : layers_) {
    PrefillModel::Layer l{&w.attn_norm, &w.ffn_norm, {},         &w.wo,
                          &w.ffn_gate,  &w.ffn_up,   &w.ffn_down};
    for (const DeviceMatrix& q : w.qkv) l.qkv.push_back(&q);
    m.layers.push_back(std::move(l));
  }
  m.k_cache = &k_cache_;
  m.v_cache = &v_cache_;
  m.rope_cs = &rope_cs_;
  m.ids = &ids_;
  m.n_ctx = n_ctx_;
  prefill_ = std::make_unique<ClPrefill>(config_, rt_, m, chunk, programs_.tuning().build_options,
                                         tuning_.prefill);
}

void ClForward::prefill_logits(std::span<const int32_t> tokens, int pos, int first_out,
                               std::vector<float>& out) {
  check_position(pos, tokens.size());
  if (!prefill_) {
    Backend::prefill_logits(tokens, pos, first_out, out);
    return;
  }
  write_ids(tokens);
  prefill_->run_logits(int(tokens.size()), pos, first_out, out);
}

}  // namespace clchat
