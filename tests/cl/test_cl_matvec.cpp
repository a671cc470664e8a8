// The kernels of kernels/matvec.cl and matvec_cpu.cl (matvec, ffn_gate_up,
// qkv_rope; get_row only in matvec.cl) on
// the CPU OpenCL device (PoCL) against float64 references, for every weight
// type a row allows, at the matrix shapes of the reference models:
//   stories260K  embd 64, kv 32, ff 172 (not a multiple of 32), vocab 512
//   tiny-random  embd 8, kv 8, ff 32, vocab 32000
//   SmolLM2      embd 576, kv 192, ff 1536, vocab 49152
//   synthetic    embd 128, kv 64, ff 256 (the small models of test_cl_forward)
// Each kernel runs with the device's tuning (on a CPU device kernels/
// matvec_cpu.cl, also with its variants: 2 rows per work-item, no x86
// builtin) and GPU-like ones of matvec.cl (8 and 4 work-items
// per row), so the reduction over a row's work-items is tested on a CPU too.
// The reference multiplies the floats that the same quantized bytes decode
// to, so the only error left is float32 accumulation:
// ||delta|| / ||ref|| <= 1e-4 with F32/F16 weights, <= 1e-3 with quantized
// ones. Outputs are poisoned with NaN before every launch, and padding past
// the end of each output must still be NaN afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

using test::cl_buffer;
using test::cl_poison;
using test::cl_programs;
using test::cl_read;
using test::cl_run;
using test::TestMatrix;

constexpr float k_eps = 1e-5f;
constexpr size_t k_pad = 16;  // poisoned floats past each output

double tolerance(GgmlType t) { return ggml_is_quantized(t) ? 1e-3 : 1e-4; }

// ---- float64 references ----------------------------------------------------

std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// W (rows x n_in, float) @ x -> (rows,), rows [row0, row0 + rows).
std::vector<double> ref_matvec(const std::vector<float>& w, const std::vector<double>& x, int n_in,
                               int row0, int rows) {
  std::vector<double> out(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const float* row = w.data() + size_t(row0 + r) * size_t(n_in);
    double sum = 0;
    for (int i = 0; i < n_in; ++i) sum += double(row[i]) * x[size_t(i)];
    out[size_t(r)] = sum;
  }
  return out;
}

// x / sqrt(mean(x^2) + eps) * g
std::vector<double> ref_rmsnorm(const std::vector<float>& x, const std::vector<float>& g) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / double(x.size()) + double(k_eps));
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) * scale * double(g[i]);
  return out;
}

// ---- matvec -----------------------------------------------------------------

struct MatShape {
  const char* name;
  int n_in;
  int rows;
};

// Every matrix shape of the reference models (row length x rows).
constexpr MatShape k_matrix_shapes[] = {
    {"stories_wq_wo", 64, 64},    {"stories_wk_wv", 64, 32},      {"stories_gate_up", 64, 172},
    {"stories_down", 172, 64},    {"stories_output", 64, 512},    {"tiny_wq_wk_wv_wo", 8, 8},
    {"tiny_gate_up", 8, 32},      {"tiny_down", 32, 8},           {"tiny_output", 8, 32000},
    {"smollm2_wq_wo", 576, 576},  {"smollm2_wk_wv", 576, 192},    {"smollm2_gate_up", 576, 1536},
    {"smollm2_down", 1536, 576},  {"smollm2_output", 576, 49152}, {"synthetic_wk_wv", 128, 64},
    {"synthetic_down", 256, 128}, {"odd_rows", 64, 37},  // not a whole number of matvec_cpu.cl's
                                                         // row groups
};

struct MatrixCase {
  MatShape shape;
  GgmlType type;
};
void PrintTo(const MatrixCase& c, std::ostream* os) {
  *os << c.shape.name << " " << c.shape.n_in << "x" << c.shape.rows << " "
      << ggml_type_name(c.type);
}

std::vector<MatrixCase> matrix_cases() {
  std::vector<MatrixCase> cases;
  for (const MatShape& s : k_matrix_shapes) {
    for (GgmlType t : test::types_for_row(s.n_in)) cases.push_back({s, t});
  }
  return cases;
}

std::string matrix_case_name(const testing::TestParamInfo<MatrixCase>& info) {
  return std::string(info.param.shape.name) + "_" + ggml_type_name(info.param.type);
}

