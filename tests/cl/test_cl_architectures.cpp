// The families of engine/model/architecture.h on the OpenCL test device
// (PoCL unless CLCHAT_TEST_DEVICE says otherwise), each against the CPU
// reference (CpuForward, ||delta|| / ||ref|| <= 1e-3 at every position):
//   - small synthetic models of each family's shape: Llama 3 (RoPE frequency
//     factors), Qwen 2 (q/k/v biases), Qwen 3 (q/k head norms), Phi-3 (fused
//     attn_qkv and gate-and-up ffn_up, read as row views) and Gemma 3
//     (head size 64 with q twice as wide as the embedding, head norms,
//     post-norms, GELU, a 5-position window on layers 0-4 of 6, the
//     embedding scale; once more as a Q4_K_M mix, whose Wv differs in type
//     from Wq and Wk), through decode steps and through prefill in chunks of
//     4 (the window crossing chunks);
//   - kernels/prefill_ops.cl's head_rows, scale_rows and gelu_mul against
//     float64 references (NaN-poisoned outputs);
//   - Gemma 3 270M (real weights, when fetched): greedy ids against
//     reference/gemma3/greedy-gemma3.json up to each prompt's first near-tie.
// The CPU reference itself is checked against float64 NumPy data in
// test_cpu_forward (Gemma 3) and by hand against the published graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cl/forward.h"
#include "engine/cl/prefill.h"
#include "engine/cpu/forward.h"
#include "engine/cpu/ops.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"
#include "tests/cl/greedy_reference.h"

namespace clchat {
namespace {

using test::cl_buffer;
using test::cl_poison;
using test::cl_read;

constexpr double k_logits_tol = 1e-3;

struct TempModel {
  std::string path;
  Model model;
  explicit TempModel(const std::string& p) : path(p), model(load_model(p)) {}
  ~TempModel() { std::filesystem::remove(path); }
};

std::vector<int32_t> some_tokens(int n, int n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((3 + 7919 * i + 31 * i * i) % n_vocab));
  return t;
}

struct ArchCase {
  const char* name;
  const char* arch;
  int head_dim;  // 0: n_embd / n_head
  int sliding_window;
  bool rope_freqs;
  GgmlType layer_type;
  const char* mix = nullptr;  // a quant mix instead of layer_type (types differ within a layer)
};
void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.name; }

SyntheticSpec spec_of(const ArchCase& c) {
  SyntheticSpec s;
  s.name = std::string("test-") + c.name;
  s.arch = c.arch;
  s.head_dim = c.head_dim;
  s.sliding_window = c.sliding_window;
  s.rope_freqs = c.rope_freqs;
  s.n_embd = 128;
  s.n_layer = c.sliding_window > 0 ? 6 : 2;  // Gemma 3's pattern: layer 5 is global
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.n_ctx = 64;
  s.rope_freq_base = 10000.0f;
  s.layer_type = c.layer_type;
  s.embd_type = GgmlType::Q8_0;
  if (c.mix) s.mix = quant_mix_from_name(c.mix);
  s.seed = 77;
  return s;
}

// The CPU reference's logits at position `at` of `tokens` run from 0.
std::vector<float> cpu_logits_at(const Model& model, const std::vector<int32_t>& tokens, int at) {
  CpuForward cpu(model, at + 1);
  std::vector<float> logits;
  for (int p = 0; p <= at; ++p) logits = cpu.forward(tokens[size_t(p)], p);
  return logits;
}

class ClArchitecture : public testing::TestWithParam<ArchCase> {};

