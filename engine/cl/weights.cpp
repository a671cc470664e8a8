// Repacking GGUF blocks into the split payload/scale layout and uploading.
#include "engine/cl/weights.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "engine/cl/block_layout.h"

namespace clchat {

RepackedMatrix repack_matrix(GgmlType type, const uint8_t* data, int n_in, int rows) {
  RepackedMatrix m;
  m.type = type;
  m.n_in = n_in;
  m.rows = rows;
  repack_rows(type, data, n_in, rows, m.q, m.s);
  return m;
}

RepackedMatrix repack_tensor(const GgufTensor& t) {
  return repack_matrix(t.type, t.data, int(t.dims[0]), int(t.n_rows()));
}

RepackedMatrix stack_rows(const std::vector<RepackedMatrix>& parts) {
  RepackedMatrix out;
  if (parts.empty()) return out;
  out.type = parts[0].type;
  out.n_in = parts[0].n_in;
  const bool plain = !ggml_is_quantized(out.type);
  for (const auto& p : parts) {
    if (p.type != out.type || p.n_in != out.n_in) {
      throw std::invalid_argument("stack_rows: matrices differ in type or row length");
    }
    out.rows += p.rows;
    out.q.insert(out.q.end(), p.q.begin(), p.q.end());
    if (!plain) out.s.insert(out.s.end(), p.s.begin(), p.s.end());
  }
  if (plain) out.s.assign(4, 0);
  return out;
}

DeviceMatrix upload_matrix(const ClRuntime& rt, const RepackedMatrix& m) {
  DeviceMatrix d;
  d.type = m.type;
  d.n_in = m.n_in;
  d.rows = m.rows;
  d.q = rt.upload(m.q.data(), m.q.size());
  d.s = rt.upload(m.s.data(), m.s.size());
  d.n_bytes = m.q.size() + m.s.size();
  return d;
}

DeviceMatrix upload_floats(const ClRuntime& rt, const float* data, int n) {
  return upload_matrix(rt,
                       repack_matrix(GgmlType::F32, reinterpret_cast<const uint8_t*>(data), n, 1));
}

namespace {

DeviceMatrix upload_tensor(const ClRuntime& rt, const GgufTensor* t) {
  return upload_matrix(rt, repack_tensor(*t));
}

// (cos, sin) of pos * base^(-2i / n_rot), computed in float64.
ClMem rope_table(const ModelConfig& c, const ClRuntime& rt, int n_ctx) {
  std::vector<float> cs(size_t(n_ctx) * size_t(c.n_rot));
  for (int pos = 0; pos < n_ctx; ++pos) {
    for (int i = 0; i < c.n_rot / 2; ++i) {
      const double theta = pos * std::pow(double(c.rope_freq_base), -2.0 * i / c.n_rot);
      cs[(size_t(pos) * (c.n_rot / 2) + i) * 2] = float(std::cos(theta));
      cs[(size_t(pos) * (c.n_rot / 2) + i) * 2 + 1] = float(std::sin(theta));
    }
  }
  return rt.upload(cs.data(), cs.size() * 4);
}

size_t mem_size(const ClMem& m) {
  size_t n = 0;
  cl_check(clGetMemObjectInfo(m.get(), CL_MEM_SIZE, sizeof(n), &n, nullptr), "clGetMemObjectInfo");
  return n;
}

}  // namespace

DeviceWeights::DeviceWeights(const Model& model, const ClRuntime& rt, int n_ctx) {
  const ModelTensors& t = model.tensors;
  token_embd = upload_tensor(rt, t.token_embd);
  n_bytes += token_embd.n_bytes;
  if (!model.config.tied_embeddings) {
    output = upload_tensor(rt, t.output);
    n_bytes += output.n_bytes;
  }
  output_norm = upload_tensor(rt, t.output_norm);
  for (const LayerTensors& l : t.layers) {
    Layer w;
    w.attn_norm = upload_tensor(rt, l.attn_norm);
    w.ffn_norm = upload_tensor(rt, l.ffn_norm);
    if (l.wq->type == l.wk->type && l.wq->type == l.wv->type) {
      w.qkv.push_back(upload_matrix(
          rt, stack_rows({repack_tensor(*l.wq), repack_tensor(*l.wk), repack_tensor(*l.wv)})));
    } else {
      for (const GgufTensor* m : {l.wq, l.wk, l.wv}) w.qkv.push_back(upload_tensor(rt, m));
    }
    w.wo = upload_tensor(rt, l.wo);
    w.ffn_gate = upload_tensor(rt, l.ffn_gate);
    w.ffn_up = upload_tensor(rt, l.ffn_up);
    w.ffn_down = upload_tensor(rt, l.ffn_down);
    for (const auto* m : {&w.wo, &w.ffn_gate, &w.ffn_up, &w.ffn_down}) n_bytes += m->n_bytes;
    for (const auto& m : w.qkv) n_bytes += m.n_bytes;
    layers.push_back(std::move(w));
  }
  rope_cs = rope_table(model.config, rt, n_ctx);
}

std::optional<WeightArena> WeightArena::build(const DeviceWeights& w, const ClRuntime& rt) {
  constexpr uint64_t k_align = 256;
  std::vector<std::pair<const ClMem*, uint64_t>> parts;  // buffer, offset
  uint64_t total = 0;
  auto place = [&](const ClMem& m) {
    const uint64_t off = total;
    parts.emplace_back(&m, off);
    total += (mem_size(m) + k_align - 1) / k_align * k_align;
    return off;
  };
  WeightArena a;
  std::vector<uint64_t> layer_off;
  for (const DeviceWeights::Layer& l : w.layers) {
    if (l.qkv.size() != 1) return std::nullopt;
    for (const DeviceMatrix* m : {&l.qkv[0], &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      layer_off.push_back(place(m->q));
      layer_off.push_back(place(m->s));
    }
    layer_off.push_back(place(l.attn_norm.q));
    layer_off.push_back(place(l.ffn_norm.q));
  }
  a.embd_q = place(w.token_embd.q);
  a.embd_s = place(w.token_embd.s);
  const bool tied = &w.head() == &w.token_embd;
  a.head_q = tied ? a.embd_q : place(w.head().q);
  a.head_s = tied ? a.embd_s : place(w.head().s);
  a.out_norm = place(w.output_norm.q);
  if (total > rt.device().max_alloc_bytes) return std::nullopt;
  a.arena = rt.alloc(total);
  for (const auto& [m, off] : parts) {
    cl_check(clEnqueueCopyBuffer(rt.queue(), m->get(), a.arena.get(), 0, off, mem_size(*m), 0,
                                 nullptr, nullptr),
             "clEnqueueCopyBuffer(arena)");
  }
  static_assert(sizeof(cl_ulong) == sizeof(uint64_t));
  if (layer_off.size() != w.layers.size() * k_layer_offsets) throw std::logic_error("layer_off");
  a.layer_off = rt.upload(layer_off.data(), layer_off.size() * sizeof(uint64_t));
  return a;
}

}  // namespace clchat