class ClMatvec : public testing::TestWithParam<MatrixCase> {};

// out = W x, out = W rmsnorm(x) (fused norm), out += W x (residual).
TEST_P(ClMatvec, PlainNormAndAccumulateMatchReference) {
  const auto [shape, type] = GetParam();
  const uint32_t seed = uint32_t(shape.n_in * 7919 + shape.rows);
  const TestMatrix w = test::make_test_matrix(type, shape.n_in, shape.rows, seed);
  const auto x = test::random_floats(size_t(shape.n_in), seed + 1);
  const auto g = test::random_floats(size_t(shape.n_in), seed + 2, 0.5f, 1.5f);
  const auto init = test::random_floats(size_t(shape.rows), seed + 3);

  const auto ref_plain = ref_matvec(w.values, to_f64(x), shape.n_in, 0, shape.rows);
  const auto ref_norm = ref_matvec(w.values, ref_rmsnorm(x, g), shape.n_in, 0, shape.rows);
  auto ref_acc = ref_plain;
  for (size_t r = 0; r < ref_acc.size(); ++r) ref_acc[r] += init[r];

  const ClMem x_dev = cl_buffer(x), g_dev = cl_buffer(g);
  const ClMem none;
  const size_t n_out = size_t(shape.rows) + k_pad;
  const ClMem out = test::cl_test_runtime().alloc(n_out * 4);
  for (const KernelTuning& t : test::matvec_tunings()) {
    SCOPED_TRACE(test::describe(cl_programs(t).tuning()));
    const ClKernel k = cl_programs(t).weight_kernel(type, "matvec");
    const size_t wg = size_t(t.matvec_wg());
    const size_t global = test::round_up(size_t(shape.rows), size_t(t.rows)) / t.rows * wg;
    for (int mode = 0; mode < 3; ++mode) {  // plain, norm, accumulate
      SCOPED_TRACE(mode == 0 ? "plain" : mode == 1 ? "norm" : "accumulate");
      cl_poison(out, n_out);
      if (mode == 2) {
        cl_check(clEnqueueWriteBuffer(test::cl_test_runtime().queue(), out.get(), CL_TRUE, 0,
                                      init.size() * 4, init.data(), 0, nullptr, nullptr),
                 "clEnqueueWriteBuffer");
      }
      set_args(k, w.dev.q, w.dev.s, cl_int(shape.n_in), cl_int(shape.rows), x_dev,
               mode == 1 ? g_dev : none, k_eps, cl_int(mode == 2 ? 1 : 0), out);
      cl_run(k, global, wg);
      const auto got = cl_read(out, n_out);
      const auto& ref = mode == 0 ? ref_plain : mode == 1 ? ref_norm : ref_acc;
      EXPECT_LE(test::relative_error(std::span(got).first(size_t(shape.rows)), ref),
                tolerance(type));
      EXPECT_EQ(test::count_overwritten(got, size_t(shape.rows)), 0u) << "write past the rows";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClMatvec, testing::ValuesIn(matrix_cases()), matrix_case_name);

// x with an all-zero block, blocks of very different magnitude (1e-30 and
// 1e20), and then inf or NaN in one value: every row must stay finite and
// match the reference, then none may be finite (float arithmetic spreads inf
// or NaN to every row: Q4_0's offset and Q4_1's minimum use block sums of x).
TEST(ClMatvecEdges, ZeroTinyHugeAndNonFiniteInputs) {
  const int n_in = 256, rows = 24;
  const float k_inf = std::numeric_limits<float>::infinity();
  auto x = test::random_floats(size_t(n_in), 5);
  for (int i = 0; i < 32; ++i) {
    x[size_t(i)] = 0.0f;          // block 0: zeros
    x[size_t(32 + i)] *= 1e-30f;  // block 1: tiny
    x[size_t(64 + i)] *= 1e20f;   // block 2: huge
  }
  const ClMem none;
  const ClMem out = test::cl_test_runtime().alloc((rows + k_pad) * 4);
  for (GgmlType type : test::types_for_row(n_in)) {
    SCOPED_TRACE(ggml_type_name(type));
    const TestMatrix w = test::make_test_matrix(type, n_in, rows, 99);
    for (const KernelTuning& t : test::matvec_tunings()) {
      SCOPED_TRACE(test::describe(cl_programs(t).tuning()));
      const ClKernel k = cl_programs(t).weight_kernel(type, "matvec");
      const size_t wg = size_t(t.matvec_wg());
      const size_t global = test::round_up(size_t(rows), size_t(t.rows)) / t.rows * wg;
      for (const float poison : {0.0f, k_inf, -k_inf, std::numeric_limits<float>::quiet_NaN()}) {
        SCOPED_TRACE("x[100] = " + std::to_string(poison));
        auto xp = x;
        if (poison != 0.0f) xp[100] = poison;  // NaN != 0 too
        const ClMem x_dev = cl_buffer(xp);
        cl_poison(out, rows + k_pad);
        set_args(k, w.dev.q, w.dev.s, cl_int(n_in), cl_int(rows), x_dev, none, k_eps, cl_int(0),
                 out);
        cl_run(k, global, wg);
        const auto got = cl_read(out, rows + k_pad);
        size_t finite = 0;
        for (int r = 0; r < rows; ++r) finite += std::isfinite(got[size_t(r)]);
        if (xp[100] == x[100]) {
          EXPECT_EQ(finite, size_t(rows));
          EXPECT_LE(test::relative_error(std::span(got).first(size_t(rows)),
                                         ref_matvec(w.values, to_f64(xp), n_in, 0, rows)),
                    tolerance(type));
        } else {
          EXPECT_EQ(finite, 0u);
        }
        EXPECT_EQ(test::count_overwritten(got, size_t(rows)), 0u) << "write past the rows";
      }
    }
  }
}

// ---- ffn_gate_up -------------------------------------------------------------

struct FfnShape {
  const char* name;
  int n_embd;
  int n_ff;
};
constexpr FfnShape k_ffn_shapes[] = {
    {"stories", 64, 172},     {"tiny", 8, 32},     {"smollm2", 576, 1536}, {"synthetic", 128, 256},
    {"rows_2_mod_4", 64, 90}, {"kquant", 256, 512}};  // whole 256-value super-blocks

struct FfnCase {
  FfnShape shape;
  GgmlType type;
};
void PrintTo(const FfnCase& c, std::ostream* os) {
  *os << c.shape.name << " " << c.shape.n_embd << "->" << c.shape.n_ff << " "
      << ggml_type_name(c.type);
}

std::vector<FfnCase> ffn_cases() {
  std::vector<FfnCase> cases;
  for (const FfnShape& s : k_ffn_shapes) {
    for (GgmlType t : test::types_for_row(s.n_embd)) cases.push_back({s, t});
  }
  return cases;
}

class ClFfnGateUp : public testing::TestWithParam<FfnCase> {};

// h = act(Wg xn) * (Wu xn), xn = rmsnorm(x) * g, act SiLU and GELU (tanh).
TEST_P(ClFfnGateUp, MatchesReference) {
  const auto [shape, type] = GetParam();
  const uint32_t seed = uint32_t(shape.n_embd * 31 + shape.n_ff);
  const TestMatrix gate = test::make_test_matrix(type, shape.n_embd, shape.n_ff, seed);
  const TestMatrix up = test::make_test_matrix(type, shape.n_embd, shape.n_ff, seed + 1);
  const auto x = test::random_floats(size_t(shape.n_embd), seed + 2, -2.0f, 2.0f);
  const auto g = test::random_floats(size_t(shape.n_embd), seed + 3, 0.5f, 1.5f);

  const auto xn = ref_rmsnorm(x, g);
  const auto ref_gate = ref_matvec(gate.values, xn, shape.n_embd, 0, shape.n_ff);
  const auto ref_up = ref_matvec(up.values, xn, shape.n_embd, 0, shape.n_ff);
  const ClMem x_dev = cl_buffer(x), g_dev = cl_buffer(g);
  const size_t n_out = size_t(shape.n_ff) + k_pad;
  const ClMem h = test::cl_test_runtime().alloc(n_out * 4);
  for (int act : {0, 1}) {
    SCOPED_TRACE(act ? "gelu" : "silu");
    std::vector<double> ref(static_cast<size_t>(shape.n_ff));
    for (size_t r = 0; r < ref.size(); ++r) {
      const double gv = ref_gate[r];
      const double a =
          act ? 0.5 * gv * (1.0 + std::tanh(0.7978845608028654 * (gv + 0.044715 * gv * gv * gv)))
              : gv / (1.0 + std::exp(-gv));
      ref[r] = a * ref_up[r];
    }
    for (const KernelTuning& t : test::matvec_tunings()) {
      SCOPED_TRACE(test::describe(cl_programs(t).tuning()));
      const ClKernel k = cl_programs(t).weight_kernel(type, "ffn_gate_up");
      const size_t wg = size_t(t.matvec_wg());
      cl_poison(h, n_out);
      set_args(k, gate.dev.q, gate.dev.s, up.dev.q, up.dev.s, cl_int(shape.n_embd),
               cl_int(shape.n_ff), x_dev, g_dev, k_eps, cl_int(act), h);
      cl_run(k, test::round_up(size_t(shape.n_ff), size_t(t.rows)) / t.rows * wg, wg);
      const auto got = cl_read(h, n_out);
      EXPECT_LE(test::relative_error(std::span(got).first(size_t(shape.n_ff)), ref),
                tolerance(type));
      EXPECT_EQ(test::count_overwritten(got, size_t(shape.n_ff)), 0u) << "write past n_ff";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClFfnGateUp, testing::ValuesIn(ffn_cases()),
                         [](const testing::TestParamInfo<FfnCase>& info) {
                           return std::string(info.param.shape.name) + "_" +
                                  ggml_type_name(info.param.type);
                         });

// ---- qkv_rope -----------------------------------------------------------------

struct QkvShape {
  const char* name;
  int n_embd, n_head, n_head_kv, n_rot;
  float freq_base;
  int n_ctx;
  int head_dim() const { return n_embd / n_head; }
  int n_embd_kv() const { return n_head_kv * head_dim(); }
};
constexpr QkvShape k_qkv_shapes[] = {
    {"stories", 64, 8, 4, 8, 10000.0f, 2048},      {"tiny", 8, 2, 2, 4, 10000.0f, 4096},
    {"smollm2", 576, 9, 3, 64, 100000.0f, 8192},   {"synthetic", 128, 4, 2, 32, 10000.0f, 2048},
    {"partial_rope", 64, 4, 2, 8, 10000.0f, 1024},  // n_rot 8 < head_dim 16
    {"kquant", 256, 4, 2, 64, 10000.0f, 1024},      // rows of whole 256-value super-blocks
};

struct QkvCase {
  QkvShape shape;
  GgmlType type;
};
void PrintTo(const QkvCase& c, std::ostream* os) {
  *os << c.shape.name << " embd " << c.shape.n_embd << " heads " << c.shape.n_head << "/"
      << c.shape.n_head_kv << " " << ggml_type_name(c.type);
}

std::vector<QkvCase> qkv_cases() {
  std::vector<QkvCase> cases;
  for (const QkvShape& s : k_qkv_shapes) {
    for (GgmlType t : test::types_for_row(s.n_embd)) cases.push_back({s, t});
  }
  return cases;
}

// (cos, sin) of pos * base^(-2i / n_rot) for every position and pair, as the
// engine's table holds them.
std::vector<float> rope_table(const QkvShape& s) {
  std::vector<float> cs(size_t(s.n_ctx) * size_t(s.n_rot));
  for (int pos = 0; pos < s.n_ctx; ++pos) {
    for (int i = 0; i < s.n_rot / 2; ++i) {
      const double theta = pos * std::pow(double(s.freq_base), -2.0 * i / s.n_rot);
      cs[(size_t(pos) * size_t(s.n_rot / 2) + size_t(i)) * 2] = float(std::cos(theta));
      cs[(size_t(pos) * size_t(s.n_rot / 2) + size_t(i)) * 2 + 1] = float(std::sin(theta));
    }
  }
  return cs;
}

class ClQkvRope : public testing::TestWithParam<QkvCase> {};

// One launch over the stacked [Wq; Wk; Wv] (all of `type`), and three launches
// with row_base 0, n_embd, n_embd + n_embd_kv over matrices of three different
// types (the engine's path when Wq, Wk and Wv differ). q must hold rope(Wq xn),
// and only the cache slot at cache_off rope(Wk xn) and Wv xn.
TEST_P(ClQkvRope, StackedAndSplitMatchReference) {
  const auto [s, type] = GetParam();
  const int n_embd = s.n_embd, n_kv = s.n_embd_kv();
  const uint32_t seed = uint32_t(n_embd * 131 + int(type));
  const auto types = test::types_for_row(n_embd);
  size_t ti = 0;
  while (types[ti] != type) ++ti;
  const GgmlType split_types[3] = {type, types[(ti + 1) % types.size()],
                                   types[(ti + 2) % types.size()]};

  const auto x = test::random_floats(size_t(n_embd), seed, -2.0f, 2.0f);
  const auto g = test::random_floats(size_t(n_embd), seed + 1, 0.5f, 1.5f);
  const auto values = test::random_floats(size_t(n_embd + 2 * n_kv) * size_t(n_embd), seed + 2);
  const TestMatrix stacked = test::make_test_matrix(type, values, n_embd, n_embd + 2 * n_kv);
  auto part = [&](int row0, int rows) {
    return std::vector<float>(values.begin() + ptrdiff_t(row0) * n_embd,
                              values.begin() + ptrdiff_t(row0 + rows) * n_embd);
  };
  const TestMatrix split[3] = {
      test::make_test_matrix(split_types[0], part(0, n_embd), n_embd, n_embd),
      test::make_test_matrix(split_types[1], part(n_embd, n_kv), n_embd, n_kv),
      test::make_test_matrix(split_types[2], part(n_embd + n_kv, n_kv), n_embd, n_kv)};

  const auto cs = rope_table(s);
  const ClMem x_dev = cl_buffer(x), g_dev = cl_buffer(g), cs_dev = cl_buffer(cs);
  const ClRuntime& rt = test::cl_test_runtime();
  const ClMem q = rt.alloc((size_t(n_embd) + k_pad) * 4);
  // Three cache slots; the kernel writes the middle one.
  const size_t n_cache = 3 * size_t(n_kv);
  const ClMem k_cache = rt.alloc(n_cache * 4), v_cache = rt.alloc(n_cache * 4);
  const cl_ulong cache_off = cl_ulong(n_kv);

  const auto xn = ref_rmsnorm(x, g);
  for (const int pos : {0, 1, 5, 100, s.n_ctx - 1}) {
    SCOPED_TRACE("pos " + std::to_string(pos));
    for (int variant = 0; variant < 2; ++variant) {  // stacked, split
      SCOPED_TRACE(variant == 0 ? "stacked" : "split");
      // Reference: projections of the exact weights, then RoPE (cpu::rope).
      const std::vector<float>* w[3] = {&stacked.values, &stacked.values, &stacked.values};
      int row0[3] = {0, n_embd, n_embd + n_kv};
      if (variant == 1) {
        for (int m = 0; m < 3; ++m) {
          w[m] = &split[m].values;
          row0[m] = 0;
        }
      }
      std::vector<double> ref[3];
      ref[0] = ref_matvec(*w[0], xn, n_embd, row0[0], n_embd);
      ref[1] = ref_matvec(*w[1], xn, n_embd, row0[1], n_kv);
      ref[2] = ref_matvec(*w[2], xn, n_embd, row0[2], n_kv);
      for (int m = 0; m < 2; ++m) {
        std::vector<float> f(ref[m].begin(), ref[m].end());
        cpu::rope(f.data(), m == 0 ? s.n_head : s.n_head_kv, s.head_dim(), pos,
                  {RopeStyle::Adjacent, s.n_rot, s.freq_base});
        ref[m].assign(f.begin(), f.end());
      }
      const double tol[3] = {
          tolerance(variant == 0 ? type : split_types[0]),
          tolerance(variant == 0 ? type : split_types[1]),
          tolerance(variant == 0 ? type : split_types[2]),
      };

      for (const KernelTuning& t : test::matvec_tunings()) {
        SCOPED_TRACE(test::describe(cl_programs(t).tuning()));
        cl_poison(q, size_t(n_embd) + k_pad);
        cl_poison(k_cache, n_cache);
        cl_poison(v_cache, n_cache);
        const size_t wg = size_t(t.matvec_wg());
        auto launch = [&](const TestMatrix& m, int row_base) {
          const ClKernel k = cl_programs(t).weight_kernel(m.type, "qkv_rope");
          set_args(k, m.dev.q, m.dev.s, cl_int(n_embd), cl_int(m.rows), cl_int(row_base), x_dev,
                   g_dev, k_eps, cl_int(n_embd), cl_int(n_kv), cl_int(s.head_dim()),
                   cl_int(s.n_rot), cs_dev, cl_int(pos), q, k_cache, v_cache, cache_off);
          cl_run(k, test::round_up(size_t(m.rows), size_t(t.rows)) / t.rows * wg, wg);
        };
        if (variant == 0) {
          launch(stacked, 0);
        } else {
          launch(split[0], 0);
          launch(split[1], n_embd);
          launch(split[2], n_embd + n_kv);
        }
        const auto got_q = cl_read(q, size_t(n_embd) + k_pad);
        const auto got_k = cl_read(k_cache, n_cache);
        const auto got_v = cl_read(v_cache, n_cache);
        const std::span<const float> gq(got_q), gk(got_k), gv(got_v);
        EXPECT_LE(test::relative_error(gq.first(size_t(n_embd)), ref[0]), tol[0]) << "q";
        EXPECT_LE(test::relative_error(gk.subspan(size_t(n_kv), size_t(n_kv)), ref[1]), tol[1])
            << "k";
        EXPECT_LE(test::relative_error(gv.subspan(size_t(n_kv), size_t(n_kv)), ref[2]), tol[2])
            << "v";
        EXPECT_EQ(test::count_overwritten(got_q, size_t(n_embd)), 0u) << "write past q";
        for (const auto* c : {&got_k, &got_v}) {
          size_t outside = 0;
          for (size_t i = 0; i < n_cache; ++i) {
            if (i / size_t(n_kv) != 1) outside += !std::isnan((*c)[i]);
          }
          EXPECT_EQ(outside, 0u) << "write outside the cache slot at cache_off";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClQkvRope, testing::ValuesIn(qkv_cases()),
                         [](const testing::TestParamInfo<QkvCase>& info) {
                           return std::string(info.param.shape.name) + "_" +
                                  ggml_type_name(info.param.type);
                         });

// ---- get_row --------------------------------------------------------------------

struct EmbdShape {
  const char* name;
  int n_embd;
  int n_vocab;
};
void PrintTo(const EmbdShape& s, std::ostream* os) {
  *os << s.name << " " << s.n_embd << "x" << s.n_vocab;
}
constexpr EmbdShape k_embd_shapes[] = {{"stories", 64, 512},
                                       {"tiny", 8, 32000},
                                       {"smollm2", 576, 49152},
                                       {"synthetic", 128, 512},
                                       {"kquant", 512, 300}};

class ClGetRow : public testing::TestWithParam<EmbdShape> {};

// x = row ids[token_index] of the embedding, for every type, with the id read
// from the device buffer (first, last and middle rows).
TEST_P(ClGetRow, EveryTypeMatchesDequantizedRow) {
  const EmbdShape s = GetParam();
  const auto values = test::random_floats(size_t(s.n_embd) * size_t(s.n_vocab), 77);
  const std::vector<int32_t> ids = {3, 0, s.n_vocab - 1, s.n_vocab / 2 + 1};
  const ClMem ids_dev = cl_buffer(ids);
  const size_t n_out = size_t(s.n_embd) + k_pad;
  const ClMem x = test::cl_test_runtime().alloc(n_out * 4);
  const KernelTuning tuning = KernelTuning::for_device(test::cl_test_runtime().device());
  for (GgmlType type : test::types_for_row(s.n_embd)) {
    SCOPED_TRACE(ggml_type_name(type));
    const TestMatrix w = test::make_test_matrix(type, values, s.n_embd, s.n_vocab);
    const ClKernel k = cl_programs(tuning).weight_kernel(type, "get_row");
    for (size_t ti = 0; ti < ids.size(); ++ti) {
      SCOPED_TRACE("token " + std::to_string(ids[ti]));
      cl_poison(x, n_out);
      set_args(k, w.dev.q, w.dev.s, cl_int(s.n_embd), ids_dev, cl_int(ti), x);
      cl_run(k, size_t(s.n_embd), 0);
      const auto got = cl_read(x, n_out);
      const auto row = w.values.begin() + ptrdiff_t(ids[ti]) * s.n_embd;
      const std::vector<double> ref(row, row + s.n_embd);
      // One multiply(-add) per value: only the last bit may differ.
      EXPECT_LE(test::relative_error(std::span(got).first(size_t(s.n_embd)), ref), 1e-6);
      EXPECT_EQ(test::count_overwritten(got, size_t(s.n_embd)), 0u) << "write past n_embd";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClGetRow, testing::ValuesIn(k_embd_shapes),
                         [](const testing::TestParamInfo<EmbdShape>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace clchat
