// Batched prefill (ClPrefill) on the OpenCL test device (PoCL unless
// CLCHAT_TEST_DEVICE says otherwise):
//   - kernels/attention_prefill.cl against a float64 causal attention over a
//     cache whose positions past the chunk are NaN (reading past the causal
//     limit shows), chunk starts 0, 37 and 70, 1..70 queries (two work-groups
//     of the tensor-core kernel, rings that wrap), GQA head layouts,
//     with the device's tuning, the local-memory kernel with odd tiles (5
//     queries x 3 keys), 3 key lanes per query (5 queries x 6 keys, ATT_KS 3)
//     and dim lanes, and the CPU kernel (ATT_DIRECT) with 3 queries per
//     work-item and tiles of 11 keys, its key transposes by clang's shuffles
//     and portably; on NVIDIA also kernels/attention_mma.cl (tensor cores,
//     heads of 64 and 128: within 3e-3, its fp16 inputs);
//   - rmsnorm_rows, rope_kv_rows and silu_mul against float64 references;
//   - ClForward::prefill_logits against CpuForward at every position
//     (||delta|| / ||ref|| <= 1e-3) and ClForward::prefill's next token against
//     N sequential decode steps, for chunk sizes 1, 7, 64 and 512 with prompts
//     crossing chunk boundaries, prefill split over two calls (the second
//     chunk attends to the cache of the first), on stories260K (F32),
//     llama-2-tiny-random (F16) and small synthetic models of every type.
// Outputs are NaN-poisoned before every launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cl/forward.h"
#include "engine/cl/prefill.h"
#include "engine/cl/tuning.h"
#include "engine/cpu/forward.h"
#include "engine/cpu/ops.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

using test::cl_buffer;
using test::cl_poison;
using test::cl_read;

const float k_nan = std::numeric_limits<float>::quiet_NaN();

ClKernel build_kernel(const std::string& stem, const std::string& defines, const char* name) {
  static std::map<std::string, ClProgram> programs;
  const ClRuntime& rt = test::cl_test_runtime();
  auto& p = programs[stem + defines];
  if (!p) {
    const std::string options =
        KernelTuning::for_device(test::cl_test_runtime().device()).build_options;
    p = rt.build_program(stem, kernel_source(stem), options + defines);
  }
  return rt.create_kernel(p, name);
}

void run_2d(const ClKernel& k, size_t g0, size_t g1, size_t l0, size_t l1) {
  const ClRuntime& rt = test::cl_test_runtime();
  const size_t global[2] = {g0, g1}, local[2] = {l0, l1};
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k.get(), 2, nullptr, global, l0 ? local : nullptr, 0,
                                  nullptr, nullptr),
           "clEnqueueNDRangeKernel");
  rt.finish();
}

// ---- attention_prefill ------------------------------------------------------------

struct HeadShape {
  const char* name;
  int n_head, n_head_kv, head_dim;
};
constexpr HeadShape k_head_shapes[] = {
    {"stories", 8, 4, 8}, {"tiny", 2, 2, 4},     {"smollm2", 9, 3, 64}, {"synthetic", 4, 2, 32},
    {"head24", 3, 1, 24}, {"gemma3", 4, 1, 256}, {"head128", 4, 2, 128}};

class ClAttentionPrefill : public testing::TestWithParam<HeadShape> {};

