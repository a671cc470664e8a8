// Hyper-parameters and tensor checks for the families of architecture.h.
// Key names follow llama.cpp's conventions ("llama.embedding_length", ...).
#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "engine/model/architecture.h"
#include "engine/model/quant_mix.h"

namespace clchat {

namespace {

// Bounds that keep a corrupted header from asking for absurd buffers.
constexpr uint64_t k_max_embd = 1 << 16;
constexpr uint64_t k_max_layers = 1024;
constexpr uint64_t k_max_heads = 1024;
constexpr uint64_t k_max_ff = 1 << 18;
constexpr uint64_t k_max_vocab = 1 << 22;
constexpr uint64_t k_max_ctx = 1 << 24;

int bounded(const GgufFile& file, const std::string& key, uint64_t value, uint64_t max) {
  if (value == 0 || value > max) {
    file.fail("metadata '" + key + "' = " + std::to_string(value) + " is out of range (1.." +
              std::to_string(max) + ")");
  }
  return int(value);
}

const GgufTensor* require_tensor(const GgufFile& file, const std::string& name,
                                 std::vector<uint64_t> dims) {
  const GgufTensor* t = file.find_tensor(name);
  if (!t) file.fail("missing tensor '" + name + "'");
  if (t->dims != dims) {
    auto fmt = [](const std::vector<uint64_t>& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    file.fail("tensor '" + name + "' has shape " + fmt(t->dims) + ", expected " + fmt(dims));
  }
  return t;
}

// Rows [row0, row0 + rows) of t (a matrix: its rows are contiguous in the
// file) as a tensor of its own, named `name`.
std::shared_ptr<const GgufTensor> row_view(const GgufFile& file, const GgufTensor& t, uint64_t row0,
                                           uint64_t rows, const std::string& name) {
  const std::optional<uint64_t> row_bytes = ggml_row_bytes(t.type, t.dims[0]);
  if (!row_bytes || t.dims.size() != 2 || row0 + rows > t.dims[1]) {
    file.fail("tensor '" + t.name + "' cannot be split into its parts");
  }
  auto v = std::make_shared<GgufTensor>(t);
  v->name = name;
  v->dims = {t.dims[0], rows};
  v->offset = t.offset + row0 * *row_bytes;
  v->n_elements = t.dims[0] * rows;
  v->n_bytes = rows * *row_bytes;
  v->data = t.data + row0 * *row_bytes;
  return v;
}

}  // namespace

ModelConfig read_model_config(const GgufFile& file) {
  ModelConfig c;
  c.arch = file.opt_string("general.architecture").value_or("");
  if (c.arch.empty()) file.fail("missing metadata key 'general.architecture'");
  const ArchitectureTraits* traits = find_architecture(c.arch);
  if (!traits) {
    file.fail("unsupported architecture '" + c.arch + "' (clchat runs " + known_architectures() +
              ")");
  }
  c.name =
      file.opt_string("general.name").value_or(std::filesystem::path(file.path()).stem().string());
  const std::string p = c.arch + ".";
  auto get = [&](const std::string& key, uint64_t max) {
    return bounded(file, p + key, file.get_uint(p + key), max);
  };
  c.n_embd = get("embedding_length", k_max_embd);
  c.n_layer = get("block_count", k_max_layers);
  c.n_head = get("attention.head_count", k_max_heads);
  c.n_head_kv = file.has(p + "attention.head_count_kv")
                    ? get("attention.head_count_kv", k_max_heads)
                    : c.n_head;
  c.n_ff = get("feed_forward_length", k_max_ff);
  c.n_ctx_train = file.has(p + "context_length") ? get("context_length", k_max_ctx) : 2048;
  if (file.has(p + "attention.key_length")) {
    c.head_dim = get("attention.key_length", k_max_embd);
    const int v_len =
        file.has(p + "attention.value_length") ? get("attention.value_length", k_max_embd) : 0;
    if (v_len != 0 && v_len != c.head_dim) {
      file.fail("attention key length " + std::to_string(c.head_dim) + " and value length " +
                std::to_string(v_len) + " differ (not supported)");
    }
  } else {
    if (c.n_embd % c.n_head != 0) {
      file.fail("embedding length " + std::to_string(c.n_embd) + " is not divisible by " +
                std::to_string(c.n_head) + " heads");
    }
    c.head_dim = c.n_embd / c.n_head;
    if (file.has(p + "attention.value_length") &&
        get("attention.value_length", k_max_embd) != c.head_dim) {
      file.fail("attention value length differs from the head size " + std::to_string(c.head_dim) +
                " (not supported)");
    }
  }
  if (c.n_head % c.n_head_kv != 0) {
    file.fail(std::to_string(c.n_head) + " query heads are not a multiple of " +
              std::to_string(c.n_head_kv) + " KV heads");
  }
  if (uint64_t(c.n_head) * uint64_t(c.head_dim) > k_max_embd) {
    file.fail("attention of " + std::to_string(c.n_head) + " heads of " +
              std::to_string(c.head_dim) + " values is out of range");
  }
  c.n_rot =
      file.has(p + "rope.dimension_count") ? get("rope.dimension_count", k_max_embd) : c.head_dim;
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    file.fail("rope dimension count " + std::to_string(c.n_rot) + " does not fit head size " +
              std::to_string(c.head_dim));
  }
  c.rope_style = traits->rope_style;
  c.ffn_act = traits->ffn_act;
  c.qk_norm = traits->qk_norm;
  c.post_norms = traits->post_norms;
  c.qkv_bias = traits->qkv_bias;
  c.rope_freq_base = float(file.opt_float(p + "rope.freq_base").value_or(10000.0));
  c.rope_freq_base_swa = traits->rope_freq_base_swa;
  // Linear position scaling (Gemma 3 4B+: factor 8 on its global layers;
  // older llama conversions: rope.scale_linear). As llama.cpp, a factor
  // without a type is linear; Llama 3's own type lives in rope_freqs.weight;
  // other types change more than positions and are refused.
  const std::string scaling = file.opt_string(p + "rope.scaling.type").value_or("linear");
  if (scaling != "none" && scaling != "llama3") {
    if (scaling != "linear") file.fail("rope scaling type '" + scaling + "' is not supported");
    const double factor = file.opt_float(p + "rope.scaling.factor")
                              .value_or(file.opt_float(p + "rope.scale_linear").value_or(1.0));
    if (factor != 0.0 && !(factor >= 1.0 && factor <= 1024.0)) {  // 0: none, as llama.cpp reads it
      file.fail("rope scaling factor " + std::to_string(factor) + " is out of range (1..1024)");
    }
    if (factor != 0.0) c.rope_freq_scale = float(1.0 / factor);
  }
  c.rms_eps = float(file.opt_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(c.rope_freq_base > 0.0f) || !std::isfinite(c.rope_freq_base) || !(c.rms_eps > 0.0f) ||
      !(c.rms_eps < 1.0f)) {
    file.fail("rope frequency base must be positive and finite, RMS epsilon in (0, 1)");
  }
  if (traits->embed_scale_sqrt) c.embed_scale = float(std::sqrt(double(c.n_embd)));
  // Attention scale 1/sqrt(head size), except Gemma 3 27B (62 layers), which
  // llama.cpp scales by 1/sqrt(n_embd / n_head) (its query_pre_attn_scalar).
  c.attn_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  if (c.arch == "gemma3" && c.n_layer == 62) {
    c.attn_scale = float(1.0 / std::sqrt(double(c.n_embd) / double(c.n_head)));
  }
  // A window of 0 is no window, as llama.cpp reads it.
  if (traits->uses_window && file.opt_uint(p + "attention.sliding_window").value_or(0) > 0) {
    c.sliding_window = get("attention.sliding_window", k_max_ctx);
    const int period = traits->swa_period;
    for (int il = 0; il < c.n_layer; ++il) {
      c.swa_layer.push_back(period == 0 || il % period < period - 1);
    }
  }
  c.rope_freq_factors = file.find_tensor("rope_freqs.weight") != nullptr;
  if (file.find_tensor("rope_factors_long.weight") ||
      file.find_tensor("rope_factors_short.weight")) {
    file.fail("long-context RoPE factors (rope_factors_long/short, Phi-3 128k) are not supported");
  }
  const GgufTensor* embd = file.find_tensor("token_embd.weight");
  if (!embd) file.fail("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) file.fail("tensor 'token_embd.weight' is not a matrix");
  c.n_vocab = bounded(file, "token_embd.weight rows", embd->dims[1], k_max_vocab);
  // The tokenizer and the embedding must agree: with fewer tokens the model
  // picks ids no token prints (replies come out empty), with more the
  // tokenizer makes ids that have no row. (A file without a tokenizer, such
  // as a synthetic benchmark model, is checked when a tokenizer is needed.)
  if (file.has("tokenizer.ggml.tokens")) {
    const size_t n_tokens = file.get_array("tokenizer.ggml.tokens").items.size();
    if (n_tokens != size_t(c.n_vocab)) {
      file.fail("tokenizer.ggml.tokens has " + std::to_string(n_tokens) +
                " tokens but token_embd.weight has " + std::to_string(c.n_vocab) +
                " rows (the vocabulary sizes must match)");
    }
  }
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  return c;
}

ModelTensors find_model_tensors(const GgufFile& file, const ModelConfig& c) {
  const uint64_t embd = uint64_t(c.n_embd), kv = uint64_t(c.n_embd_kv()), ff = uint64_t(c.n_ff);
  const uint64_t nq = uint64_t(c.n_embd_q()), hd = uint64_t(c.head_dim);
  ModelTensors t;
  auto require_f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    const GgufTensor* v = require_tensor(file, name, std::move(dims));
    if (v->type != GgmlType::F32) file.fail("tensor '" + name + "' must be F32");
    return v;
  };
  if (c.rope_freq_factors) {
    t.rope_freqs = require_f32("rope_freqs.weight", {uint64_t(c.n_rot / 2)});
    const std::vector<uint8_t> bytes = file.tensor_bytes(*t.rope_freqs);
    for (size_t i = 0; i < bytes.size() / 4; ++i) {
      float f = 0;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      if (!(f > 0.0f) || !std::isfinite(f)) {
        file.fail("rope_freqs.weight holds a factor that is not finite and positive");
      }
    }
  }
  t.token_embd = require_tensor(file, "token_embd.weight", {embd, uint64_t(c.n_vocab)});
  t.output_norm = require_tensor(file, "output_norm.weight", {embd});
  t.output = c.tied_embeddings ? t.token_embd
                               : require_tensor(file, "output.weight", {embd, uint64_t(c.n_vocab)});
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    LayerTensors l{};
    l.attn_norm = require_tensor(file, b + "attn_norm.weight", {embd});
    auto view = [&](const GgufTensor* fused, uint64_t row0, uint64_t rows, const char* part) {
      t.views.push_back(row_view(file, *fused, row0, rows, fused->name + "[" + part + "]"));
      return t.views.back().get();
    };
    // Q, K and V: three tensors, or one fused attn_qkv [n_embd, n_embd_q + 2 n_embd_kv]
    // (Phi-3) whose row ranges serve as the three.
    if (file.find_tensor(b + "attn_qkv.weight")) {
      const GgufTensor* qkv = require_tensor(file, b + "attn_qkv.weight", {embd, nq + 2 * kv});
      l.wq = view(qkv, 0, nq, "q");
      l.wk = view(qkv, nq, kv, "k");
      l.wv = view(qkv, nq + kv, kv, "v");
    } else {
      l.wq = require_tensor(file, b + "attn_q.weight", {embd, nq});
      l.wk = require_tensor(file, b + "attn_k.weight", {embd, kv});
      l.wv = require_tensor(file, b + "attn_v.weight", {embd, kv});
    }
    l.wo = require_tensor(file, b + "attn_output.weight", {nq, embd});
    l.ffn_norm = require_tensor(file, b + "ffn_norm.weight", {embd});
    // Gate and up: two tensors, or (no ffn_gate) one ffn_up [n_embd, 2 n_ff]
    // with the gate's rows first (Phi-3; llama.cpp's SwiGLU split).
    if (!file.find_tensor(b + "ffn_gate.weight") && file.find_tensor(b + "ffn_up.weight") &&
        file.find_tensor(b + "ffn_up.weight")->dims == std::vector<uint64_t>{embd, 2 * ff}) {
      const GgufTensor* up = file.find_tensor(b + "ffn_up.weight");
      l.ffn_gate = view(up, 0, ff, "gate");
      l.ffn_up = view(up, ff, ff, "up");
    } else {
      l.ffn_gate = require_tensor(file, b + "ffn_gate.weight", {embd, ff});
      l.ffn_up = require_tensor(file, b + "ffn_up.weight", {embd, ff});
    }
    l.ffn_down = require_tensor(file, b + "ffn_down.weight", {ff, embd});
    for (const GgufTensor* norm : {l.attn_norm, l.ffn_norm}) {
      if (norm->type != GgmlType::F32) file.fail("tensor '" + norm->name + "' must be F32");
    }
    if (c.qkv_bias) {
      l.bq = require_f32(b + "attn_q.bias", {nq});
      l.bk = require_f32(b + "attn_k.bias", {kv});
      l.bv = require_f32(b + "attn_v.bias", {kv});
    }
    if (c.qk_norm) {
      l.q_norm = require_f32(b + "attn_q_norm.weight", {hd});
      l.k_norm = require_f32(b + "attn_k_norm.weight", {hd});
    }
    if (c.post_norms) {
      l.post_attn_norm = require_f32(b + "post_attention_norm.weight", {embd});
      l.post_ffn_norm = require_f32(b + "post_ffw_norm.weight", {embd});
    }
    t.layers.push_back(l);
  }
  if (t.output_norm->type != GgmlType::F32) file.fail("tensor 'output_norm.weight' must be F32");
  return t;
}

Model load_model(const std::string& path) {
  Model m;
  m.file = GgufFile::open(path);
  m.config = read_model_config(*m.file);
  m.tensors = find_model_tensors(*m.file, m.config);
  return m;
}

std::vector<std::pair<GgmlType, int>> layer_weight_types(const Model& model) {
  std::map<GgmlType, int> counts;
  for (const auto& l : model.tensors.layers) {
    for (const GgufTensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) {
      ++counts[t->type];
    }
  }
  std::vector<std::pair<GgmlType, int>> types(counts.begin(), counts.end());
  std::stable_sort(types.begin(), types.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return types;
}

std::string describe_weight_type(const Model& model) {
  const auto types = layer_weight_types(model);
  if (types.size() == 1) return ggml_type_name(types[0].first);
  // Display only: a general.file_type of the wrong type is ignored, not an error.
  if (const GgufValue* v = model.file->find("general.file_type")) {
    if (const auto* id = std::get_if<uint64_t>(&v->data)) {
      if (const auto name = llama_file_type_name(*id)) return *name + " mix";
    }
  }
  std::string list;
  for (const auto& [type, n] : types)
    list += (list.empty() ? "" : ", ") + std::string(ggml_type_name(type));
  return list;
}

}  // namespace clchat