TEST_P(ClArchitecture, DecodeAndPrefillLogitsMatchCpu) {
  const TempModel m(write_synthetic_model_tmp(spec_of(GetParam())));
  const ModelConfig& c = m.model.config;
  EXPECT_EQ(c.arch, GetParam().arch);
  if (GetParam().mix) {
    bool split = false;
    for (const auto& l : m.model.tensors.layers) split = split || l.wq->type != l.wv->type;
    ASSERT_TRUE(split) << "the mix should give some layer separate Q, K, V launches";
  }
  const int n = 13;
  const auto tokens = some_tokens(n, c.n_vocab);
  CpuForward cpu(m.model, n);
  std::vector<std::vector<float>> ref;
  for (int p = 0; p < n; ++p) ref.push_back(cpu.forward(tokens[size_t(p)], p));
  {
    SCOPED_TRACE("decode steps");
    ClForward cl(m.model, test::cl_test_runtime(), ClForwardOptions{n, 4});
    for (int p = 0; p < n; ++p) {
      const auto got = cl.decode_logits(tokens[size_t(p)], p);
      EXPECT_LE(test::relative_error(std::vector<float>(got.begin(), got.end()), ref[size_t(p)]),
                k_logits_tol)
          << "position " << p;
    }
  }
  {
    SCOPED_TRACE("prefill in chunks of 4");
    ClForward cl(m.model, test::cl_test_runtime(), ClForwardOptions{n, 4});
    std::vector<float> out;
    cl.prefill_logits(tokens, 0, 0, out);
    const size_t nv = size_t(c.n_vocab);
    ASSERT_EQ(out.size(), size_t(n) * nv);
    for (int p = 0; p < n; ++p) {
      const std::vector<float> got(out.begin() + long(p * nv), out.begin() + long((p + 1) * nv));
      EXPECT_LE(test::relative_error(got, ref[size_t(p)]), k_logits_tol) << "position " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ClArchitecture,
    testing::Values(ArchCase{"llama3", "llama", 0, 0, true, GgmlType::Q4_0},
                    ArchCase{"qwen2", "qwen2", 0, 0, false, GgmlType::Q8_0},
                    ArchCase{"qwen3", "qwen3", 0, 0, false, GgmlType::Q5_1},
                    ArchCase{"phi3", "phi3", 0, 0, false, GgmlType::Q4_1},
                    ArchCase{"gemma3", "gemma3", 64, 5, false, GgmlType::Q5_0},
                    ArchCase{"gemma3_q4_k_m", "gemma3", 64, 5, false, GgmlType::Q5_0, "q4_k_m"}),
    [](const testing::TestParamInfo<ArchCase>& info) { return std::string(info.param.name); });

// ---- head_rows, scale_rows, gelu_mul ------------------------------------------------

// glu_vec: the GLUs' values per work-item (GLU_VEC).
ClKernel ops_kernel(const char* name, int glu_vec = 1) {
  static std::map<int, ClProgram> programs;
  const ClRuntime& rt = test::cl_test_runtime();
  ClProgram& program = programs[glu_vec];
  if (!program) {
    const std::string options = KernelTuning::for_device(rt.device()).build_options;
    program = rt.build_program(
        "prefill_ops", kernel_source("prefill_ops"),
        options + " -DNORM_WG=16 -DHEAD_MAX=64 -DGLU_VEC=" + std::to_string(glu_vec));
  }
  return rt.create_kernel(program, name);
}

void run_2d(const ClKernel& k, size_t g0, size_t g1, size_t l0) {
  const ClRuntime& rt = test::cl_test_runtime();
  const size_t global[2] = {g0, g1}, local[2] = {l0, 1};
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k.get(), 2, nullptr, global, l0 ? local : nullptr, 0,
                                  nullptr, nullptr),
           "clEnqueueNDRangeKernel");
  rt.finish();
}