TEST_P(ClAttentionPrefill, MatchesCausalReference) {
  const HeadShape s = GetParam();
  const int d = s.head_dim, n_embd = s.n_head * d, n_kv = s.n_head_kv * d;
  const int n_ctx = 320, n_layers = 2, layer = 1;
  const size_t layer_off = size_t(layer) * n_ctx * n_kv;
  const PrefillTuning device = PrefillTuning::for_device(test::cl_test_runtime().device());
  PrefillTuning odd = device, tiled = device, odd_direct = device;
  tiled.att_direct = false;  // the local-memory kernel (GPUs) on any device
  odd = tiled;
  odd.att_tq = 5;
  odd.att_tk = 3;
  odd.att_ks = 1;
  odd_direct.att_direct = true;  // the CPU kernel on any device, tiles not of 8 keys
  odd_direct.att_tq = 3;
  odd_direct.att_tk = 11;
  odd_direct.att_ks = 1;
  odd_direct.att_ds = 1;
  // more queries than a tile has keys: with a window, a stored query's first
  // tiles can hold none of its keys
  PrefillTuning wide_direct = odd_direct;
  wide_direct.att_tq = 20;
  wide_direct.att_tk = 5;
  PrefillTuning odd_lanes = tiled, dim_lanes = tiled, all_lanes = tiled;
  odd_lanes.att_tq = 5;  // 3 key lanes per query, 2 keys each per tile
  odd_lanes.att_tk = 6;
  odd_lanes.att_ks = 3;
  dim_lanes.att_tq = 3;  // each query's dimensions over 2 work-items (4 where they divide)
  dim_lanes.att_tk = 5;
  dim_lanes.att_ks = 1;
  dim_lanes.att_ds = d / 4 % 4 == 0 ? 4 : d / 4 % 2 == 0 ? 2 : 1;
  all_lanes = odd_lanes;  // 3 key lanes x 2 dim lanes
  all_lanes.att_ds = d / 4 % 2 == 0 ? 2 : 1;
  struct AttentionVariant {
    std::string name;
    ClKernel kernel;
    size_t wg, queries;  // work-items per work-group, queries per work-group
    double tolerance;
  };
  std::vector<AttentionVariant> variants;
  // (the CPU kernel's key transposes also without clang's shuffle builtin)
  for (const auto& [t, extra] :
       std::vector<std::pair<PrefillTuning, std::string>>{{device, ""},
                                                          {odd, ""},
                                                          {odd_direct, ""},
                                                          {odd_direct, " -DTRANSPOSE_PORTABLE=1"},
                                                          {wide_direct, ""},
                                                          {odd_lanes, ""},
                                                          {dim_lanes, ""},
                                                          {all_lanes, ""}}) {
    // as ClPrefill launches it: a work-item per att_tq queries (direct),
    // else a work-group of their lanes
    const size_t wg =
        t.att_direct ? 1 : size_t(t.att_tq) * size_t(t.att_ks) * size_t(std::max(t.att_ds, 1));
    variants.push_back(
        {"att_tq " + std::to_string(t.att_tq) + " att_tk " + std::to_string(t.att_tk) + " att_ks " +
             std::to_string(t.att_ks) + " att_ds " + std::to_string(t.att_ds) +
             (t.att_direct ? " direct" : "") + extra,
         build_kernel("cpu_transpose+attention_prefill", ClPrefill::attention_defines(d, t) + extra,
                      "attention_prefill"),
         wg, size_t(t.att_tq), 1e-4});
  }
  // kernels/attention_mma.cl on NVIDIA (heads of 64 and 128): q, k, v and
  // the probabilities in fp16 (~1e-3 of the float64 result)
  if (test::cl_test_runtime().device().platform_name.find("NVIDIA") != std::string::npos &&
      (d == 64 || d == 128)) {
    variants.push_back({"attention_mma",
                        build_kernel(ClPrefill::k_att_mma_program,
                                     ClPrefill::attention_mma_defines(d), "attention_mma"),
                        size_t(ClPrefill::k_att_mma_threads), size_t(ClPrefill::k_att_mma_queries),
                        3e-3});
  }
  for (const AttentionVariant& v : variants) {
    SCOPED_TRACE(v.name);
    const ClKernel& k = v.kernel;
    // ring 0: the layer's n_ctx rows; else window + n_tok rows, position p in
    // row p % ring (a sliding-window layer's ring, engine/cl/decode_state.h)
    for (auto [pos0, window, ring_of_window] : {std::tuple{0, 0, false},
                                                {37, 0, false},
                                                {0, 5, false},
                                                {37, 20, false},
                                                {37, 20, true},
                                                {70, 9, true},
                                                // a work-group over 3-5 key tiles
                                                // (attention_mma: tiles loaded one
                                                // ahead), windows wrapping a ring
                                                {200, 0, false},
                                                {200, 130, false},
                                                {200, 130, true}}) {
      for (int n_tok : {1, 7, 50, 70}) {
        if (pos0 + n_tok > n_ctx) continue;
        const int ring = ring_of_window ? window + n_tok : n_ctx;
        SCOPED_TRACE("pos0 " + std::to_string(pos0) + " window " + std::to_string(window) +
                     " n_tok " + std::to_string(n_tok) + " ring " + std::to_string(ring));
        const uint32_t seed = uint32_t(pos0 * 100 + n_tok + d);
        const auto q = test::random_floats(size_t(n_tok) * n_embd, seed, -2.0f, 2.0f);
        auto kc = test::random_floats(size_t(n_layers) * n_ctx * n_kv, seed + 1, -2.0f, 2.0f);
        auto vc = test::random_floats(size_t(n_layers) * n_ctx * n_kv, seed + 2);
        // NaN: layer 0, positions past the chunk's last one, and those before
        // the first query's window.
        const int first_seen = window > 0 ? std::max(0, pos0 + 1 - window) : 0;
        for (size_t e = 0; e < kc.size(); ++e) {
          const bool other_layer = e < layer_off;
          const bool past = e >= layer_off + size_t(pos0 + n_tok) * n_kv;
          const bool before = e < layer_off + size_t(first_seen) * n_kv;
          if (other_layer || past || before) kc[e] = vc[e] = k_nan;
        }
        std::vector<double> ref(size_t(n_tok) * n_embd);
        for (int tq = 0; tq < n_tok; ++tq) {
          const int n_pos = pos0 + tq + 1;
          const int first = window > 0 ? std::max(0, n_pos - window) : 0;
          for (int h = 0; h < s.n_head; ++h) {
            const int kvh = h / (s.n_head / s.n_head_kv);
            std::vector<double> p(static_cast<size_t>(n_pos), -INFINITY);
            double max = -INFINITY, sum = 0;
            for (int tk = first; tk < n_pos; ++tk) {
              double dot = 0;
              for (int i = 0; i < d; ++i) {
                dot += double(q[size_t(tq) * n_embd + h * d + i]) *
                       kc[layer_off + size_t(tk) * n_kv + kvh * d + i];
              }
              p[size_t(tk)] = dot / std::sqrt(double(d));
              max = std::max(max, p[size_t(tk)]);
            }
            for (double& v : p) sum += (v = std::exp(v - max));
            for (int i = 0; i < d; ++i) {
              double o = 0;
              for (int tk = first; tk < n_pos; ++tk) {
                o += p[size_t(tk)] * vc[layer_off + size_t(tk) * n_kv + kvh * d + i];
              }
              ref[size_t(tq) * n_embd + h * d + i] = o / sum;
            }
          }
        }
        // The cache as the kernel reads it: position p of layer 1 in row p % ring
        // (the rows no position of the chunk's windows has stay NaN).
        std::vector<float> kr(kc.size(), k_nan), vr(vc.size(), k_nan);
        for (int p = first_seen; p < pos0 + n_tok; ++p) {
          const size_t from = layer_off + size_t(p) * n_kv,
                       to = layer_off + size_t(p % ring) * n_kv;
          std::copy_n(kc.begin() + ptrdiff_t(from), n_kv, kr.begin() + ptrdiff_t(to));
          std::copy_n(vc.begin() + ptrdiff_t(from), n_kv, vr.begin() + ptrdiff_t(to));
        }
        const ClMem q_dev = cl_buffer(q), k_dev = cl_buffer(kr), v_dev = cl_buffer(vr);
        const size_t n_out = ref.size() + 16;
        const ClMem out = test::cl_test_runtime().alloc(n_out * 4);
        cl_poison(out, n_out);
        set_args(k, q_dev, k_dev, v_dev, cl_ulong(layer_off), cl_int(pos0), cl_int(n_tok),
                 cl_int(s.n_head), cl_int(s.n_head_kv), cl_int(window), cl_int(ring), out);
        run_2d(k, size_t(s.n_head), test::round_up(size_t(n_tok), v.queries) / v.queries * v.wg, 1,
               v.wg);
        const auto got = cl_read(out, n_out);
        EXPECT_LE(test::relative_error(std::span(got).first(ref.size()), ref), v.tolerance);
        EXPECT_EQ(test::count_overwritten(got, ref.size()), 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, ClAttentionPrefill, testing::ValuesIn(k_head_shapes),
                         [](const testing::TestParamInfo<HeadShape>& info) {
                           return std::string(info.param.name);
                         });

// ---- rmsnorm_rows, rope_kv_rows, silu_mul ------------------------------------------

const std::string k_ops_defines = " -DNORM_WG=16";

TEST(ClPrefillOps, RmsnormRowsMatchesReference) {
  const int n = 200, n_tok = 5, row0 = 2;
  const auto x = test::random_floats(size_t(row0 + n_tok) * n, 3, -3.0f, 3.0f);
  const auto g = test::random_floats(size_t(n), 4, 0.5f, 1.5f);
  std::vector<double> ref;
  for (int t = 0; t < n_tok; ++t) {
    double ss = 0;
    for (int i = 0; i < n; ++i)
      ss += double(x[size_t(row0 + t) * n + i]) * x[size_t(row0 + t) * n + i];
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; ++i) ref.push_back(x[size_t(row0 + t) * n + i] * scale * g[size_t(i)]);
  }
  const ClMem x_dev = cl_buffer(x), g_dev = cl_buffer(g);
  const size_t n_out = ref.size() + 16;
  const ClMem out = test::cl_test_runtime().alloc(n_out * 4);
  cl_poison(out, n_out);
  const ClKernel k = build_kernel("prefill_ops", k_ops_defines, "rmsnorm_rows");
  set_args(k, x_dev, cl_int(row0), cl_int(n), g_dev, 1e-5f, cl_int(0), out);
  run_2d(k, 16, size_t(n_tok), 16, 1);
  const auto got = cl_read(out, n_out);
  EXPECT_LE(test::relative_error(std::span(got).first(ref.size()), ref), 1e-5);
  EXPECT_EQ(test::count_overwritten(got, ref.size()), 0u);
  // accumulate: out += the same (a post-norm into the residual stream)
  const auto base = test::random_floats(ref.size(), 5);
  const ClMem acc = cl_buffer(base);
  set_args(k, x_dev, cl_int(row0), cl_int(n), g_dev, 1e-5f, cl_int(1), acc);
  run_2d(k, 16, size_t(n_tok), 16, 1);
  std::vector<double> ref_acc(ref.size());
  for (size_t e = 0; e < ref.size(); ++e) ref_acc[e] = ref[e] + base[e];
  EXPECT_LE(test::relative_error(cl_read(acc, ref.size()), ref_acc), 1e-5);
}

// q, k rotated (partial RoPE: n_rot 8 < head_dim 16), v copied, k and v at
// positions pos0 + t of the cache layer.
TEST(ClPrefillOps, RopeKvRowsMatchesReference) {
  const int n_embd = 64, head_dim = 16, n_kv = 32, n_rot = 8, n_tok = 6, pos0 = 3, n_ctx = 16;
  const float base = 10000.0f;
  const int n_qkv = n_embd + 2 * n_kv;
  const size_t layer_off = size_t(n_ctx) * n_kv;  // layer 1
  const auto qkv = test::random_floats(size_t(n_tok) * n_qkv, 8);
  std::vector<float> cs(size_t(n_ctx) * n_rot);
  for (int p = 0; p < n_ctx; ++p) {
    for (int i = 0; i < n_rot / 2; ++i) {
      const double th = p * std::pow(double(base), -2.0 * i / n_rot);
      cs[(size_t(p) * (n_rot / 2) + i) * 2] = float(std::cos(th));
      cs[(size_t(p) * (n_rot / 2) + i) * 2 + 1] = float(std::sin(th));
    }
  }
  std::vector<double> ref_q, ref_k(2 * layer_off, NAN), ref_v(2 * layer_off, NAN);
  for (int t = 0; t < n_tok; ++t) {
    std::vector<float> q(qkv.begin() + t * n_qkv, qkv.begin() + t * n_qkv + n_embd);
    std::vector<float> k(qkv.begin() + t * n_qkv + n_embd, qkv.begin() + t * n_qkv + n_embd + n_kv);
    const cpu::RopeParams rp{RopeStyle::Adjacent, n_rot, base};
    cpu::rope(q.data(), n_embd / head_dim, head_dim, pos0 + t, rp);
    cpu::rope(k.data(), n_kv / head_dim, head_dim, pos0 + t, rp);
    ref_q.insert(ref_q.end(), q.begin(), q.end());
    for (int i = 0; i < n_kv; ++i) {
      ref_k[layer_off + size_t(pos0 + t) * n_kv + i] = k[size_t(i)];
      ref_v[layer_off + size_t(pos0 + t) * n_kv + i] = qkv[size_t(t) * n_qkv + n_embd + n_kv + i];
    }
  }
  const ClMem qkv_dev = cl_buffer(qkv), cs_dev = cl_buffer(cs);
  const ClMem q = test::cl_test_runtime().alloc((ref_q.size() + 16) * 4);
  const ClMem kc = test::cl_test_runtime().alloc(ref_k.size() * 4);
  const ClMem vc = test::cl_test_runtime().alloc(ref_v.size() * 4);
  cl_poison(q, ref_q.size() + 16);
  cl_poison(kc, ref_k.size());
  cl_poison(vc, ref_v.size());
  const ClKernel k = build_kernel("prefill_ops", k_ops_defines, "rope_kv_rows");
  set_args(k, qkv_dev, cl_int(n_tok), cl_int(n_embd), cl_int(n_kv), cl_int(head_dim), cl_int(n_rot),
           cs_dev, cl_int(pos0), q, kc, vc, cl_ulong(layer_off));
  run_2d(k, size_t(n_qkv / 2), size_t(n_tok), 0, 0);
  const auto got_q = cl_read(q, ref_q.size() + 16);
  EXPECT_LE(test::relative_error(std::span(got_q).first(ref_q.size()), ref_q), 1e-6);
  EXPECT_EQ(test::count_overwritten(got_q, ref_q.size()), 0u);
  test::expect_cache_matches(kc, ref_k, 1e-6);
  test::expect_cache_matches(vc, ref_v, 1e-6);
}

// One value a work-item (GPUs) and 8 (CPU devices: GLU_VEC=8).
TEST(ClPrefillOps, SiluMulMatchesReference) {
  const int n = 104, n_tok = 3;
  const auto g = test::random_floats(size_t(n) * n_tok, 11, -4.0f, 4.0f);
  const auto u = test::random_floats(size_t(n) * n_tok, 12);
  std::vector<double> ref;
  for (size_t e = 0; e < g.size(); ++e)
    ref.push_back(g[e] / (1.0 + std::exp(-double(g[e]))) * u[e]);
  for (int vec : {1, 8}) {
    SCOPED_TRACE("GLU_VEC " + std::to_string(vec));
    const ClMem g_dev = cl_buffer(g), u_dev = cl_buffer(u);
    const ClKernel k = build_kernel(
        "prefill_ops", k_ops_defines + " -DGLU_VEC=" + std::to_string(vec), "silu_mul");
    set_args(k, g_dev, u_dev, cl_int(n), cl_int(n_tok));
    run_2d(k, size_t(n / vec), size_t(n_tok), 0, 0);
    EXPECT_LE(test::relative_error(cl_read(g_dev, g.size()), ref), 1e-5);
  }
}

// ---- whole prefill against the CPU reference and sequential decode ------------------

struct TempModel {
  std::string path;
  Model model;
  explicit TempModel(const std::string& p) : path(p), model(load_model(p)) {}
  ~TempModel() { std::filesystem::remove(path); }
};

std::vector<int32_t> some_tokens(int n, int n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((1 + 7919 * i + 31 * i * i) % n_vocab));
  return t;
}

// For each chunk size: logits of every position from prefill_logits (in two
// calls, split at `split`) against CpuForward, and prefill's next token against
// sequential decode steps of the same ClForward.
void expect_prefill_matches(const Model& model, int n_tokens, std::vector<int> chunks, int split,
                            const std::optional<Tuning>& tuning = std::nullopt) {
  const auto tokens = some_tokens(n_tokens, model.config.n_vocab);
  CpuForward cpu(model, n_tokens);
  std::vector<std::vector<float>> ref;
  for (int p = 0; p < n_tokens; ++p) ref.push_back(cpu.forward(tokens[size_t(p)], p));
  const int n_vocab = model.config.n_vocab;
  for (int chunk : chunks) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    ClForwardOptions opt;
    opt.n_ctx = n_tokens;
    opt.prefill_chunk = chunk;
    opt.tuning = tuning;
    ClForward cl(model, test::cl_test_runtime(), opt);
    ASSERT_EQ(cl.prefill_chunk(), std::min(chunk, n_tokens));
    std::vector<float> first, second;
    const std::span<const int32_t> all(tokens);
    cl.prefill_logits(all.first(size_t(split)), 0, 0, first);
    cl.prefill_logits(all.subspan(size_t(split)), split, 0, second);
    ASSERT_EQ(first.size(), size_t(split) * n_vocab);
    ASSERT_EQ(second.size(), size_t(n_tokens - split) * n_vocab);
    first.insert(first.end(), second.begin(), second.end());
    for (int p = 0; p < n_tokens; ++p) {
      const std::vector<float> got(first.begin() + p * n_vocab, first.begin() + (p + 1) * n_vocab);
      ASSERT_LE(test::relative_error(got, ref[size_t(p)]), 1e-3) << "position " << p;
    }
    // first_out skips the head for earlier positions
    std::vector<float> tail;
    cl.prefill_logits(all, 0, n_tokens - 3, tail);
    ASSERT_EQ(tail.size(), size_t(3) * n_vocab);
    EXPECT_LE(
        test::relative_error(std::vector<float>(tail.end() - n_vocab, tail.end()), ref.back()),
        1e-3);
    // prefill's next token = the argmax after N sequential decode steps
    const int32_t batched = cl.prefill(all, 0);
    int32_t sequential = -1;
    for (int p = 0; p < n_tokens; ++p) sequential = cl.decode_argmax(tokens[size_t(p)], p);
    EXPECT_EQ(batched, sequential);
    EXPECT_EQ(batched, cpu::argmax(ref.back()));
  }
}

TEST(ClPrefill, Stories260KMatchesCpu) {
  const Model model = load_model(test::shared_file("models/stories260K.gguf"));
  expect_prefill_matches(model, 80, {1, 7, 64, 512}, 30);
}

TEST(ClPrefill, TinyRandomF16MatchesCpu) {
  const Model model = load_model(test::shared_file("models/llama-2-tiny-random.gguf"));
  expect_prefill_matches(model, 40, {7, 64}, 9);
}

SyntheticSpec small_spec(GgmlType layer_type, GgmlType embd_type, bool tied) {
  SyntheticSpec s;
  s.name = "test-prefill";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.n_ctx = 1024;
  s.layer_type = layer_type;
  s.embd_type = embd_type;
  s.tied = tied;
  s.seed = 2000 + uint64_t(layer_type) * 10 + uint64_t(embd_type);
  return s;
}

class ClPrefillSynthetic : public testing::TestWithParam<GgmlType> {};

TEST_P(ClPrefillSynthetic, MatchesCpu) {
  const GgmlType type = GetParam();
  TempModel m(write_synthetic_model_tmp(
      small_spec(type, type == GgmlType::Q4_0 ? GgmlType::Q8_0 : type, type != GgmlType::F16)));
  expect_prefill_matches(m.model, 70, {7, 64}, 20);
}

INSTANTIATE_TEST_SUITE_P(Types, ClPrefillSynthetic,
                         testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q4_0,
                                         GgmlType::Q4_1, GgmlType::Q8_0),
                         [](const testing::TestParamInfo<GgmlType>& info) {
                           return std::string(ggml_type_name(info.param));
                         });

