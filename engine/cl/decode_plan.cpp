// DecodePlan: building the launches (each kernel's arguments named once,
// below) and enqueueing a step.
#include "engine/cl/decode_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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

// The arguments of qkv_rope: q, k, v rows [row_base, row_base + m.rows) of
// rmsnorm(x) * norm_w, roped; q into s.q, k and v appended to the cache at
// cache_off (pos and cache_off set per token). qkv_rope_attention takes the
// same and more.
std::vector<KernelArg> qkv_rope_args(const ModelConfig& c, const DeviceMatrix& m, int row_base,
                                     const ClMem& norm_w, const ClMem& rope_cs,
                                     const DecodeState& s) {
  return {{"wq", m.q},
          {"ws", m.s},
          {"n_in", cl_int(m.n_in)},
          {"n_rows", cl_int(m.rows)},
          {"row_base", cl_int(row_base)},
          {"x", s.x},
          {"norm_w", norm_w},
          {"eps", c.rms_eps},
          {"n_embd", cl_int(c.n_embd)},
          {"n_embd_kv", cl_int(c.n_embd_kv())},
          {"head_dim", cl_int(c.head_dim)},
          {"n_rot", cl_int(c.n_rot)},
          {"rope_cs", rope_cs},
          {"pos", cl_int(0)},
          {"q", s.q},
          {"k_cache", s.k_cache},
          {"v_cache", s.v_cache},
          {"cache_off", cl_ulong(0)}};
}

}  // namespace

KernelArgs matvec_args(const DeviceMatrix& m, const ClMem& x, const ClMem* norm_w, float eps,
                       bool accumulate, const ClMem& out) {
  static const ClMem k_none;
  return {{"wq", m.q},
          {"ws", m.s},
          {"n_in", cl_int(m.n_in)},
          {"n_rows", cl_int(m.rows)},
          {"x", x},
          {"norm_w", norm_w ? *norm_w : k_none},
          {"eps", eps},
          {"accumulate", cl_int(accumulate ? 1 : 0)},
          {"out", out}};
}

KernelArgs attention_decode_args(const ModelConfig& c, const DecodeState& s, const ClMem& q,
                                 const KvLayer& layer, const ClMem& out) {
  return {{"q", q},
          {"k_cache", s.k_cache},
          {"v_cache", s.v_cache},
          {"layer_off", layer.offset},
          {"n_pos", cl_int(1)},
          {"wrap_at", cl_int(layer.rows)},  // a window from row 0: it never wraps
          {"ring", cl_int(layer.rows)},
          {"n_head", cl_int(c.n_head)},
          {"n_head_kv", cl_int(c.n_head_kv)},
          {"head_dim", cl_int(c.head_dim)},
          {"scores", s.scores},
          {"scores_stride", cl_int(s.n_ctx)},
          {"out", out}};
}

DecodePlan::DecodePlan(const ModelConfig& c, const ClRuntime& rt, ClPrograms& programs,
                       const DeviceWeights& w, DecodeState& s)
    : config_(c), rt_(rt), programs_(programs), w_(w), s_(s) {
  // embedding lookup: x = token_embd[ids[token_index]]
  const DeviceMatrix& e = w.token_embd;
  embed_ = {programs_.weight_kernel(e.type, "get_row"), size_t(c.n_embd), 0, "embed", -1};
  const KernelArgs embed_args = {{"wq", e.q},
                                 {"ws", e.s},
                                 {"n_in", cl_int(c.n_embd)},
                                 {"ids", s.ids},
                                 {"token_index", cl_int(0)},
                                 {"x", s.x}};
  embed_args.bind(embed_.kernel);
  embed_arg_token_index_ = embed_args.index("token_index");
  // Other architectures' layers run on ClPrefill's general steps (ClForward).
  if (c.plain_llama()) {
    for (int il = 0; il < c.n_layer; ++il) layers_.push_back(layer_plan(il));
  }
  plan_head();
}

