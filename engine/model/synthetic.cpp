#include "engine/model/synthetic.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "engine/gguf/quant.h"

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

}  // namespace

namespace {

// The shapes of real llama-architecture models (their GGUF metadata): name,
// embd, layers, heads, KV heads, FFN, vocab, context, RoPE base.
struct Preset {
  const char* name;
  int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_freq_base;
};
constexpr Preset k_presets[] = {
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f},
    {"smollm2-360m", 960, 32, 15, 5, 2560, 49152, 8192, 100000.0f},
    {"smollm2-1.7b", 2048, 24, 32, 32, 8192, 49152, 8192, 130000.0f},
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f},
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
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("general.name", GgufValue::str(s.name));
  w.set("llama.embedding_length", GgufValue::u32(uint32_t(s.n_embd)));
  w.set("llama.block_count", GgufValue::u32(uint32_t(s.n_layer)));
  w.set("llama.attention.head_count", GgufValue::u32(uint32_t(s.n_head)));
  w.set("llama.attention.head_count_kv", GgufValue::u32(uint32_t(s.n_head_kv)));
  w.set("llama.feed_forward_length", GgufValue::u32(uint32_t(s.n_ff)));
  w.set("llama.context_length", GgufValue::u32(uint32_t(s.n_ctx)));
  w.set("llama.rope.dimension_count", GgufValue::u32(uint32_t(s.n_embd / s.n_head)));
  w.set("llama.rope.freq_base", GgufValue::f32(s.rope_freq_base));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(s.rms_eps));
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
  const uint64_t embd = uint64_t(s.n_embd), ff = uint64_t(s.n_ff);
  const uint64_t kv = uint64_t(s.n_embd / s.n_head * s.n_head_kv);
  auto matrix = [&](const std::string& name, int il, uint64_t n_in, uint64_t rows, float std) {
    add_matrix(w, rng, name, type_of(name, n_in, il), n_in, rows, std);
  };
  matrix("token_embd.weight", -1, embd, uint64_t(s.n_vocab), 1.0f);
  add_norm(w, rng, "output_norm.weight", embd);
  if (!s.tied)
    matrix("output.weight", -1, embd, uint64_t(s.n_vocab), 1.0f / std::sqrt(float(embd)));
  const float std_in = 1.0f / std::sqrt(float(embd));
  const float std_ff = 1.0f / std::sqrt(float(ff));
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add_norm(w, rng, b + "attn_norm.weight", embd);
    matrix(b + "attn_q.weight", il, embd, embd, std_in);
    matrix(b + "attn_k.weight", il, embd, kv, std_in);
    matrix(b + "attn_v.weight", il, embd, kv, std_in);
    matrix(b + "attn_output.weight", il, embd, embd, std_in);
    add_norm(w, rng, b + "ffn_norm.weight", embd);
    matrix(b + "ffn_gate.weight", il, embd, ff, std_in);
    matrix(b + "ffn_up.weight", il, embd, ff, std_in);
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