// On NVIDIA every layer matrix of a Q4_0 model runs on tensor cores. A
// failed build or self-test of the tensor-core kernels falls back to the
// portable ones with only a warning (and the results above still match), so
// this checks the path itself: Q/K/V (one matrix or three), Wo, gate, up and
// down of each layer.
TEST(ClPrefill, NvidiaRunsEveryLayerMatrixOnTensorCores) {
  if (test::cl_test_runtime().device().platform_name.find("NVIDIA") == std::string::npos) {
    GTEST_SKIP() << "tensor-core prefill runs on NVIDIA only";
  }
  TempModel m(write_synthetic_model_tmp(small_spec(GgmlType::Q4_0, GgmlType::Q8_0, true)));
  ClForwardOptions opt;
  opt.n_ctx = 64;
  ClForward cl(m.model, test::cl_test_runtime(), opt);
  using P = ClPrefill::Product;
  EXPECT_GE(cl.prefill_products(P::tensor_cores), 5 * m.model.config.n_layer);
  EXPECT_EQ(cl.prefill_products(P::x16) + cl.prefill_products(P::portable), 0);
}

// Split-K on NVIDIA (ClPrefill::add_mma_steps): a model whose Wo and
// ffn_down rows make a widened grid of under 1.4 work-groups per compute unit
// at chunks of 512, and over 0.7 (so two splits fill it): 128-row tiles, 8
// token tiles, n_embd = 128 R with the least R for which 16 R work-groups
// reach 1.4 per unit; n_ff = 2 n_embd, so gate, up and Q/K/V fill the grid
// widened and do not split. Wo's rows have R stages of 4 blocks, and a split
// needs 4 each: R >= 8 (GPUs of 80 compute units or more). Splits of up to
// 4 (mma_split 4): the full chunk still splits Wo and ffn_down over 2, and
// the 256-token plan (4 token tiles) splits Q/K/V, gate and up over 2 and
// ffn_down over 4 (2 R stages, 4 a split). Against the CPU reference (the
// split products add into the residual), over chunks of 200 (the 256-token
// plan), 320, 512 and 8 tokens (partial token tiles). The large tiles are
// off (mma_large 0): at these shapes the 192-row one would take the stacked
// Q/K/V, gate and up split over 2.
TEST(ClPrefill, SplitKMatchesCpu) {
  const DeviceInfo& dev = test::cl_test_runtime().device();
  if (dev.platform_name.find("NVIDIA") == std::string::npos) {
    GTEST_SKIP() << "tensor-core prefill runs on NVIDIA only";
  }
  const int units = int(dev.compute_units);
  const int r = (7 * units + 79) / 80;  // 5 * 16 R >= 7 units
  ASSERT_LT(5 * 8 * r, 7 * units) << "the widened grid would be full: no split";
  if (r < 8) GTEST_SKIP() << "rows too short to split on " << units << " compute units";
  SyntheticSpec s = small_spec(GgmlType::Q4_0, GgmlType::Q8_0, true);
  s.n_embd = 128 * r;
  s.n_ff = 256 * r;
  s.n_layer = 1;
  s.n_head = 2 * r;
  s.n_head_kv = r;
  TempModel m(write_synthetic_model_tmp(s));
  Tuning tuning = Tuning::for_device(dev);
  tuning.prefill.mma_large = 0;
  tuning.prefill.mma_split = 4;
  {
    ClForwardOptions opt;
    opt.n_ctx = 520;
    opt.tuning = tuning;
    ClForward cl(m.model, test::cl_test_runtime(), opt);
    ASSERT_EQ(cl.prefill_split_products(), 2);  // Wo and ffn_down
    const std::vector<int> plans = cl.prefill_short_plan_tokens();
    ASSERT_FALSE(plans.empty());
    EXPECT_EQ(plans.front(), 256);
  }
  expect_prefill_matches(m.model, 520, {512}, 200, tuning);
}

