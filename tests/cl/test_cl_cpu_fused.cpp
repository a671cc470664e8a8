// The fused decode kernels of CPU devices (kernels/matvec_cpu.cl, PoCL):
// matvec_argmax (lm_head + argmax in one launch) and qkv_rope_attention
// (qkv_rope + attention_decode in one launch). Each is compared with what
// it replaces: the token with a host scan of the kernel's own logits under
// argmax_cpu.cl's rules (NaN never wins, +inf wins, ties go to the lowest
// index, all-NaN gives 0) and the logits with a float64 reference; the
// fused attention with the separate qkv_rope and attention_decode kernels
// (themselves tested against references in test_cl_matvec and
// test_cl_attention): same arithmetic, so within 1e-5 relative. Every case
// runs twice in a row: the launch's completion counters must reset
// themselves. Skipped on devices without the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

constexpr float k_rms_eps = 1e-5f;
constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

// The device's CPU tuning and one with odd groups (6 rows, 2 per item).
std::vector<KernelTuning> cpu_tunings() {
  const KernelTuning device = KernelTuning::for_device(test::cl_test_runtime().device());
  if (!device.cpu_kernels || device.tpr != 1) return {};
  KernelTuning odd = device;
  odd.rows = 6;
  odd.cpu_nr = 2;
  return {device, odd};
}

// argmax_cpu.cl's rules over host floats.
int ref_argmax(const std::vector<float>& v) {
  int best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[size_t(best)])) best = int(i);
  }
  return best < 0 ? 0 : best;
}

// A weight matrix made from random rows: some rows set to one value, some
// copied from another row.
struct HeadCase {
  const char* name;
  std::vector<std::pair<int, float>> fills;  // (row, value for every weight of the row)
  std::vector<std::pair<int, int>> copies;   // (row, source row)
};

TEST(ClCpuFused, MatvecArgmaxPicksTheHostArgmaxOfItsLogits) {
  const auto tunings = cpu_tunings();
  if (tunings.empty()) GTEST_SKIP() << "no CPU kernels on this device";
  const int n_in = 64, rows = 203;  // rows not a multiple of any group
  const auto x = test::random_floats(size_t(n_in), 7, 0.1f, 1.0f);  // positive: inf rows stay inf
  const auto base = test::random_floats(size_t(n_in) * rows, 8);
  // Row 90 is the largest (all weights 1) unless a case changes it.
  const std::vector<HeadCase> cases = {
      {"random", {}, {}},
      {"max", {{90, 1.0f}}, {}},
      {"tie keeps the lower index", {{90, 1.0f}, {150, 1.0f}}, {{30, 150}}},
      {"NaN below the max", {{90, 1.0f}, {10, k_nan}}, {}},
      {"+inf wins", {{90, 1.0f}, {170, k_inf}}, {}},
      {"-inf rows only beside NaN", {}, {}},
  };
  for (const HeadCase& hc : cases) {
    SCOPED_TRACE(hc.name);
    auto values = base;
    for (auto [row, v] : hc.fills) {
      for (int i = 0; i < n_in; ++i) values[size_t(row) * n_in + i] = v;
    }
    for (auto [row, src] : hc.copies) {
      for (int i = 0; i < n_in; ++i)
        values[size_t(row) * n_in + i] = values[size_t(src) * n_in + i];
    }
    if (std::string(hc.name).starts_with("-inf")) {
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < n_in; ++i) values[size_t(r) * n_in + i] = r % 2 ? -k_inf : k_nan;
      }
    }
    for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
      const bool non_finite = std::string(hc.name).find("inf") != std::string::npos ||
                              std::string(hc.name).find("NaN") != std::string::npos;
      if (type != GgmlType::F32 && non_finite) continue;  // quantizing inf/NaN: not the point here
      SCOPED_TRACE(ggml_type_name(type));
      const test::TestMatrix w = test::make_test_matrix(type, values, n_in, rows);
      const ClMem x_dev = test::cl_buffer(x), none;
      for (const KernelTuning& t : tunings) {
        SCOPED_TRACE(test::describe(t));
        const ClKernel k = test::cl_programs(t).head_argmax_kernel(type);
        const size_t n_groups = test::round_up(size_t(rows), size_t(t.rows)) / size_t(t.rows);
        const ClRuntime& rt = test::cl_test_runtime();
        const ClMem out = rt.alloc(size_t(rows) * 4), part_val = rt.alloc(n_groups * 4),
                    part_idx = rt.alloc(n_groups * 4), token = rt.alloc(4);
        const ClMem n_done = test::cl_buffer(std::vector<cl_uint>{0});
        set_args(k, w.dev.q, w.dev.s, cl_int(n_in), cl_int(rows), x_dev, none, k_rms_eps, out,
                 part_val, part_idx, n_done, token);
        for (int run = 0; run < 2; ++run) {
          SCOPED_TRACE("run " + std::to_string(run));
          test::cl_poison(out, size_t(rows));
          test::cl_poison(token, 1, 0.5f);  // not an id
          test::cl_run(k, n_groups * size_t(t.matvec_wg()), size_t(t.matvec_wg()));
          const auto logits = test::cl_read(out, size_t(rows));
          EXPECT_EQ(test::cl_read<int>(token, 1)[0], ref_argmax(logits));
          EXPECT_EQ(test::cl_read<cl_uint>(n_done, 1)[0], 0u) << "counter not reset";
          if (!non_finite) {
            EXPECT_LE(test::relative_error(std::span<const float>(logits),
                                           test::matvec_f64(w.values, x, n_in, rows)),
                      1e-3);
          }
        }
      }
    }
  }
}

