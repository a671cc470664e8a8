// load_model(): hyper-parameters and tensor lookup on the three shared models
// (expected values from models/SOURCE.md) and on fixture models of every
// weight type, tied and untied, including the documented defaults for keys a
// file may leave out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using test::TempDir;
using test::TinyModel;
using test::TinyModelSpec;

struct Expected {
  int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, n_rot;
  float rope_freq_base;
  bool tied;
  const char* weight_type;
};

void expect_config(const Model& m, const Expected& e) {
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_embd, e.n_embd);
  EXPECT_EQ(c.n_layer, e.n_layer);
  EXPECT_EQ(c.n_head, e.n_head);
  EXPECT_EQ(c.n_head_kv, e.n_head_kv);
  EXPECT_EQ(c.head_dim, e.head_dim);
  EXPECT_EQ(c.n_embd_kv(), e.n_head_kv * e.head_dim);
  EXPECT_EQ(c.n_ff, e.n_ff);
  EXPECT_EQ(c.n_vocab, e.n_vocab);
  EXPECT_EQ(c.n_ctx_train, e.n_ctx_train);
  EXPECT_EQ(c.n_rot, e.n_rot);
  EXPECT_EQ(c.rope_freq_base, e.rope_freq_base);
  EXPECT_EQ(c.tied_embeddings, e.tied);
  EXPECT_EQ(describe_weight_type(m), e.weight_type);
}