// 3 q heads, 1 KV head of 40 values with partial RoPE (n_rot 24), biases,
// head norms, both pairings; q rows to q, k and v to the cache layer 1, a
// ring of 7 rows, at positions pos0 + t (rows 5, 6, 0, 1), against
// cpu::rmsnorm and cpu::rope in float32/64.
TEST(ClPrefillOps, HeadRowsMatchesReference) {
  const int n_head = 3, n_head_kv = 1, hd = 40, n_rot = 24, n_tok = 4, pos0 = 5, n_ctx = 12;
  const int ring = 7;
  const int n_q = n_head * hd, n_kv = n_head_kv * hd, n_qkv = n_q + 2 * n_kv;
  const size_t layer_off = size_t(n_ctx) * n_kv;
  const float eps = 1e-6f, base = 1000.0f, q_scale = 0.75f;
  const auto qkv = test::random_floats(size_t(n_tok) * n_qkv, 21, -2.0f, 2.0f);
  const auto bias = test::random_floats(size_t(n_qkv), 22);
  const auto qn = test::random_floats(size_t(hd), 23, 0.5f, 1.5f);
  const auto kn = test::random_floats(size_t(hd), 24, 0.5f, 1.5f);
  for (RopeStyle style : {RopeStyle::Adjacent, RopeStyle::Neox}) {
    SCOPED_TRACE(style == RopeStyle::Neox ? "neox" : "adjacent");
    const cpu::RopeParams rp{style, n_rot, base, 0.5f, nullptr};
    std::vector<float> cs(size_t(n_ctx) * n_rot);
    for (int p = 0; p < n_ctx; ++p) {
      for (int i = 0; i < n_rot / 2; ++i) {
        cs[(size_t(p) * (n_rot / 2) + i) * 2] = float(std::cos(cpu::rope_angle(rp, p, i)));
        cs[(size_t(p) * (n_rot / 2) + i) * 2 + 1] = float(std::sin(cpu::rope_angle(rp, p, i)));
      }
    }
    std::vector<double> ref_q, ref_k(2 * layer_off, NAN), ref_v(2 * layer_off, NAN);
    for (int t = 0; t < n_tok; ++t) {
      std::vector<float> row(qkv.begin() + t * n_qkv, qkv.begin() + (t + 1) * n_qkv);
      for (int i = 0; i < n_qkv; ++i) row[size_t(i)] += bias[size_t(i)];
      for (int h = 0; h < n_head; ++h) {
        cpu::rmsnorm(&row[size_t(h * hd)], &row[size_t(h * hd)], qn.data(), hd, eps);
      }
      cpu::rmsnorm(&row[size_t(n_q)], &row[size_t(n_q)], kn.data(), hd, eps);
      cpu::rope(row.data(), n_head, hd, pos0 + t, rp);
      cpu::rope(row.data() + n_q, n_head_kv, hd, pos0 + t, rp);
      for (int i = 0; i < n_q; ++i) ref_q.push_back(double(row[size_t(i)]) * q_scale);
      for (int i = 0; i < n_kv; ++i) {
        ref_k[layer_off + size_t((pos0 + t) % ring) * n_kv + i] = row[size_t(n_q + i)];
        ref_v[layer_off + size_t((pos0 + t) % ring) * n_kv + i] = row[size_t(n_q + n_kv + i)];
      }
    }
    const ClMem qkv_d = cl_buffer(qkv), bias_d = cl_buffer(bias), qn_d = cl_buffer(qn),
                kn_d = cl_buffer(kn), cs_d = cl_buffer(cs);
    const ClMem q = test::cl_test_runtime().alloc((ref_q.size() + 16) * 4);
    const ClMem kc = test::cl_test_runtime().alloc(ref_k.size() * 4);
    const ClMem vc = test::cl_test_runtime().alloc(ref_v.size() * 4);
    cl_poison(q, ref_q.size() + 16);
    cl_poison(kc, ref_k.size());
    cl_poison(vc, ref_v.size());
    const ClKernel k = ops_kernel("head_rows");
    set_args(k, qkv_d, cl_int(n_qkv), cl_int(n_q), cl_int(n_q + n_kv), bias_d, cl_int(n_tok),
             cl_int(n_head), cl_int(n_head_kv), cl_int(hd), qn_d, kn_d, eps, cl_int(n_rot),
             cl_int(style == RopeStyle::Neox ? 1 : 0), cs_d, cl_int(pos0), q_scale, q, kc, vc,
             cl_ulong(layer_off), cl_int(ring));
    run_2d(k, size_t(n_head + 2 * n_head_kv) * 16, size_t(n_tok), 16);
    const auto got_q = cl_read(q, ref_q.size() + 16);
    EXPECT_LE(test::relative_error(std::span(got_q).first(ref_q.size()), ref_q), 1e-5);
    EXPECT_EQ(test::count_overwritten(got_q, ref_q.size()), 0u);
    test::expect_cache_matches(kc, ref_k, 1e-5);
    test::expect_cache_matches(vc, ref_v, 1e-5);
  }
}

TEST(ClPrefillOps, ScaleRowsAndGeluMulMatchReference) {
  const int n = 104, n_tok = 3;
  const auto g = test::random_floats(size_t(n) * n_tok, 31, -6.0f, 6.0f);
  const auto u = test::random_floats(size_t(n) * n_tok, 32);
  std::vector<double> ref_gelu, ref_scale;
  for (size_t e = 0; e < g.size(); ++e) {
    ref_gelu.push_back(double(cpu::gelu_tanh(g[e])) * u[e]);
    ref_scale.push_back(double(g[e]) * 25.3);
  }
  const ClMem x_dev = cl_buffer(g);
  for (int vec : {1, 8}) {  // one value a work-item (GPUs) and 8 (CPU devices)
    SCOPED_TRACE("GLU_VEC " + std::to_string(vec));
    const ClMem g_dev = cl_buffer(g), u_dev = cl_buffer(u);
    const ClKernel gelu = ops_kernel("gelu_mul", vec);
    set_args(gelu, g_dev, u_dev, cl_int(n), cl_int(n_tok));
    run_2d(gelu, size_t(n / vec), size_t(n_tok), 0);
    EXPECT_LE(test::relative_error(cl_read(g_dev, g.size()), ref_gelu), 1e-5);
  }
  const ClKernel scale = ops_kernel("scale_rows");
  set_args(scale, x_dev, 25.3f, cl_int(n), cl_int(n_tok));
  run_2d(scale, size_t(n), size_t(n_tok), 0);
  EXPECT_LE(test::relative_error(cl_read(x_dev, g.size()), ref_scale), 1e-6);
}

// ---- sliding-window rings: stepping back --------------------------------------------