// out (+)= W @ rmsnorm(x) * norm_w (no norm when norm_w is null)
DecodePlan::Launch DecodePlan::matvec_launch(const DeviceMatrix& m, const ClMem& x,
                                             const ClMem* norm_w, bool accumulate, const ClMem& out,
                                             const char* label, int layer) {
  const KernelTuning& tune = programs_.tuning();
  Launch l{programs_.weight_kernel(m.type, "matvec"), 0, size_t(tune.matvec_wg()), label, layer};
  matvec_args(m, x, norm_w, config_.rms_eps, accumulate, out).bind(l.kernel);
  l.global = round_up(size_t(m.rows), size_t(tune.rows)) / size_t(tune.rows) * l.local;
  return l;
}

// rmsnorm -> q, k, v rows [row_base, row_base + m.rows) -> RoPE -> KV append
DecodePlan::QkvLaunch DecodePlan::qkv_launch(const DeviceMatrix& m, int row_base, int il) {
  const KernelTuning& tune = programs_.tuning();
  QkvLaunch l;
  l.kernel = programs_.weight_kernel(m.type, "qkv_rope");
  l.local = size_t(tune.matvec_wg());
  l.global = round_up(size_t(m.rows), size_t(tune.rows)) / size_t(tune.rows) * l.local;
  l.label = "qkv_rope";
  l.layer = il;
  const KernelArgs args(
      qkv_rope_args(config_, m, row_base, w_.layers[size_t(il)].attn_norm.q, w_.rope_cs, s_));
  args.bind(l.kernel);
  l.arg_pos = args.index("pos");
  l.arg_cache_off = args.index("cache_off");
  return l;
}

DecodePlan::LayerPlan DecodePlan::layer_plan(int il) {
  const ModelConfig& c = config_;
  const DeviceWeights::Layer& w = w_.layers[size_t(il)];
  const KernelTuning& tune = programs_.tuning();
  const size_t mv_wg = size_t(tune.matvec_wg());
  LayerPlan p;
  // norm + q/k/v projections + RoPE + KV append
  int row_base = 0;
  for (const DeviceMatrix& m : w.qkv) {
    p.qkv.push_back(qkv_launch(m, row_base, il));
    row_base += m.rows;
  }
  if (programs_.fused_qkv_attention() && w.qkv.size() == 1) {  // CPU: attention folded in
    fuse_qkv_attention(w.qkv[0], w.attn_norm.q, p.qkv[0]);
  } else {  // attention over the cache
    p.attention = {programs_.attention_kernel(), size_t(c.n_head) * size_t(tune.att_wg),
                   size_t(tune.att_wg), "attention", il};
    const KernelArgs args = attention_decode_args(c, s_, s_.q, s_.kv[size_t(il)], s_.att_out);
    args.bind(p.attention.kernel);
    p.attention_arg_n_pos = args.index("n_pos");
  }
  // output projection + residual
  p.wo = matvec_launch(w.wo, s_.att_out, nullptr, true, s_.x, "wo", il);
  // norm + gate/up + SiLU
  if (w.ffn_gate.type != w.ffn_up.type) {
    throw std::runtime_error("ffn_gate and ffn_up of layer " + std::to_string(il) +
                             " have different types; not supported yet");
  }
  p.gate_up = {programs_.weight_kernel(w.ffn_gate.type, "ffn_gate_up"),
               round_up(size_t(c.n_ff), size_t(tune.rows)) / size_t(tune.rows) * mv_wg, mv_wg,
               "ffn_gate_up", il};
  bind_args(p.gate_up.kernel, {{"wq_gate", w.ffn_gate.q},
                               {"ws_gate", w.ffn_gate.s},
                               {"wq_up", w.ffn_up.q},
                               {"ws_up", w.ffn_up.s},
                               {"n_in", cl_int(c.n_embd)},
                               {"n_rows", cl_int(c.n_ff)},
                               {"x", s_.x},
                               {"norm_w", w.ffn_norm.q},
                               {"eps", c.rms_eps},
                               {"act", cl_int(0)},  // SiLU: llama's graph
                               {"h", s_.h}});
  // down projection + residual
  p.down = matvec_launch(w.ffn_down, s_.h, nullptr, true, s_.x, "ffn_down", il);
  return p;
}

