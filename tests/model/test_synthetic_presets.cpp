// Synthetic presets (engine/model/synthetic.h): each preset's shape survives
// the trip through GGUF metadata and the loader (one layer and a small
// vocabulary, so the test stays small), against the published configurations
// of the models they copy; an unknown name lists every preset.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "tests/gguf_fixtures.h"

namespace clchat {
namespace {

struct Published {
  const char* preset;
  int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
  float rope_freq_base;
};
// From the models' config.json (hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
// rope_theta).
constexpr Published k_published[] = {
    {"smollm2-135m", 576, 30, 9, 3, 64, 1536, 49152, 100000.0f},
    {"smollm2-360m", 960, 32, 15, 5, 64, 2560, 49152, 100000.0f},
    {"smollm2-1.7b", 2048, 24, 32, 32, 64, 8192, 49152, 130000.0f},
    {"llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 500000.0f},
};

TEST(SyntheticPresets, ShapesMatchThePublishedConfigsThroughTheLoader) {
  for (const Published& p : k_published) {
    SCOPED_TRACE(p.preset);
    SyntheticSpec spec = synthetic_preset(p.preset);
    EXPECT_EQ(spec.n_layer, p.n_layer);
    EXPECT_EQ(spec.n_vocab, p.n_vocab);
    spec.n_layer = 1;
    spec.n_vocab = 512;
    test::TempDir dir;
    const std::string path = dir.file("preset.gguf");
    make_synthetic_model(spec).write(path);
    const Model m = load_model(path);
    EXPECT_EQ(m.config.n_embd, p.n_embd);
    EXPECT_EQ(m.config.n_head, p.n_head);
    EXPECT_EQ(m.config.n_head_kv, p.n_head_kv);
    EXPECT_EQ(m.config.head_dim, p.head_dim);
    EXPECT_EQ(m.config.n_ff, p.n_ff);
    EXPECT_EQ(m.config.rope_freq_base, p.rope_freq_base);
    EXPECT_TRUE(m.config.tied_embeddings);
  }
}

TEST(SyntheticPresets, UnknownNameListsEveryPreset) {
  try {
    synthetic_preset("llama-9b");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const Published& p : k_published)
      EXPECT_NE(what.find(p.preset), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace clchat