struct AttShape {
  const char* name;
  int n_embd, n_head, n_head_kv;
  int head_dim() const { return n_embd / n_head; }
  int n_embd_kv() const { return n_head_kv * head_dim(); }
};

TEST(ClCpuFused, QkvRopeAttentionMatchesTheSeparateKernels) {
  const auto tunings = cpu_tunings();
  if (tunings.empty()) GTEST_SKIP() << "no CPU kernels on this device";
  const AttShape shapes[] = {
      {"stories", 64, 8, 4}, {"smollm2", 576, 9, 3}, {"mha", 128, 4, 4}, {"mqa", 128, 4, 1}};
  const int n_ctx = 16, layer = 1, n_layer = 2;
  const ClRuntime& rt = test::cl_test_runtime();
  for (const AttShape& s : shapes) {
    SCOPED_TRACE(s.name);
    const int n_embd = s.n_embd, n_kv = s.n_embd_kv(), hd = s.head_dim(),
              n_rows = n_embd + 2 * n_kv;
    const auto x = test::random_floats(size_t(n_embd), 11, -2.0f, 2.0f);
    const auto g = test::random_floats(size_t(n_embd), 12, 0.5f, 1.5f);
    const auto cs = test::random_floats(size_t(n_ctx) * size_t(hd), 13);  // (cos, sin) pairs
    const size_t n_cache = size_t(n_layer) * n_ctx * n_kv;
    const auto cache0 = test::random_floats(n_cache, 14);
    const ClMem x_dev = test::cl_buffer(x), g_dev = test::cl_buffer(g),
                cs_dev = test::cl_buffer(cs);
    for (GgmlType type : {GgmlType::F32, GgmlType::Q4_0}) {
      SCOPED_TRACE(ggml_type_name(type));
      const test::TestMatrix w = test::make_test_matrix(type, n_embd, n_rows, 15);
      for (const KernelTuning& t : tunings) {
        SCOPED_TRACE(test::describe(t));
        ClPrograms& progs = test::cl_programs(t);
        const size_t wg = size_t(t.matvec_wg());
        const size_t global = test::round_up(size_t(n_rows), size_t(t.rows)) / t.rows * wg;
        for (const int pos : {0, 3, n_ctx - 1}) {
          SCOPED_TRACE("pos " + std::to_string(pos));
          const cl_ulong layer_off = cl_ulong(layer) * n_ctx * n_kv;
          const cl_ulong cache_off = layer_off + cl_ulong(pos) * n_kv;
          struct Outputs {
            std::vector<float> q, k, v, att;
          };
          auto run = [&](bool fused, int times) {
            const ClMem q = rt.alloc(size_t(n_embd) * 4), att = rt.alloc(size_t(n_embd) * 4),
                        scores = rt.alloc(size_t(s.n_head) * n_ctx * 4);
            const ClMem k_cache = test::cl_buffer(cache0), v_cache = test::cl_buffer(cache0);
            const ClMem head_done = test::cl_buffer(std::vector<cl_uint>(size_t(s.n_head), 0));
            test::cl_poison(q, size_t(n_embd));
            test::cl_poison(att, size_t(n_embd));
            const ClKernel k =
                fused ? progs.qkv_attention_kernel(type) : progs.weight_kernel(type, "qkv_rope");
            set_args(k, w.dev.q, w.dev.s, cl_int(n_embd), cl_int(n_rows), cl_int(0), x_dev, g_dev,
                     k_rms_eps, cl_int(n_embd), cl_int(n_kv), cl_int(hd), cl_int(hd), cs_dev,
                     cl_int(pos), q, k_cache, v_cache, cache_off);
            if (fused) {  // the attention's arguments follow qkv_rope's 18
              for (auto [i, v] : {std::pair{18, s.n_head}, {19, s.n_head_kv}, {21, n_ctx}}) {
                set_arg(k.get(), cl_uint(i), cl_int(v));
              }
              set_arg(k.get(), 20, scores);
              set_arg(k.get(), 22, att);
              set_arg(k.get(), 23, head_done);
            }
            for (int i = 0; i < times; ++i) test::cl_run(k, global, wg);
            if (!fused) {
              const ClKernel a = progs.attention_kernel();
              set_args(a, q, k_cache, v_cache, layer_off, cl_int(pos + 1), cl_int(n_ctx),
                       cl_int(n_ctx), cl_int(s.n_head), cl_int(s.n_head_kv), cl_int(hd), scores,
                       cl_int(n_ctx), att);
              test::cl_run(a, size_t(s.n_head) * t.att_wg, size_t(t.att_wg));
            } else {
              EXPECT_EQ(test::cl_read<cl_uint>(head_done, size_t(s.n_head)),
                        std::vector<cl_uint>(size_t(s.n_head), 0))
                  << "counters not reset";
            }
            return Outputs{test::cl_read(q, size_t(n_embd)), test::cl_read(k_cache, n_cache),
                           test::cl_read(v_cache, n_cache), test::cl_read(att, size_t(n_embd))};
          };
          const Outputs want = run(false, 1), got = run(true, 2);
          EXPECT_LE(test::relative_error(got.q, want.q), 1e-5) << "q";
          EXPECT_LE(test::relative_error(got.k, want.k), 1e-5) << "k cache";
          EXPECT_LE(test::relative_error(got.v, want.v), 1e-5) << "v cache";
          EXPECT_LE(test::relative_error(got.att, want.att), 1e-5) << "attention";
        }
      }
    }
  }
}

}  // namespace
}  // namespace clchat
