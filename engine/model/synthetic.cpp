#include "engine/model/synthetic.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "engine/gguf/quant.h"
#include "engine/model/architecture.h"

namespace clchat {

namespace {

// splitmix64: fast, deterministic across platforms.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) / float(1 << 24) * 2.0f - 1.0f; }  // [-1, 1)
};

std::vector<float> random_matrix(Rng& rng, uint64_t n_in, uint64_t rows, float std) {
  std::vector<float> v(n_in * rows);
  const float a = std * std::sqrt(3.0f);
  for (auto& x : v) x = rng.uniform() * a;
  return v;
}

void add_matrix(GgufWriter& w, Rng& rng, const std::string& name, GgmlType type, uint64_t n_in,
                uint64_t rows, float std) {
  const auto values = random_matrix(rng, n_in, rows, std);
  w.add_tensor(name, type, {n_in, rows}, quantize_matrix(type, values, n_in));
}

void add_norm(GgufWriter& w, Rng& rng, const std::string& name, uint64_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = 1.0f + 0.1f * rng.uniform();
  w.add_tensor(name, GgmlType::F32, {n}, quantize_matrix(GgmlType::F32, v, n));
}

void add_bias(GgufWriter& w, Rng& rng, const std::string& name, uint64_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = 0.5f * rng.uniform();
  w.add_tensor(name, GgmlType::F32, {n}, quantize_matrix(GgmlType::F32, v, n));
}

// Llama 3.2 1B's RoPE frequency factors (rope_scaling: factor 32,
// low_freq_factor 1, high_freq_factor 4, original context 8192), as
// llama.cpp's converter computes them into rope_freqs.weight: wavelengths
// above original / low_freq_factor are stretched by `factor`, those below
// original / high_freq_factor kept, the band between interpolated.
std::vector<float> llama3_rope_factors(int n_rot, float base) {
  const double factor = 32.0, low = 1.0, high = 4.0, original = 8192.0;
  const double low_wavelen = original / low, high_wavelen = original / high;
  std::vector<float> f;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(double(base), -2.0 * i / n_rot);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(float(factor));
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      f.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return f;
}

}  // namespace

namespace {

// The shapes of real models (their GGUF metadata): name, architecture,
// embd, layers, heads, KV heads, head size (0: embd / heads), FFN, vocab,
// context, RoPE base, sliding window, RoPE frequency factors.
struct Preset {
  const char* name;
  const char* arch;
  int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
  float rope_freq_base;
  int sliding_window;
  bool rope_freqs;
};
constexpr Preset k_presets[] = {
    {"smollm2-135m", "llama", 576, 30, 9, 3, 0, 1536, 49152, 8192, 100000.0f, 0, false},
    {"smollm2-360m", "llama", 960, 32, 15, 5, 0, 2560, 49152, 8192, 100000.0f, 0, false},
    {"smollm2-1.7b", "llama", 2048, 24, 32, 32, 0, 8192, 49152, 8192, 130000.0f, 0, false},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 0, 8192, 128256, 131072, 500000.0f, 0, true},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 0, 4864, 151936, 32768, 1000000.0f, 0, false},
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 256, 2048, 262144, 32768, 1000000.0f, 512, false},
    {"phi-3-mini", "phi3", 3072, 32, 32, 32, 0, 8192, 32064, 4096, 10000.0f, 0, false},
};

}  // namespace

const std::string& synthetic_preset_names() {
  static const std::string names = [] {
    std::string s;
    for (const Preset& p : k_presets) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
  }();
  return names;
}

SyntheticSpec synthetic_preset(std::string_view name) {
  for (const Preset& p : k_presets) {
    if (name != p.name) continue;
    SyntheticSpec s;
    s.name = "synthetic-" + std::string(p.name);
    s.arch = p.arch;
    s.head_dim = p.head_dim;
    s.sliding_window = p.sliding_window;
    s.rope_freqs = p.rope_freqs;
    s.n_embd = p.n_embd;
    s.n_layer = p.n_layer;
    s.n_head = p.n_head;
    s.n_head_kv = p.n_head_kv;
    s.n_ff = p.n_ff;
    s.n_vocab = p.n_vocab;
    s.n_ctx = p.n_ctx;
    s.rope_freq_base = p.rope_freq_base;
    s.embd_type = GgmlType::Q8_0;
    s.tied = true;
    return s;
  }
  throw std::invalid_argument("unknown synthetic model '" + std::string(name) +
                              "' (known: " + synthetic_preset_names() + ")");
}