// The large tiles on NVIDIA (ClPrefill::add_mma_steps, PrefillTuning::
// mma_large): a one-layer MHA model at a chunk of 128 t tokens (t token
// tiles) whose gate and up (256 f rows, 256 a tile) fill one wave of the
// compute units (95% or more) unsplit, whose ffn_down (n_embd = 256 e rows)
// fills it split over K into 4 (16 stages of 4 blocks, 4 a split), and
// whose stacked Q/K/V (3 n_embd rows) fills it unsplit with the 192-row
// tile (4 e t groups; with 256 rows it fills three waves only split over 4,
// whose splits would be too short). Wo (n_embd / 128 stages, e <= 3) is too
// short to split. Against the CPU reference (down's split adds into the
// residual), over a first chunk of 64 t - 24 tokens, on the plan for half a
// chunk (where the large tiles' splits would be too short: its own tiles),
// and a second of the rest.
TEST(ClPrefill, LargeTileMatchesCpu) {
  const DeviceInfo& dev = test::cl_test_runtime().device();
  if (dev.platform_name.find("NVIDIA") == std::string::npos) {
    GTEST_SKIP() << "tensor-core prefill runs on NVIDIA only";
  }
  const int units = int(dev.compute_units);
  auto one_wave = [&](int groups) { return 100 * groups >= 95 * units && groups <= units; };
  int t = 0, e = 0, f = 0;
  for (int tt = 16; tt >= 4 && f == 0; --tt) {
    for (int ee = 1; ee <= 3 && f == 0; ++ee) {
      for (int ff = 8; ff <= 32 && f == 0; ++ff) {
        if (one_wave(4 * ee * tt) && one_wave(ff * tt)) {
          t = tt;
          e = ee;
          f = ff;
        }
      }
    }
  }
  if (f == 0) GTEST_SKIP() << "no shape fills one wave of " << units << " compute units";
  SyntheticSpec s = small_spec(GgmlType::Q4_0, GgmlType::Q8_0, true);
  s.n_embd = 256 * e;
  s.n_ff = 256 * f;
  s.n_layer = 1;
  s.n_head = s.n_embd / 64;
  s.n_head_kv = s.n_head;
  s.n_ctx = 128 * t;
  TempModel m(write_synthetic_model_tmp(s));
  {
    ClForwardOptions opt;
    opt.n_ctx = 128 * t;
    opt.prefill_chunk = 128 * t;
    ClForward cl(m.model, test::cl_test_runtime(), opt);
    ASSERT_EQ(cl.prefill_large_tile_products(), 4);  // Q/K/V, gate, up, ffn_down
    ASSERT_EQ(cl.prefill_split_products(), 1);       // ffn_down
    const std::vector<int> plans = cl.prefill_short_plan_tokens();
    ASSERT_FALSE(plans.empty());
    EXPECT_EQ(plans.front(), 64 * t);
  }
  expect_prefill_matches(m.model, 128 * t, {128 * t}, 64 * t - 24);
}