// Replaces launch l (qkv_rope over the stacked q;k;v rows m) by
// qkv_rope_attention, which also writes att_out.
void DecodePlan::fuse_qkv_attention(const DeviceMatrix& m, const ClMem& norm_w, QkvLaunch& l) {
  const ModelConfig& c = config_;
  if (!head_done_) head_done_ = zeroed_counters(rt_, size_t(c.n_head));
  l.kernel = programs_.qkv_attention_kernel(m.type);
  l.label = "qkv_rope+attention";
  std::vector<KernelArg> list = qkv_rope_args(c, m, 0, norm_w, w_.rope_cs, s_);
  list.insert(list.end(), {{"n_head", cl_int(c.n_head)},
                           {"n_head_kv", cl_int(c.n_head_kv)},
                           {"scores", s_.scores},
                           {"scores_stride", cl_int(s_.n_ctx)},
                           {"att_out", s_.att_out},
                           {"head_done", head_done_}});
  const KernelArgs args(std::move(list));
  args.bind(l.kernel);
  l.arg_pos = args.index("pos");
  l.arg_cache_off = args.index("cache_off");
}

// final norm + lm_head (the token embedding when tied), then the argmax
void DecodePlan::plan_head() {
  const ModelConfig& c = config_;
  const KernelTuning& tune = programs_.tuning();
  const DeviceMatrix& head = w_.head();
  lm_head_ = matvec_launch(head, s_.x, &w_.output_norm.q, false, s_.logits, "lm_head", -1);
  if (programs_.fused_head_argmax()) {  // CPU devices: lm_head and argmax in one launch
    const size_t n_groups = lm_head_.global / lm_head_.local;
    lm_head_.kernel = programs_.head_argmax_kernel(head.type);
    lm_head_.label = "lm_head+argmax";
    head_part_val_ = rt_.alloc(n_groups * 4);
    head_part_idx_ = rt_.alloc(n_groups * 4);
    head_n_done_ = zeroed_counters(rt_, 1);
    bind_args(lm_head_.kernel, {{"wq", head.q},
                                {"ws", head.s},
                                {"n_in", cl_int(head.n_in)},
                                {"n_rows", cl_int(head.rows)},
                                {"x", s_.x},
                                {"norm_w", w_.output_norm.q},
                                {"eps", c.rms_eps},
                                {"out", s_.logits},
                                {"part_val", head_part_val_},
                                {"part_idx", head_part_idx_},
                                {"n_done", head_n_done_},
                                {"token", s_.ids}});
    return;
  }
  // argmax in two stages, result into ids[0]
  argmax_groups_ =
      int(std::clamp<size_t>(size_t(c.n_vocab) / (size_t(tune.argmax_wg) * 4), 1, 256));
  argmax_val_ = rt_.alloc(size_t(argmax_groups_) * 4);
  argmax_idx_ = rt_.alloc(size_t(argmax_groups_) * 4);
  const int chunk = (c.n_vocab + argmax_groups_ - 1) / argmax_groups_;
  argmax_partial_ = {programs_.argmax_kernel("argmax_partial"),
                     size_t(argmax_groups_) * size_t(tune.argmax_wg), size_t(tune.argmax_wg),
                     "argmax", -1};
  bind_args(argmax_partial_.kernel, {{"x", s_.logits},
                                     {"n", cl_int(c.n_vocab)},
                                     {"chunk", cl_int(chunk)},
                                     {"part_val", argmax_val_},
                                     {"part_idx", argmax_idx_}});
  argmax_final_ = {programs_.argmax_kernel("argmax_final"), size_t(tune.argmax_wg),
                   size_t(tune.argmax_wg), "argmax", -1};
  bind_args(argmax_final_.kernel, {{"part_val", argmax_val_},
                                   {"part_idx", argmax_idx_},
                                   {"n_parts", cl_int(argmax_groups_)},
                                   {"out", s_.ids}});
}

