// Repacking GGUF blocks into the split payload/scale layout and uploading.
#include "engine/cl/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "engine/cl/block_layout.h"
#include "engine/cpu/ops.h"

namespace clchat {

RepackedMatrix repack_matrix(GgmlType type, const uint8_t* data, int n_in, int rows) {
  RepackedMatrix m;
  m.type = type;
  m.n_in = n_in;
  m.rows = rows;
  repack_rows(type, data, n_in, rows, m.q, m.s);
  return m;
}

RepackedMatrix repack_for_device(GgmlType file_type, const uint8_t* data, int n_in, int rows,
                                 bool cpu_device) {
  const GgmlType type = device_type(file_type, cpu_device);
  if (type == file_type) return repack_matrix(type, data, n_in, rows);
  const auto row_bytes = ggml_row_bytes(file_type, uint64_t(n_in));
  if (!row_bytes || rows < 0) {
    throw std::invalid_argument("repack_for_device: row length does not fit type");
  }
  const size_t n_blocks = *row_bytes * size_t(rows) / size_t(ggml_block_bytes(file_type));
  if (file_type == GgmlType::Q5_0) {  // Q8_0 on a CPU device
    const std::vector<uint8_t> q8 = q5_0_as_q8_0(data, n_blocks);
    return repack_matrix(type, q8.data(), n_in, rows);
  }
  try {  // Q4_K, Q5_K as Q4_1, Q5_1
    const std::vector<uint8_t> legacy = k_quant_as_legacy(file_type, data, n_blocks);
    return repack_matrix(type, legacy.data(), n_in, rows);
  } catch (const std::range_error&) {
    // a scale beyond fp16: the exact layout (float records), which the
    // kernels' Q4_K / Q5_K loops read
    return repack_matrix(file_type, data, n_in, rows);
  }
}

RepackedMatrix repack_tensor(const GgufFile& file, const GgufTensor& t, bool cpu_device) {
  const std::vector<uint8_t> bytes = file.tensor_bytes(t);
  return repack_for_device(t.type, bytes.data(), int(t.dims[0]), int(t.n_rows()), cpu_device);
}

bool qkv_stacked(const LayerTensors& l, bool cpu_device) {
  if (!l.wq || !l.wk || !l.wv) return false;
  const GgmlType q = device_type(l.wq->type, cpu_device);
  return device_type(l.wk->type, cpu_device) == q && device_type(l.wv->type, cpu_device) == q;
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
  if (m.s.size() % 4 == 0) {
    d.s = rt.upload(m.s.data(), m.s.size());
  } else {
    // whole 4-byte words: kernels that copy the scales a word at a time
    // (matmul_mma_deq.cl: Q4_0 and Q8_0 2-byte scales) stay inside the buffer
    std::vector<uint8_t> s = m.s;
    s.resize((s.size() + 3) / 4 * 4, 0);
    d.s = rt.upload(s.data(), s.size());
  }
  d.n_bytes = m.q.size() + m.s.size();
  return d;
}

DeviceMatrix upload_floats(const ClRuntime& rt, const float* data, int n) {
  return upload_matrix(rt,
                       repack_matrix(GgmlType::F32, reinterpret_cast<const uint8_t*>(data), n, 1));
}

namespace {

DeviceMatrix upload_tensor(const ClRuntime& rt, const GgufFile& file, const GgufTensor* t) {
  return upload_matrix(rt, repack_tensor(file, *t, rt.device().is_cpu));
}

// (cos, sin) of each pair's angle (cpu::rope_angle), computed in float64.
ClMem make_rope_table(const cpu::RopeParams& p, const ClRuntime& rt, int n_ctx) {
  std::vector<float> cs(size_t(n_ctx) * size_t(p.n_rot));
  for (int pos = 0; pos < n_ctx; ++pos) {
    for (int i = 0; i < p.n_rot / 2; ++i) {
      const double theta = cpu::rope_angle(p, pos, i);
      cs[(size_t(pos) * (p.n_rot / 2) + i) * 2] = float(std::cos(theta));
      cs[(size_t(pos) * (p.n_rot / 2) + i) * 2 + 1] = float(std::sin(theta));
    }
  }
  return rt.upload(cs.data(), cs.size() * 4);
}

// An F32 tensor's values (the loader checked the type).
std::vector<float> read_floats(const GgufFile& file, const GgufTensor& t) {
  const std::vector<uint8_t> bytes = file.tensor_bytes(t);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// A 1-row F32 matrix of t's values; empty for a null t.
DeviceMatrix upload_optional(const ClRuntime& rt, const GgufFile& file, const GgufTensor* t) {
  return t ? upload_tensor(rt, file, t) : DeviceMatrix{};
}

size_t mem_size(const ClMem& m) {
  size_t n = 0;
  cl_check(clGetMemObjectInfo(m.get(), CL_MEM_SIZE, sizeof(n), &n, nullptr), "clGetMemObjectInfo");
  return n;
}

}  // namespace

uint64_t DeviceWeights::Layer::matrix_bytes() const {
  uint64_t b = wo.n_bytes + ffn_gate.n_bytes + ffn_up.n_bytes + ffn_down.n_bytes;
  for (const DeviceMatrix& m : qkv) b += m.n_bytes;
  return b;
}

DeviceWeights::DeviceWeights(const Model& model, const ClRuntime& rt, int n_ctx) {
  const ModelTensors& t = model.tensors;
  const GgufFile& f = *model.file;
  const bool cpu = rt.device().is_cpu;
  token_embd = upload_tensor(rt, f, t.token_embd);
  n_bytes += token_embd.n_bytes;
  if (!model.config.tied_embeddings) {
    output = upload_tensor(rt, f, t.output);
    n_bytes += output.n_bytes;
  }
  output_norm = upload_tensor(rt, f, t.output_norm);
  for (const LayerTensors& l : t.layers) {
    Layer w;
    w.attn_norm = upload_tensor(rt, f, l.attn_norm);
    w.ffn_norm = upload_tensor(rt, f, l.ffn_norm);
    if (qkv_stacked(l, cpu)) {
      const std::vector<RepackedMatrix> parts = {
          repack_tensor(f, *l.wq, cpu), repack_tensor(f, *l.wk, cpu), repack_tensor(f, *l.wv, cpu)};
      if (parts[1].type == parts[0].type && parts[2].type == parts[0].type) {
        w.qkv.push_back(upload_matrix(rt, stack_rows(parts)));
      } else {  // one kept its exact K-quant layout (repack_tensor)
        for (const RepackedMatrix& p : parts) w.qkv.push_back(upload_matrix(rt, p));
      }
    } else {
      for (const GgufTensor* m : {l.wq, l.wk, l.wv}) w.qkv.push_back(upload_tensor(rt, f, m));
    }
    w.wo = upload_tensor(rt, f, l.wo);
    w.ffn_gate = upload_tensor(rt, f, l.ffn_gate);
    w.ffn_up = upload_tensor(rt, f, l.ffn_up);
    w.ffn_down = upload_tensor(rt, f, l.ffn_down);
    if (l.bq) {  // one row: the three biases end to end
      std::vector<float> bias;
      for (const GgufTensor* b : {l.bq, l.bk, l.bv}) {
        const std::vector<float> v = read_floats(f, *b);
        bias.insert(bias.end(), v.begin(), v.end());
      }
      w.qkv_bias = upload_floats(rt, bias.data(), int(bias.size()));
    }
    w.q_norm = upload_optional(rt, f, l.q_norm);
    w.k_norm = upload_optional(rt, f, l.k_norm);
    w.post_attn_norm = upload_optional(rt, f, l.post_attn_norm);
    w.post_ffn_norm = upload_optional(rt, f, l.post_ffn_norm);
    n_bytes += w.matrix_bytes();
    layers.push_back(std::move(w));
  }
  const ModelConfig& c = model.config;
  const std::vector<float> factors =
      t.rope_freqs ? read_floats(f, *t.rope_freqs) : std::vector<float>{};
  const float* fp = factors.empty() ? nullptr : factors.data();
  rope_cs =
      make_rope_table({c.rope_style, c.n_rot, c.rope_freq_base, c.rope_freq_scale, fp}, rt, n_ctx);
  swa_layer_ = c.swa_layer;
  if (c.sliding_window > 0 &&
      (c.rope_freq_base_swa != c.rope_freq_base || c.rope_freq_scale != 1.0f)) {
    rope_cs_swa =
        make_rope_table({c.rope_style, c.n_rot, c.rope_freq_base_swa, 1.0f, fp}, rt, n_ctx);
  }
}

std::array<GgmlType, LayerTypes::n_roles> LayerTypes::of_layer(const DeviceWeights::Layer& l) {
  const bool stacked = l.qkv.size() == 1;
  return {l.qkv[0].type,
          l.qkv[stacked ? 0 : 1].type,
          l.qkv[stacked ? 0 : 2].type,
          l.wo.type,
          l.ffn_gate.type,
          l.ffn_down.type};
}

std::optional<LayerTypes> LayerTypes::of(const DeviceWeights& w, std::string* why) {
  auto no = [why](const std::string& reason) {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (w.layers.empty()) return no("no layers");
  // Per role, each type with the number of layers that use it, in order of
  // first use.
  std::vector<std::pair<GgmlType, int>> seen[n_roles];
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const DeviceWeights::Layer& l = w.layers[il];
    if (l.ffn_up.type != l.ffn_gate.type) {
      return no("ffn_gate and ffn_up differ in type (layer " + std::to_string(il) + ")");
    }
    const auto types = of_layer(l);
    for (int r = 0; r < n_roles; ++r) {
      auto it = std::find_if(seen[r].begin(), seen[r].end(),
                             [&](const auto& s) { return s.first == types[r]; });
      if (it == seen[r].end()) {
        seen[r].emplace_back(types[r], 1);
      } else {
        ++it->second;
      }
    }
  }
  LayerTypes t;
  for (int r = 0; r < n_roles; ++r) {
    if (seen[r].size() > 2) {
      std::string list;
      for (const auto& [type, n] : seen[r]) {
        list += std::string(list.empty() ? "" : ", ") + ggml_type_name(type);
      }
      return no(std::string(k_role_names[r]) + " has " + std::to_string(seen[r].size()) +
                " weight types over the layers (" + list + "); the kernels take two per role");
    }
    const bool second = seen[r].size() == 2 && seen[r][1].second > seen[r][0].second;
    t.type[r] = seen[r][second ? 1 : 0].first;
    t.alt[r] = seen[r][seen[r].size() == 2 && !second ? 1 : 0].first;
  }
  return t;
}

uint64_t LayerTypes::alt_word(const DeviceWeights::Layer& l) const {
  const auto types = of_layer(l);
  uint64_t word = 0;
  for (int r = 0; r < n_roles; ++r) {
    if (types[r] != type[r]) word |= uint64_t(1) << r;
  }
  return word;
}

bool LayerTypes::qkv_stacked() const {
  return type[q] == type[k] && type[k] == type[v] && alt[q] == type[q] && alt[k] == type[k] &&
         alt[v] == type[v];
}

std::string LayerTypes::describe(const DeviceWeights& w) const {
  std::string d;
  for (int r = 0; r < n_roles; ++r) {
    d += std::string(r ? ", " : "") + k_role_names[r] + " " + ggml_type_name(type[r]);
    if (alt[r] == type[r]) continue;
    const auto n = std::count_if(w.layers.begin(), w.layers.end(),
                                 [&](const auto& l) { return of_layer(l)[r] == alt[r]; });
    d += std::string(" (") + ggml_type_name(alt[r]) + " in " + std::to_string(n) +
         (n == 1 ? " layer)" : " layers)");
  }
  return d;
}

std::optional<WeightArena> WeightArena::build(const DeviceWeights& w, const LayerTypes& types,
                                              const ClRuntime& rt) {
  constexpr uint64_t k_align = 256;
  std::vector<std::pair<const ClMem*, uint64_t>> parts;  // buffer, offset
  uint64_t total = 0;
  auto place = [&](const ClMem& m) {
    const uint64_t off = total;
    parts.emplace_back(&m, off);
    total += (mem_size(m) + k_align - 1) / k_align * k_align;
    return off;
  };
  // Bytes of one row of n values of `type` in q and in s (block_layout.h).
  auto row_bytes = [](GgmlType type, int n) {
    if (!ggml_is_quantized(type))
      return std::pair<uint64_t, uint64_t>(uint64_t(n) * device_q_bytes(type), 0);
    return std::pair<uint64_t, uint64_t>(uint64_t(n / 32) * device_q_bytes(type),
                                         uint64_t(n / 32) * device_s_bytes(type));
  };
  WeightArena a;
  std::vector<uint64_t> layer_off;
  for (int il = 0; il < int(w.layers.size()); ++il) {
    const DeviceWeights::Layer& l = w.layers[size_t(il)];
    uint64_t lo[k_layer_offsets] = {};
    // The kernels read [Q; K; V] as one matrix when its types say so.
    if (types.qkv_stacked() && l.qkv.size() != 1) throw std::logic_error("Q, K, V not stacked");
    const DeviceMatrix& q = l.qkv[0];
    lo[q_q] = place(q.q);
    lo[q_s] = place(q.s);
    if (l.qkv.size() == 1) {
      // Stacked: K's rows follow Q's n_embd_q (= Wo's n_in) rows, V's K's
      // n_embd_kv.
      const auto [q_row, s_row] = row_bytes(q.type, q.n_in);
      const int n_embd_q = l.wo.n_in;
      const int n_embd_kv = (q.rows - n_embd_q) / 2;
      lo[k_q] = lo[q_q] + uint64_t(n_embd_q) * q_row;
      lo[k_s] = lo[q_s] + uint64_t(n_embd_q) * s_row;
      lo[v_q] = lo[k_q] + uint64_t(n_embd_kv) * q_row;
      lo[v_s] = lo[k_s] + uint64_t(n_embd_kv) * s_row;
    }
    lo[wo_q] = place(l.wo.q);
    lo[wo_s] = place(l.wo.s);
    lo[gate_q] = place(l.ffn_gate.q);
    lo[gate_s] = place(l.ffn_gate.s);
    lo[up_q] = place(l.ffn_up.q);
    lo[up_s] = place(l.ffn_up.s);
    lo[down_q] = place(l.ffn_down.q);
    lo[down_s] = place(l.ffn_down.s);
    lo[attn_norm] = place(l.attn_norm.q);
    lo[ffn_norm] = place(l.ffn_norm.q);
    if (l.qkv.size() == 3) {
      lo[k_q] = place(l.qkv[1].q);
      lo[k_s] = place(l.qkv[1].s);
      lo[v_q] = place(l.qkv[2].q);
      lo[v_s] = place(l.qkv[2].s);
    }
    lo[alt_word] = types.alt_word(l) | (w.is_swa(il) ? k_swa_bit : 0);
    auto place_optional = [&](const DeviceMatrix& m) { return m.q ? place(m.q) : 0; };
    lo[qkv_bias] = place_optional(l.qkv_bias);
    lo[q_norm] = place_optional(l.q_norm);
    lo[k_norm] = place_optional(l.k_norm);
    lo[post_attn_norm] = place_optional(l.post_attn_norm);
    lo[post_ffn_norm] = place_optional(l.post_ffn_norm);
    layer_off.insert(layer_off.end(), std::begin(lo), std::end(lo));
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
  a.layer_off = rt.upload(layer_off.data(), layer_off.size() * sizeof(uint64_t));
  return a;
}

}  // namespace clchat