// A prompt longer than one 512-token chunk (Q4_1 layers, Q8_0 embedding).
TEST(ClPrefill, CrossesChunkOf512) {
  TempModel m(write_synthetic_model_tmp(small_spec(GgmlType::Q4_1, GgmlType::Q8_0, true)));
  expect_prefill_matches(m.model, 600, {512}, 100);
}

// ---- clchat perplexity ---------------------------------------------------------

// SmolLM2-135M on reference/ppl-text.txt with --ctx 512 (14 windows, 3570
// scored tokens): within 0.5% of the float64 reference's perplexity, for the
// Q4_1 file (reference/ppl.json) and llama-quantize's Q4_K_M mix
// (reference/smollm2-q4_k_m/ppl.json: Q5_0, Q8_0, Q4_K and Q6_K tensors);
// Gemma 3 270M likewise.
// The device comes from CLCHAT_TEST_DEVICE (default cpu, i.e. PoCL).
// `model_path`: a full path; `ctx` and `windows`: the reference's; `chunk`:
// the prefill chunk.
void expect_perplexity_matches(const std::string& model_path, const std::string& reference,
                               int ctx = 512, int windows = 14, int chunk = 512) {
  const auto ref = nlohmann::json::parse(test::read_file(test::shared_file(reference)));
  const double want = ref.at("ppl").get<double>();
  const char* dev = std::getenv("CLCHAT_TEST_DEVICE");
  const auto r = test::run_command(test::clchat_binary() + " perplexity -m " + model_path + " -f " +
                                   test::shared_file("reference/ppl-text.txt") + " --ctx " +
                                   std::to_string(ctx) + " --chunk " + std::to_string(chunk) +
                                   " --device " + (dev && *dev ? dev : "cpu"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::printf("%s%s", r.out.c_str(), r.err.c_str());
  const std::string key = "Final estimate: PPL = ";
  const size_t at = r.out.rfind(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double got = std::stod(r.out.substr(at + key.size()));
  EXPECT_NEAR(got, want, 0.005 * want);
  const std::string last = "[" + std::to_string(windows) + "]";
  EXPECT_NE(r.out.find(last), std::string::npos) << "expected " << windows << " windows";
}

TEST(ClchatPerplexity, SmolLM2MatchesReference) {
  expect_perplexity_matches(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                            "reference/ppl.json");
}

TEST(ClchatPerplexity, SmolLM2Q4KMMatchesReference) {
  expect_perplexity_matches(test::shared_file("models/SmolLM2-135M-Instruct.Q4_K_M.gguf"),
                            "reference/smollm2-q4_k_m/ppl.json");
}

// Gemma 3 270M with ctx 1024 (7 windows, 3577 scored tokens; the 512-position
// window of its local layers binds): reference/gemma3/ppl-gemma3.json. In
// chunks of 256 those layers keep rings of 768 rows, which each window's
// positions 768-1023 wrap.
TEST(ClchatPerplexity, Gemma3MatchesReference) {
  const std::string path = test::gemma3_model();
  if (path.empty()) GTEST_SKIP() << test::kGemma3Missing;
  expect_perplexity_matches(path, "reference/gemma3/ppl-gemma3.json", 1024, 7, 256);
}

TEST(ClchatPerplexity, TooShortTextIsAUsageError) {
  const auto r = test::run_command(
      test::clchat_binary() + " perplexity -m " + test::shared_file("models/stories260K.gguf") +
      " -f " + test::shared_file("reference/prompts.txt") + " --ctx 4096 --backend reference");
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace clchat