// Gemma 3's shape with a 5-position window, chunks of 4: the window layers
// keep rings of 9 rows. After 30 positions a step back to position 25 or
// later (the window's first position 21 or later: rows 21-29 are the ring's
// 9) still finds its window and matches the CPU reference on the new branch;
// a longer one is refused (can_resume false, and the call throws), and the
// context runs again from position 0.
TEST(ClForwardRing, StepBackWithinAChunkKeepsTheWindow) {
  const TempModel m(
      write_synthetic_model_tmp(spec_of({"gemma3", "gemma3", 64, 5, false, GgmlType::Q8_0})));
  const ModelConfig& c = m.model.config;
  const int n_ctx = 40, n = 30;
  const auto tokens = some_tokens(n, c.n_vocab);
  ClForward cl(m.model, test::cl_test_runtime(), ClForwardOptions{n_ctx, 4});
  CpuForward cpu(m.model, n_ctx);
  for (int p = 0; p < n; ++p) {
    cl.decode_logits(tokens[size_t(p)], p);
    cpu.forward(tokens[size_t(p)], p);
  }
  for (int p = 0; p <= n; ++p) {
    // window first = max(0, p - 4); rows of 9; written up to 30
    // (decode_logits queues no lookahead steps)
    EXPECT_EQ(cl.can_resume(p), p == 0 || p >= 25) << "position " << p;
  }
  // A new branch from 28: tokens other than the first ones.
  for (int p = 28; p < 34; ++p) {
    const int32_t t = int32_t((p * 37 + 11) % c.n_vocab);
    const auto got = cl.decode_logits(t, p);
    const auto want = cpu.forward(t, p);
    EXPECT_LE(test::relative_error(std::vector<float>(got.begin(), got.end()), want), k_logits_tol)
        << "position " << p;
  }
  EXPECT_FALSE(cl.can_resume(20));
  EXPECT_THROW(cl.decode_logits(tokens[20], 20), std::runtime_error);
  // From position 0 again: a fresh context.
  std::vector<float> out;
  cl.prefill_logits(tokens, 0, n - 1, out);
  EXPECT_LE(test::relative_error(out, cpu_logits_at(m.model, tokens, n - 1)), k_logits_tol);
  EXPECT_TRUE(cl.can_resume(n - 3));
}

// The same model prefilled in chunks of 4: a chunk stopped after its first
// layer leaves none of its positions fed (nullopt), and the same chunk run
// again at the same position finds the window before it (written up to the
// stopped chunk's end, 24: rows 16-24 would fit a ring of 9) and matches the
// CPU reference. A call of more than one chunk has no stop points: a stop
// after its first chunk would leave the rings without the window before it.
TEST(ClForwardRing, StoppedChunkRunsAgainAtItsPosition) {
  const TempModel m(
      write_synthetic_model_tmp(spec_of({"gemma3", "gemma3", 64, 5, false, GgmlType::Q8_0})));
  const ModelConfig& c = m.model.config;
  ASSERT_GE(c.n_layer, 2);
  const int n_ctx = 40, n = 24;
  const auto tokens = some_tokens(n, c.n_vocab);
  ClForward cl(m.model, test::cl_test_runtime(), ClForwardOptions{n_ctx, 4});
  EXPECT_EQ(cl.prefill_stop_points(4), c.n_layer - 1);
  EXPECT_EQ(cl.prefill_stop_points(5), 0);
  const auto part = [&](int at) { return std::span<const int32_t>(tokens).subspan(size_t(at), 4); };
  for (int p = 0; p < 20; p += 4) ASSERT_TRUE(cl.prefill_until(part(p), p, [] { return false; }));
  int asked = 0;
  EXPECT_FALSE(cl.prefill_until(part(20), 20, [&] { return ++asked == 1; }).has_value());
  EXPECT_EQ(asked, 1);
  ASSERT_TRUE(cl.can_resume(20));
  std::vector<float> out;
  cl.prefill_logits(part(20), 20, 3, out);
  EXPECT_LE(test::relative_error(out, cpu_logits_at(m.model, tokens, n - 1)), k_logits_tol);
}

// ---- Gemma 3 270M, real weights -------------------------------------------------------

TEST(ClForwardGemma3, GreedyIdsMatchReference) {
  const std::string path = test::gemma3_model();
  if (path.empty()) GTEST_SKIP() << test::kGemma3Missing;
  const Model model = load_model(path);
  const auto ref = nlohmann::json::parse(
      test::read_file(test::shared_file("reference/gemma3/greedy-gemma3.json")));
  ClForward cl(model, test::cl_test_runtime(), ClForwardOptions{128});
  test::expect_greedy_matches_reference(cl, ref);
}

}  // namespace
}  // namespace clchat
