// Weight-type mixes (engine/model/quant_mix.h) and the synthetic models built
// with them. The decisive check is data: llama-quantize's own Q4_K_M of
// SmolLM2-135M (shared/models/SmolLM2-135M-Instruct.Q4_K_M.gguf) must get,
// tensor by tensor, the type the rule gives, and so must the synthetic
// smollm2-135m model built with q4_k_m. The other mixes' counts below were
// worked out by hand from the rule's table in quant_mix.cpp for SmolLM2's
// shape (30 layers, rows of 576 except ffn_down's 1536, GQA 3, tied).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "engine/model/model.h"
#include "engine/model/quant_mix.h"
#include "engine/model/synthetic.h"
#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

const char* k_q4_k_m_file = "models/SmolLM2-135M-Instruct.Q4_K_M.gguf";

QuantMix mix(const char* name) {
  const auto m = quant_mix_from_name(name);
  EXPECT_TRUE(m.has_value()) << name;
  return m.value_or(QuantMix{"", GgmlType::F32, false, -1});
}

// The layer a tensor name belongs to ("blk.12.ffn_up.weight" -> 12), or -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::stoi(name.substr(4));
}

TEST(QuantMixRealFile, SmolLM2Q4KMGetsTheRulesTypeForEveryTensor) {
  const Model m = load_model(test::shared_file(k_q4_k_m_file));
  const MixModel shape{m.config.n_layer, m.config.n_head / m.config.n_head_kv,
                       m.config.tied_embeddings};
  ASSERT_EQ(shape.n_layer, 30);
  ASSERT_EQ(shape.n_gqa, 3);
  ASSERT_TRUE(shape.tied);
  const QuantMix q4_k_m = mix("q4_k_m");
  std::map<GgmlType, int> counts;
  for (const GgufTensor& t : m.file->tensors()) {
    SCOPED_TRACE(t.name);
    ++counts[t.type];
    if (t.dims.size() == 1) {  // norms: never quantized
      EXPECT_EQ(t.type, GgmlType::F32);
      continue;
    }
    EXPECT_EQ(ggml_type_name(mix_tensor_type(q4_k_m, t.name, t.dims[0], layer_of(t.name), shape)),
              std::string(ggml_type_name(t.type)));
  }
  // The file is the one SOURCE.md describes: 166 Q5_0, 16 Q4_K, 14 Q6_K, 15 Q8_0, 61 F32.
  EXPECT_EQ(counts, (std::map<GgmlType, int>{{GgmlType::F32, 61},
                                             {GgmlType::Q5_0, 166},
                                             {GgmlType::Q8_0, 15},
                                             {GgmlType::Q4_K, 16},
                                             {GgmlType::Q6_K, 14}}));
  EXPECT_EQ(m.file->get_uint("general.file_type"), uint64_t(q4_k_m.file_type));
}

TEST(QuantMixRealFile, SyntheticSmolLM2Q4KMHasTheFilesTypesTensorByTensor) {
  const auto real = GgufFile::open(test::shared_file(k_q4_k_m_file));
  SyntheticSpec spec = synthetic_preset("smollm2-135m");
  spec.mix = mix("q4_k_m");
  test::TempDir dir;
  const std::string path = dir.file("synthetic-q4_k_m.gguf");
  make_synthetic_model(spec).write(path);
  const auto synth = GgufFile::open(path);
  ASSERT_EQ(synth->tensors().size(), real->tensors().size());
  for (const GgufTensor& t : real->tensors()) {
    SCOPED_TRACE(t.name);
    const GgufTensor* s = synth->find_tensor(t.name);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->dims, t.dims);
    EXPECT_EQ(ggml_type_name(s->type), std::string(ggml_type_name(t.type)));
  }
  EXPECT_EQ(synth->get_uint("general.file_type"), real->get_uint("general.file_type"));
  // Both describe themselves alike.
  const Model a = load_model(path);
  const Model b = load_model(test::shared_file(k_q4_k_m_file));
  EXPECT_EQ(describe_weight_type(a), "Q4_K_M mix");
  EXPECT_EQ(describe_weight_type(b), "Q4_K_M mix");
  EXPECT_EQ(layer_weight_types(a), layer_weight_types(b));
}