// Every tensor pointer has the right name and lies in the model's own file.
void expect_tensors_wired(const Model& m) {
  const ModelTensors& t = m.tensors;
  ASSERT_NE(t.token_embd, nullptr);
  EXPECT_EQ(t.token_embd->name, "token_embd.weight");
  EXPECT_EQ(t.token_embd, m.file->find_tensor("token_embd.weight"));
  EXPECT_EQ(t.output_norm->name, "output_norm.weight");
  EXPECT_EQ(t.output_norm->type, GgmlType::F32);
  if (m.config.tied_embeddings) {
    EXPECT_EQ(t.output, t.token_embd);
    EXPECT_EQ(m.file->find_tensor("output.weight"), nullptr);
  } else {
    ASSERT_NE(t.output, nullptr);
    EXPECT_EQ(t.output->name, "output.weight");
    EXPECT_NE(t.output, t.token_embd);
  }
  ASSERT_EQ(t.layers.size(), size_t(m.config.n_layer));
  const uint64_t embd = uint64_t(m.config.n_embd), kv = uint64_t(m.config.n_embd_kv());
  const uint64_t ff = uint64_t(m.config.n_ff);
  for (size_t il = 0; il < t.layers.size(); ++il) {
    const LayerTensors& l = t.layers[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    struct Want {
      const GgufTensor* t;
      const char* name;
      std::vector<uint64_t> dims;
    };
    for (const Want& w :
         {Want{l.attn_norm, "attn_norm.weight", {embd}}, Want{l.wq, "attn_q.weight", {embd, embd}},
          Want{l.wk, "attn_k.weight", {embd, kv}}, Want{l.wv, "attn_v.weight", {embd, kv}},
          Want{l.wo, "attn_output.weight", {embd, embd}},
          Want{l.ffn_norm, "ffn_norm.weight", {embd}},
          Want{l.ffn_gate, "ffn_gate.weight", {embd, ff}},
          Want{l.ffn_up, "ffn_up.weight", {embd, ff}},
          Want{l.ffn_down, "ffn_down.weight", {ff, embd}}}) {
      ASSERT_NE(w.t, nullptr) << b << w.name;
      EXPECT_EQ(w.t->name, b + w.name);
      EXPECT_EQ(w.t->dims, w.dims) << w.t->name;
      EXPECT_EQ(w.t, m.file->find_tensor(b + w.name));
    }
  }
}

// ---- shared models ---------------------------------------------------------------------

TEST(ModelLoad, SmolLM2) {
  const std::string path = test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const Model m = load_model(path);
  EXPECT_EQ(m.file->path(), path);
  expect_config(m, {576, 30, 9, 3, 64, 1536, 49152, 8192, 64, 100000.0f, true, "Q4_1"});
  EXPECT_NEAR(m.config.rms_eps, 1e-5f, 1e-11);
  EXPECT_FALSE(m.config.name.empty());
  expect_tensors_wired(m);
  EXPECT_EQ(m.tensors.token_embd->type, GgmlType::Q8_0);
  EXPECT_EQ(m.tensors.layers[29].ffn_down->type, GgmlType::Q4_1);
}

TEST(ModelLoad, Stories260K) {
  const Model m = load_model(test::shared_file("models/stories260K.gguf"));
  // No rope.freq_base key: the default 10000 applies.
  expect_config(m, {64, 5, 8, 4, 8, 172, 512, 2048, 8, 10000.0f, false, "F32"});
  EXPECT_NEAR(m.config.rms_eps, 1e-5f, 1e-11);
  expect_tensors_wired(m);
  EXPECT_EQ(m.tensors.output->dims, (std::vector<uint64_t>{64, 512}));
}

TEST(ModelLoad, TinyRandom) {
  const Model m = load_model(test::shared_file("models/llama-2-tiny-random.gguf"));
  // SOURCE.md does not list its rope base: whatever the file says, else 10000.
  const float rope_base = float(m.file->opt_float("llama.rope.freq_base").value_or(10000.0));
  expect_config(m, {8, 1, 2, 2, 4, 32, 32000, 4096, 4, rope_base, false, "F16"});
  expect_tensors_wired(m);
  EXPECT_EQ(m.tensors.token_embd->type, GgmlType::F16);
  EXPECT_EQ(m.tensors.output_norm->type, GgmlType::F32);
  EXPECT_EQ(m.tensors.layers[0].attn_norm->type, GgmlType::F32);
}

// ---- fixture models ---------------------------------------------------------------------

struct FixtureCase {
  GgmlType type;
  bool tied;
};

class ModelLoadFixture : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(ModelLoadFixture, ConfigAndTensorsMatchTheSpec) {
  TempDir dir;
  TinyModelSpec spec;
  spec.weight_type = GetParam().type;
  spec.tied = GetParam().tied;
  spec.n_embd = 64;
  spec.n_layer = 3;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.n_ff = 160;
  spec.n_vocab = 300;
  spec.n_ctx_train = 512;
  spec.rope_freq_base = 500000.0f;
  spec.rms_eps = 1e-6f;
  spec.name = "fixture model";
  const TinyModel tm = test::make_tiny_model(spec);
  const Model m = load_model(tm.write(dir.file("fixture.gguf")));
  expect_config(m, {64, 3, 8, 2, 8, 160, 300, 512, 8, 500000.0f, spec.tied,
                    ggml_type_name(spec.weight_type)});
  EXPECT_EQ(m.config.rms_eps, 1e-6f);
  EXPECT_EQ(m.config.name, "fixture model");
  expect_tensors_wired(m);
  EXPECT_EQ(m.file->tensors().size(), tm.tensors.size());
  EXPECT_EQ(m.file->tensors().size(), (spec.tied ? 2u : 3u) + 3u * 9u);
  // The bytes behind every tensor are the fixture's.
  for (const auto& want : tm.tensors) {
    const GgufTensor* t = m.file->find_tensor(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->type, want.type) << want.name;
    ASSERT_EQ(t->n_bytes, want.data.size()) << want.name;
    EXPECT_EQ(std::memcmp(t->data, want.data.data(), t->n_bytes), 0) << want.name;
  }
  EXPECT_EQ(m.tensors.layers[2].wk->type, spec.weight_type);
  EXPECT_EQ(m.tensors.layers[2].ffn_norm->type, GgmlType::F32);
}

INSTANTIATE_TEST_SUITE_P(
    Types, ModelLoadFixture,
    ::testing::Values(FixtureCase{GgmlType::F32, false}, FixtureCase{GgmlType::F32, true},
                      FixtureCase{GgmlType::F16, false}, FixtureCase{GgmlType::F16, true},
                      FixtureCase{GgmlType::Q4_0, false}, FixtureCase{GgmlType::Q4_0, true},
                      FixtureCase{GgmlType::Q4_1, false}, FixtureCase{GgmlType::Q4_1, true},
                      FixtureCase{GgmlType::Q8_0, false}, FixtureCase{GgmlType::Q8_0, true}),
    [](const auto& info) {
      return std::string(ggml_type_name(info.param.type)) + (info.param.tied ? "_tied" : "_untied");
    });

TEST(ModelLoadDefaults, OptionalKeysFallBackToDocumentedDefaults) {
  TempDir dir;
  TinyModelSpec spec;
  spec.n_head = 4;
  spec.n_head_kv = 4;  // so that leaving out head_count_kv (= n_head) still fits attn_k
  TinyModel tm = test::make_tiny_model(spec);
  for (const char* key : {"general.name", "llama.attention.head_count_kv", "llama.context_length",
                          "llama.rope.dimension_count", "llama.rope.freq_base",
                          "llama.attention.layer_norm_rms_epsilon"}) {
    ASSERT_TRUE(tm.erase_metadata(key)) << key;
  }
  const Model m = load_model(tm.write(dir.file("no-optional-keys.gguf")));
  EXPECT_EQ(m.config.name, "no-optional-keys");  // the file's stem
  EXPECT_EQ(m.config.n_head_kv, 4);
  EXPECT_EQ(m.config.n_ctx_train, 2048);
  EXPECT_EQ(m.config.n_rot, 16);  // head_dim = 64 / 4
  EXPECT_EQ(m.config.rope_freq_base, 10000.0f);
  EXPECT_EQ(m.config.rms_eps, 1e-5f);
}

// RoPE position scaling as llama.cpp reads it: rope.scaling.type linear with
// its factor, a factor without a type (linear), the older rope.scale_linear,
// factor 0 (none); another type is refused. A scaled model is still the llama
// graph (the scale lives in the RoPE table).
TEST(ModelLoadDefaults, RopeScalingKeys) {
  TempDir dir;
  struct Case {
    const char* type;  // null: no type key
    const char* factor_key;
    float factor;
    float scale;  // expected rope_freq_scale
  };
  for (const Case& k : {Case{"linear", "llama.rope.scaling.factor", 4.0f, 0.25f},
                        Case{nullptr, "llama.rope.scaling.factor", 8.0f, 0.125f},
                        Case{nullptr, "llama.rope.scale_linear", 2.0f, 0.5f},
                        Case{"linear", "llama.rope.scaling.factor", 0.0f, 1.0f},
                        Case{"none", "llama.rope.scaling.factor", 4.0f, 1.0f}}) {
    SCOPED_TRACE(std::string(k.type ? k.type : "(no type)") + " " + k.factor_key);
    TinyModel tm = test::make_tiny_model(TinyModelSpec{});
    if (k.type) tm.set_metadata("llama.rope.scaling.type", GgufValue::str(k.type));
    tm.set_metadata(k.factor_key, GgufValue::f32(k.factor));
    const Model m = load_model(tm.write(dir.file("scaled.gguf")));
    EXPECT_EQ(m.config.rope_freq_scale, k.scale);
    EXPECT_TRUE(m.config.plain_llama());
  }
  TinyModel yarn = test::make_tiny_model(TinyModelSpec{});
  yarn.set_metadata("llama.rope.scaling.type", GgufValue::str("yarn"));
  EXPECT_THROW(load_model(yarn.write(dir.file("yarn.gguf"))), GgufError);
}

TEST(ModelLoadDefaults, PartialRopeAndWiderIntegerTypes) {
  TempDir dir;
  TinyModelSpec spec;
  spec.n_rot = 8;  // head_dim 16: only the first 8 dimensions rotate
  TinyModel tm = test::make_tiny_model(spec);
  // Hyper-parameters as u64 / i32 / u8 instead of u32, eps as f64: any fitting number reads.
  tm.set_metadata("llama.embedding_length", GgufValue::u64(64));
  tm.set_metadata("llama.block_count", GgufValue::i32(2));
  tm.set_metadata("llama.attention.head_count", GgufValue{GgufValueType::UINT8, uint64_t{4}});
  tm.set_metadata("llama.attention.layer_norm_rms_epsilon",
                  GgufValue{GgufValueType::FLOAT64, 1e-6});
  tm.set_metadata("llama.rope.freq_base", GgufValue::u32(20000));
  const Model m = load_model(tm.write(dir.file("wide.gguf")));
  EXPECT_EQ(m.config.n_rot, 8);
  EXPECT_EQ(m.config.head_dim, 16);
  EXPECT_EQ(m.config.n_embd, 64);
  EXPECT_EQ(m.config.n_layer, 2);
  EXPECT_EQ(m.config.n_head, 4);
  EXPECT_EQ(m.config.rms_eps, 1e-6f);
  EXPECT_EQ(m.config.rope_freq_base, 20000.0f);
}

TEST(ModelLoadDefaults, WithoutTokenizerAndWithOtherEmbeddingType) {
  TempDir dir;
  TinyModelSpec spec;
  spec.tokenizer = false;  // the loader itself does not need the vocabulary
  spec.weight_type = GgmlType::Q4_0;
  spec.embd_type = GgmlType::Q8_0;
  spec.n_vocab = 77;
  spec.tied = true;
  TinyModel tm = test::make_tiny_model(spec);
  // Mixed layer types: described by the file's general.file_type (the
  // fixture writes MOSTLY_Q4_0); the types, most common first, beside it.
  for (int il = 0; il < spec.n_layer; ++il) {
    const std::string name = "blk." + std::to_string(il) + ".ffn_down.weight";
    *tm.find_tensor(name) =
        test::make_random_tensor(name, GgmlType::Q8_0, {96, 64}, 5u + uint32_t(il), -1, 1);
  }
  const Model m = load_model(tm.write(dir.file("mixed.gguf")));
  EXPECT_EQ(m.config.n_vocab, 77);
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.tensors.token_embd->type, GgmlType::Q8_0);
  EXPECT_EQ(m.tensors.output->type, GgmlType::Q8_0);
  EXPECT_EQ(m.tensors.layers[1].ffn_down->type, GgmlType::Q8_0);
  EXPECT_EQ(m.file->get_uint("general.file_type"), 2u);
  EXPECT_EQ(describe_weight_type(m), "Q4_0 mix");
  EXPECT_EQ(layer_weight_types(m),
            (std::vector<std::pair<GgmlType, int>>{{GgmlType::Q4_0, 12}, {GgmlType::Q8_0, 2}}));
  EXPECT_FALSE(m.file->has("tokenizer.ggml.tokens"));
}