GgufWriter make_synthetic_model(const SyntheticSpec& s, const GgufFile* vocab_from) {
  const ArchitectureTraits* traits = find_architecture(s.arch);
  if (!traits) {
    throw std::invalid_argument("synthetic model: unknown architecture '" + s.arch +
                                "' (known: " + known_architectures() + ")");
  }
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.set("general.architecture", GgufValue::str(s.arch));
  w.set("general.name", GgufValue::str(s.name));
  w.set(p + "embedding_length", GgufValue::u32(uint32_t(s.n_embd)));
  w.set(p + "block_count", GgufValue::u32(uint32_t(s.n_layer)));
  w.set(p + "attention.head_count", GgufValue::u32(uint32_t(s.n_head)));
  w.set(p + "attention.head_count_kv", GgufValue::u32(uint32_t(s.n_head_kv)));
  w.set(p + "feed_forward_length", GgufValue::u32(uint32_t(s.n_ff)));
  w.set(p + "context_length", GgufValue::u32(uint32_t(s.n_ctx)));
  w.set(p + "rope.dimension_count", GgufValue::u32(uint32_t(head_dim)));
  w.set(p + "rope.freq_base", GgufValue::f32(s.rope_freq_base));
  w.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(s.rms_eps));
  if (s.head_dim > 0) {
    w.set(p + "attention.key_length", GgufValue::u32(uint32_t(head_dim)));
    w.set(p + "attention.value_length", GgufValue::u32(uint32_t(head_dim)));
  }
  if (s.sliding_window > 0) {
    w.set(p + "attention.sliding_window", GgufValue::u32(uint32_t(s.sliding_window)));
  }
  if (vocab_from) {
    for (const auto& [key, value] : vocab_from->metadata()) {
      // (An array clchat skipped while reading is not copied: nothing uses it.)
      const auto* a = std::get_if<GgufArray>(&value.data);
      if (key.rfind("tokenizer.", 0) == 0 && !(a && a->n_unread)) w.set(key, value);
    }
    if (vocab_from->has("tokenizer.ggml.tokens") &&
        vocab_from->get_array("tokenizer.ggml.tokens").items.size() != size_t(s.n_vocab)) {
      throw std::invalid_argument("--vocab-from: vocabulary size differs from the model's " +
                                  std::to_string(s.n_vocab));
    }
  }
  if (s.mix && s.mix->file_type >= 0) {
    w.set("general.file_type", GgufValue::u32(uint32_t(s.mix->file_type)));
  }
  const MixModel mix_model{s.n_layer, s.n_head / s.n_head_kv, s.tied};
  // The matrix `name` of layer il (-1: none) with rows of n_in values.
  auto type_of = [&](const std::string& name, uint64_t n_in, int il) {
    if (s.mix) return mix_tensor_type(*s.mix, name, n_in, il, mix_model);
    const bool embd = name == "token_embd.weight" || name == "output.weight";
    return embd ? s.embd_type : s.layer_type;
  };
  Rng rng{s.seed};
  const uint64_t embd = uint64_t(s.n_embd), ff = uint64_t(s.n_ff), hd = uint64_t(head_dim);
  const uint64_t nq = hd * uint64_t(s.n_head), kv = hd * uint64_t(s.n_head_kv);
  const bool fused = s.arch == "phi3";  // the layout its converter writes
  auto matrix = [&](const std::string& name, int il, uint64_t n_in, uint64_t rows, float std) {
    add_matrix(w, rng, name, type_of(name, n_in, il), n_in, rows, std);
  };
  matrix("token_embd.weight", -1, embd, uint64_t(s.n_vocab), 1.0f);
  add_norm(w, rng, "output_norm.weight", embd);
  if (!s.tied)
    matrix("output.weight", -1, embd, uint64_t(s.n_vocab), 1.0f / std::sqrt(float(embd)));
  if (s.rope_freqs) {
    const std::vector<float> f = llama3_rope_factors(head_dim, s.rope_freq_base);
    w.add_tensor("rope_freqs.weight", GgmlType::F32, {f.size()},
                 quantize_matrix(GgmlType::F32, f, f.size()));
  }
  const float std_in = 1.0f / std::sqrt(float(embd));
  const float std_ff = 1.0f / std::sqrt(float(ff));
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add_norm(w, rng, b + "attn_norm.weight", embd);
    if (fused) {  // Phi-3: [Wq; Wk; Wv] as one tensor
      matrix(b + "attn_qkv.weight", il, embd, nq + 2 * kv, std_in);
    } else {
      matrix(b + "attn_q.weight", il, embd, nq, std_in);
      matrix(b + "attn_k.weight", il, embd, kv, std_in);
      matrix(b + "attn_v.weight", il, embd, kv, std_in);
    }
    matrix(b + "attn_output.weight", il, nq, embd, 1.0f / std::sqrt(float(nq)));
    if (traits->qkv_bias) {
      add_bias(w, rng, b + "attn_q.bias", nq);
      add_bias(w, rng, b + "attn_k.bias", kv);
      add_bias(w, rng, b + "attn_v.bias", kv);
    }
    if (traits->qk_norm) {
      add_norm(w, rng, b + "attn_q_norm.weight", hd);
      add_norm(w, rng, b + "attn_k_norm.weight", hd);
    }
    if (traits->post_norms) {
      add_norm(w, rng, b + "post_attention_norm.weight", embd);
      add_norm(w, rng, b + "post_ffw_norm.weight", embd);
    }
    add_norm(w, rng, b + "ffn_norm.weight", embd);
    if (fused) {  // Phi-3: [Wgate; Wup] as one ffn_up
      matrix(b + "ffn_up.weight", il, embd, 2 * ff, std_in);
    } else {
      matrix(b + "ffn_gate.weight", il, embd, ff, std_in);
      matrix(b + "ffn_up.weight", il, embd, ff, std_in);
    }
    matrix(b + "ffn_down.weight", il, ff, embd, std_ff);
  }
  return w;
}

std::string write_synthetic_model_tmp(const SyntheticSpec& spec) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("clchat-synth-" + std::to_string(::getpid()) + "-" +
                                   std::to_string(counter++) + ".gguf"))
                               .string();
  make_synthetic_model(spec).write(path);
  return path;
}

}  // namespace clchat