int DecodePlan::launches_per_token() const {
  size_t n = argmax_partial_.kernel ? 1 + 3 : 1 + 1;  // embed, lm_head, argmax x2 unless fused
  for (const auto& p : layers_) n += p.qkv.size() + (p.attention.kernel ? 4 : 3);
  return int(n);
}

void DecodePlan::enqueue(const Launch& l) {
  const size_t* local = l.local ? &l.local : nullptr;
  cl_event ev = nullptr;
  const cl_int err = clEnqueueNDRangeKernel(rt_.queue(), l.kernel.get(), 1, nullptr, &l.global,
                                            local, 0, nullptr, profiling_ ? &ev : nullptr);
  if (err != CL_SUCCESS) {
    throw ClError(std::string("enqueueing kernel ") + l.label + " (layer " +
                      std::to_string(l.layer) + ") failed: " + cl_error_name(err),
                  err);
  }
  if (ev) events_.emplace_back(&l, ClEvent(ev));
}

void DecodePlan::copy_x_to_debug(size_t slot) {
  const size_t n_embd_bytes = size_t(config_.n_embd) * 4;
  cl_check(clEnqueueCopyBuffer(rt_.queue(), s_.x.get(), s_.debug_hidden.get(), 0,
                               slot * n_embd_bytes, n_embd_bytes, 0, nullptr, nullptr),
           "clEnqueueCopyBuffer(debug)");
}

// The whole decode step for one position, in model order.
void DecodePlan::enqueue_token(int token_index, int pos, bool with_head) {
  const ModelConfig& c = config_;
  if (!c.plain_llama()) throw std::logic_error("the decode plan runs llama's graph only");
  set_arg(embed_.kernel.get(), embed_arg_token_index_, cl_int(token_index));
  enqueue(embed_);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerPlan& p = layers_[size_t(il)];
    const cl_ulong cache_off = s_.kv[size_t(il)].offset + cl_ulong(pos) * c.n_embd_kv();
    for (QkvLaunch& l : p.qkv) {  // rmsnorm -> q, k, v -> rope -> KV append
      set_arg(l.kernel.get(), l.arg_pos, cl_int(pos));
      set_arg(l.kernel.get(), l.arg_cache_off, cache_off);
      enqueue(l);
    }
    if (p.attention.kernel) {  // else folded into qkv (CPU devices)
      set_arg(p.attention.kernel.get(), p.attention_arg_n_pos, cl_int(pos + 1));  // over 0..pos
      enqueue(p.attention);
    }
    enqueue(p.wo);  // x += Wo att
    if (debug_) copy_x_to_debug(size_t(2 * il));
    enqueue(p.gate_up);  // h = silu(Wg xn) * (Wu xn)
    enqueue(p.down);     // x += Wd h
    if (debug_) copy_x_to_debug(size_t(2 * il + 1));
  }
  if (with_head) enqueue_head();
}

void DecodePlan::enqueue_head() {
  enqueue(lm_head_);
  if (!argmax_partial_.kernel) return;  // folded into lm_head_ (CPU devices)
  enqueue(argmax_partial_);
  enqueue(argmax_final_);
}

void DecodePlan::set_debug(bool on) {
  if (on && !s_.debug_hidden) {
    s_.debug_hidden = rt_.alloc(size_t(2 * config_.n_layer) * size_t(config_.n_embd) * 4, true);
  }
  debug_ = on;
}

ProfileReport DecodePlan::take_profile() {
  ProfileReport p;
  p.layer_us.assign(size_t(config_.n_layer), 0.0);
  for (const auto& [l, ev] : events_) p.add(l->label, l->layer, event_device_us(ev));
  events_.clear();
  return p;
}

}  // namespace clchat