TEST(ModelLoadDefaults, GgufV2AndCustomAlignmentLoad) {
  TempDir dir;
  TinyModelSpec spec;
  spec.version = 2;
  spec.alignment = 128;
  spec.weight_type = GgmlType::Q8_0;
  const Model m = load_model(test::make_tiny_model(spec).write(dir.file("v2.gguf")));
  EXPECT_EQ(m.file->version(), 2u);
  EXPECT_EQ(m.file->alignment(), 128u);
  EXPECT_EQ(m.config.n_embd, 64);
  expect_tensors_wired(m);
}

}  // namespace
}  // namespace clchat

namespace clchat {
namespace {

// Phi-3's fused attn_qkv and gate-and-up ffn_up are read as row views: each
// view's bytes are its rows of the fused tensor (q, k, v in that order; the
// gate's rows before the up's, as Hugging Face's Phi3MLP chunks gate_up_proj).
TEST(ModelLoad, FusedTensorsAreSplitIntoRowViews) {
  SyntheticSpec s;
  s.arch = "phi3";
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 96;
  s.n_vocab = 64;
  s.layer_type = GgmlType::Q8_0;
  const std::string path = write_synthetic_model_tmp(s);
  const Model m = load_model(path);
  std::remove(path.c_str());
  const GgufFile& f = *m.file;
  const LayerTensors& l = m.tensors.layers[1];
  const GgufTensor* qkv = f.find_tensor("blk.1.attn_qkv.weight");
  const GgufTensor* up = f.find_tensor("blk.1.ffn_up.weight");
  ASSERT_TRUE(qkv && up);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate.weight"), nullptr);
  const std::vector<uint8_t> fused_qkv = f.tensor_bytes(*qkv), fused_up = f.tensor_bytes(*up);
  const size_t row = fused_qkv.size() / qkv->dims[1];  // bytes per row of 64 values
  auto expect_rows = [&](const GgufTensor* view, const std::vector<uint8_t>& fused, size_t row0,
                         uint64_t rows) {
    SCOPED_TRACE(view->name);
    EXPECT_EQ(view->dims, (std::vector<uint64_t>{64, rows}));
    const std::vector<uint8_t> got = f.tensor_bytes(*view);
    ASSERT_EQ(got.size(), rows * row);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), fused.begin() + long(row0 * row)));
  };
  expect_rows(l.wq, fused_qkv, 0, 64);
  expect_rows(l.wk, fused_qkv, 64, 32);
  expect_rows(l.wv, fused_qkv, 96, 32);
  expect_rows(l.ffn_gate, fused_up, 0, 96);
  expect_rows(l.ffn_up, fused_up, 96, 96);
}

}  // namespace
}  // namespace clchat