// Type counts over SmolLM2's 211 matrices (210 layer matrices and the tied
// token_embd), from the rule's table by hand.
std::map<GgmlType, int> smollm2_counts(const QuantMix& q) {
  const SyntheticSpec s = synthetic_preset("smollm2-135m");
  const MixModel shape{s.n_layer, s.n_head / s.n_head_kv, s.tied};
  std::map<GgmlType, int> counts;
  ++counts[mix_tensor_type(q, "token_embd.weight", 576, -1, shape)];
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"}) {
      ++counts[mix_tensor_type(q, b + name + ".weight", 576, il, shape)];
    }
    ++counts[mix_tensor_type(q, b + "ffn_down.weight", 1536, il, shape)];
  }
  return counts;
}

TEST(QuantMixRule, EveryMixOnSmolLM2sShape) {
  using T = GgmlType;
  using C = std::map<GgmlType, int>;
  struct Case {
    const char* name;
    C counts;
  };
  const Case cases[] = {
      // more_bits: 14 of 30 layers; attn_v Q6_K -> Q8_0, others Q4_K -> Q5_0.
      {"q4_k_m", C{{T::Q5_0, 166}, {T::Q4_K, 16}, {T::Q6_K, 14}, {T::Q8_0, 15}}},
      {"q5_k_m", C{{T::Q5_1, 166}, {T::Q5_K, 16}, {T::Q6_K, 14}, {T::Q8_0, 15}}},
      // attn_v of layers 0..3 and ffn_down of layers 0..2 (30/8 = 3) get Q5_K.
      {"q4_k_s", C{{T::Q5_0, 176}, {T::Q5_1, 4}, {T::Q5_K, 3}, {T::Q4_K, 27}, {T::Q8_0, 1}}},
      {"q5_k_s", C{{T::Q5_1, 180}, {T::Q5_K, 30}, {T::Q8_0, 1}}},
      {"q3_k_s", C{{T::Q4_0, 180}, {T::Q3_K, 30}, {T::Q8_0, 1}}},
      // attn_v: layers 0, 1 Q5_K (-> Q5_1), the rest Q4_K (-> Q5_0); attn_output
      // Q4_K (-> Q5_0); ffn_down: layer 0 (30/16 = 1) Q5_K, the rest Q4_K.
      {"q3_k_m",
       C{{T::Q4_0, 120}, {T::Q5_0, 58}, {T::Q5_1, 2}, {T::Q5_K, 1}, {T::Q4_K, 29}, {T::Q8_0, 1}}},
      {"q3_k_l", C{{T::Q4_0, 120}, {T::Q5_1, 60}, {T::Q5_K, 30}, {T::Q8_0, 1}}},
      // GQA 3 < 4: attn_v Q3_K; ffn_down and attn_output Q3_K; 576-rows -> Q4_0.
      {"q2_k", C{{T::Q4_0, 180}, {T::Q3_K, 30}, {T::Q8_0, 1}}},
      {"q6_k", C{{T::Q8_0, 181}, {T::Q6_K, 30}}},
      // ffn_down of layers 0..2 Q5_K; the lm_head Q6_K -> Q8_0.
      {"iq4_nl", C{{T::IQ4_NL, 207}, {T::Q5_K, 3}, {T::Q8_0, 1}}},
      {"iq4_xs", C{{T::IQ4_NL, 180}, {T::IQ4_XS, 27}, {T::Q5_K, 3}, {T::Q8_0, 1}}},
      // single types: the layer matrices (with the fallback), embedding Q8_0
      {"q4_0", C{{T::Q4_0, 210}, {T::Q8_0, 1}}},
      {"q4_k", C{{T::Q5_0, 180}, {T::Q4_K, 30}, {T::Q8_0, 1}}},
      {"q5_k", C{{T::Q5_1, 180}, {T::Q5_K, 30}, {T::Q8_0, 1}}},
      {"q3_k", C{{T::Q4_0, 180}, {T::Q3_K, 30}, {T::Q8_0, 1}}},
      {"bf16", C{{T::BF16, 210}, {T::Q8_0, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(smollm2_counts(mix(c.name)), c.counts);
  }
}

// Rows of 256-multiples (no fallback), untied, GQA 4: the rule's own types.
TEST(QuantMixRule, UntiedModelWithWholeSuperBlocks) {
  const MixModel shape{16, 4, false};
  const QuantMix q4_k_m = mix("q4_k_m");
  auto type = [&](const QuantMix& q, const std::string& name, int il) {
    return mix_tensor_type(q, name, 512, il, shape);
  };
  EXPECT_EQ(type(q4_k_m, "output.weight", -1), GgmlType::Q6_K);
  EXPECT_EQ(type(q4_k_m, "token_embd.weight", -1), GgmlType::Q4_K);  // untied: the default
  // more_bits(il, 16): il < 2, il >= 14, (il - 2) % 3 == 2.
  for (int il = 0; il < 16; ++il) {
    const bool more = il < 2 || il >= 14 || (il - 2) % 3 == 2;
    const GgmlType want = more ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(type(q4_k_m, "blk." + std::to_string(il) + ".attn_v.weight", il), want) << il;
    EXPECT_EQ(type(q4_k_m, "blk." + std::to_string(il) + ".ffn_down.weight", il), want) << il;
    EXPECT_EQ(type(q4_k_m, "blk." + std::to_string(il) + ".attn_q.weight", il), GgmlType::Q4_K);
    EXPECT_EQ(type(q4_k_m, "blk." + std::to_string(il) + ".attn_output.weight", il),
              GgmlType::Q4_K);
  }
  // GQA >= 4 lifts attn_v: Q2_K to Q4_K, IQ4_XS to Q5_K.
  EXPECT_EQ(type(mix("q2_k"), "blk.3.attn_v.weight", 3), GgmlType::Q4_K);
  EXPECT_EQ(type(mix("q2_k"), "blk.3.attn_output.weight", 3), GgmlType::Q3_K);
  EXPECT_EQ(type(mix("q2_k"), "blk.3.attn_q.weight", 3), GgmlType::Q2_K);
  EXPECT_EQ(type(mix("iq4_xs"), "blk.9.attn_v.weight", 9), GgmlType::Q5_K);
  EXPECT_EQ(type(mix("iq4_xs"), "blk.9.ffn_down.weight", 9), GgmlType::IQ4_XS);
  EXPECT_EQ(type(mix("iq4_xs"), "output.weight", -1), GgmlType::Q6_K);
  EXPECT_EQ(type(mix("q6_k"), "output.weight", -1), GgmlType::Q6_K);
  EXPECT_EQ(type(mix("q8_0"), "output.weight", -1), GgmlType::Q8_0);  // single type
}

TEST(QuantMixRule, RowsThatFitNoBlockFallBackToF16) {
  const MixModel shape{4, 1, true};
  // 80 values: not whole super-blocks, nor whole 32-value blocks.
  EXPECT_EQ(mix_tensor_type(mix("q4_k_m"), "blk.1.attn_q.weight", 80, 1, shape), GgmlType::F16);
  EXPECT_EQ(mix_tensor_type(mix("q2_k"), "blk.1.ffn_up.weight", 96, 1, shape), GgmlType::Q4_0);
  EXPECT_EQ(mix_tensor_type(mix("iq4_xs"), "blk.1.ffn_up.weight", 96, 1, shape), GgmlType::IQ4_NL);
  EXPECT_EQ(mix_tensor_type(mix("q5_k_s"), "blk.1.ffn_up.weight", 96, 1, shape), GgmlType::Q5_1);
  EXPECT_EQ(mix_tensor_type(mix("q6_k"), "blk.1.ffn_up.weight", 96, 1, shape), GgmlType::Q8_0);
}

TEST(QuantMixNames, LookupIsCaseInsensitiveAndFileTypesAreLlamas) {
  EXPECT_EQ(std::string(mix("Q4_K_M").name), "q4_k_m");
  EXPECT_FALSE(quant_mix_from_name("q4_k_x").has_value());
  EXPECT_FALSE(quant_mix_from_name("").has_value());
  EXPECT_FALSE(quant_mix_from_name("q2_k_s").has_value());  // needs an importance matrix
  // llama.h's llama_ftype ids.
  EXPECT_EQ(mix("q4_k_m").file_type, 15);
  EXPECT_EQ(mix("q2_k").file_type, 10);
  EXPECT_EQ(mix("iq4_xs").file_type, 30);
  EXPECT_EQ(mix("bf16").file_type, 32);
  EXPECT_EQ(mix("q4_k").file_type, -1);  // no llama file type is "all Q4_K"
  EXPECT_EQ(llama_file_type_name(15), "Q4_K_M");
  EXPECT_EQ(llama_file_type_name(7), "Q8_0");
  EXPECT_EQ(llama_file_type_name(4), std::nullopt);
  EXPECT_NE(quant_mix_names().find("q3_k_l"), std::string::npos);
}

// A single-type mix builds the model the layer_type / embd_type path builds
// (same types, same weights): only general.file_type is new.
TEST(QuantMixSynthetic, SingleTypeMatchesTheLayerTypePath) {
  SyntheticSpec plain;
  plain.layer_type = GgmlType::Q4_0;
  plain.embd_type = GgmlType::Q8_0;
  SyntheticSpec mixed = plain;
  mixed.mix = mix("q4_0");
  test::TempDir dir;
  make_synthetic_model(plain).write(dir.file("plain.gguf"));
  make_synthetic_model(mixed).write(dir.file("mixed.gguf"));
  const auto a = GgufFile::open(dir.file("plain.gguf"));
  const auto b = GgufFile::open(dir.file("mixed.gguf"));
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const GgufTensor& ta = a->tensors()[i];
    const GgufTensor& tb = b->tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.type, tb.type) << ta.name;
    ASSERT_EQ(ta.n_bytes, tb.n_bytes) << ta.name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0) << ta.name;
  }
  EXPECT_FALSE(a->has("general.file_type"));
  EXPECT_EQ(b->get_uint("general.file_type"), 2u);  // LLAMA_FTYPE_MOSTLY_Q4_0
}

// Without a llama file type to name (the single type q4_k has none), a mixed
// model is described by its layer types, most common first.
TEST(QuantMixSynthetic, UnnamedMixIsDescribedByItsTypes) {
  SyntheticSpec spec;
  spec.n_ff = 256;  // ffn_down rows of 256 take Q4_K; the rows of 64 fall back to Q5_0
  spec.mix = mix("q4_k");
  test::TempDir dir;
  make_synthetic_model(spec).write(dir.file("q4_k.gguf"));
  const Model m = load_model(dir.file("q4_k.gguf"));
  EXPECT_FALSE(m.file->has("general.file_type"));
  EXPECT_EQ(m.tensors.layers[0].ffn_down->type, GgmlType::Q4_K);
  EXPECT_EQ(m.tensors.layers[0].wq->type, GgmlType::Q5_0);
  EXPECT_EQ(m.tensors.token_embd->type, GgmlType::Q8_0);
  EXPECT_EQ(describe_weight_type(m), "Q5_0, Q4_K");
}

}  // namespace
}  // namespace clchat
