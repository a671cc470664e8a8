// The kernels of kernels/matmul.cl (matmul, embed_rows) and
// kernels/prefill_ops.cl (rmsnorm_rows, rope_kv_rows, silu_mul) on the OpenCL
// test device (PoCL unless CLCHAT_TEST_DEVICE says otherwise) against float64
// references on random inputs, every weight type a row allows:
//   - matmul at the shapes of the reference models' prefill (row lengths 8,
//     64, 128, 172 (F32/F16 only: not whole blocks), 576, 1536), token counts
//     1, 7, 33, 100, plain, accumulating into a residual, and writing into a
//     column range of a wider output (the stacked q;k;v when types differ);
//     with the device's tuning, the GPU tuning and an odd one (1 row per
//     work-item, tiles of 3 x 10), so edge tiles are tested on a CPU too;
//   - matmul_x16 (kernels/matmul_x16.cl, 16-bit activations) for Q4_0, Q4_1,
//     Q5_1, Q8_0, Q4_K, Q5_K and Q6_K at the shapes their rows allow, the same token
//     counts and modes, with the CPU default tiling, an odd one and the
//     portable code: against the float64 product with x quantized as the
//     kernel's definition says (written in the test from that definition,
//     1e-5) and the exact one (the quantized weights' tolerance);
//   - embed_rows for every type, ids read from the device at an offset.
//   - on NVIDIA's OpenCL only (skipped elsewhere, saying so): the tensor-core
//     kernel kernels/matmul_mma_deq.cl for the quantized types, same cases,
//     after pack_x_f16, with the default tile, its widened form, a 2 x
//     2-warp one, a small odd one (1 warp, 1 block per stage), a 3 x 2-warp
//     one with 3-block stages, copy rings of 2 and 4 buffers, split-K over
//     2, 3 and 4 work-groups and the large tiles (256 and 192 rows) unsplit
//     and split: against the
//     product of the weights and x rounded to fp16 as the kernel defines
//     them (1e-5; types with integer or fp16 scales) and the exact product
//     (1e-3); and the packs that compute their input (rmsnorm_pack_f16,
//     glu_pack_f16 with SiLU and GELU) against float64, unpacked.
// The reference multiplies the floats the same quantized bytes decode to, so
// ||delta|| / ||ref|| <= 1e-4 for F32/F16 and <= 1e-3 for quantized weights.
// Outputs are NaN-poisoned before each launch, with poisoned padding after
// them (and around the written column range) that must stay NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cl/prefill.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

using test::cl_buffer;
using test::cl_poison;
using test::cl_read;
using test::TestMatrix;

constexpr size_t k_pad = 16;

double tolerance(GgmlType t) { return ggml_is_quantized(t) ? 1e-3 : 1e-4; }

const std::string& build_options() {
  static const std::string o =
      KernelTuning::for_device(test::cl_test_runtime().device()).build_options;
  return o;
}

// The tunings every matmul test runs with.
std::vector<PrefillTuning> matmul_tunings() {
  const PrefillTuning device = PrefillTuning::for_device(test::cl_test_runtime().device());
  PrefillTuning gpu;  // the struct's defaults are the GPU ones
  PrefillTuning odd = device, odd_direct = device;
  odd.mm_direct = false;
  odd.mm_vr = 1;
  odd.mm_nr = 3;
  odd.mm_wt = 5;
  odd.mm_nt = 2;
  odd_direct.mm_direct = true;
  odd_direct.mm_vr = 3;
  odd_direct.mm_nr = 2;
  odd_direct.mm_wt = 5;
  odd_direct.mm_nt = 3;
  return {device, gpu, odd, odd_direct};
}

std::string describe(const PrefillTuning& t) {
  return "vr " + std::to_string(t.mm_vr) + " nr " + std::to_string(t.mm_nr) + " wt " +
         std::to_string(t.mm_wt) + " nt " + std::to_string(t.mm_nt) +
         (t.mm_direct ? " direct" : "");
}

// Programs built once per binary, by stem and defines.
ClKernel build_kernel(const std::string& stem, const std::string& defines, const char* name) {
  static std::map<std::string, ClProgram> programs;
  const ClRuntime& rt = test::cl_test_runtime();
  auto& p = programs[stem + defines];
  if (!p) p = rt.build_program(stem, kernel_source(stem), build_options() + defines);
  return rt.create_kernel(p, name);
}

ClKernel matmul_kernel(GgmlType type, const PrefillTuning& t, const char* name = "matmul") {
  return build_kernel("quant_blocks+matmul", ClPrefill::matmul_defines(type, t), name);
}

bool device_is_nvidia() {
  return test::cl_test_runtime().device().platform_name.find("NVIDIA") != std::string::npos;
}

// A tensor-core tiling and its split-K (matmul_mma_deq.cl's MMA_SPLIT).
struct MmaTiling {
  PrefillTuning tile;
  int split = 1;
};

// The tilings of the tensor-core tests: the default, its widened form (as
// ClPrefill's mma_widen), a 2 x 2-warp one, a small odd one (1 warp, 1
// block per stage), a 3 x 2-warp one with 3-block stages, copy rings of 2
// and 4 buffers, split-K over 2 (widened, as ClPrefill splits), 3 and 4
// (the small one: uneven shares of the stages) work-groups, and the large
// tiles (mma_large) as ClPrefill runs them: 256 rows unsplit and split over
// 4, 192 rows unsplit and split over 2 and 3.
std::vector<MmaTiling> mma_tunings() {
  PrefillTuning def, widened, square, small, wide, ring2, ring4;
  widened.mma_nj *= 2;
  square.mma_mi = 2;
  square.mma_nj = 4;
  square.mma_wr = 2;
  square.mma_wn = 2;
  small.mma_mi = 1;
  small.mma_nj = 1;
  small.mma_wr = 1;
  small.mma_wn = 1;
  small.mma_kb = 1;
  wide.mma_mi = 1;
  wide.mma_nj = 2;
  wide.mma_wr = 3;
  wide.mma_wn = 2;
  wide.mma_kb = 3;
  ring2.mma_stages = 2;
  ring4.mma_stages = 4;
  return {{def},
          {widened},
          {square},
          {small},
          {wide},
          {ring2},
          {ring4},
          {widened, 2},
          {def, 3},
          {small, 4},
          {def.large_tile(1)},
          {def.large_tile(4), 4},
          {def.large_tile(1, 3)},
          {def.large_tile(2, 3), 2},
          {def.large_tile(3, 3), 3}};
}

std::string describe_mma(const MmaTiling& m) {
  const PrefillTuning& t = m.tile;
  return "mma mi " + std::to_string(t.mma_mi) + " nj " + std::to_string(t.mma_nj) + " wr " +
         std::to_string(t.mma_wr) + " wn " + std::to_string(t.mma_wn) + " kb " +
         std::to_string(t.mma_kb) + " stages " + std::to_string(t.mma_stages) + " split " +
         std::to_string(m.split);
}

void run_2d(const ClKernel& k, size_t g0, size_t g1, size_t l0, size_t l1) {
  const ClRuntime& rt = test::cl_test_runtime();
  const size_t global[2] = {g0, g1}, local[2] = {l0, l1};
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k.get(), 2, nullptr, global, l0 ? local : nullptr, 0,
                                  nullptr, nullptr),
           "clEnqueueNDRangeKernel");
  rt.finish();
}

// Launches matmul over n_tok tokens.
void run_matmul(const ClKernel& k, const PrefillTuning& t, int rows, int n_tok) {
  run_2d(k, test::round_up(size_t(rows), size_t(t.tile_rows())) / t.tile_rows() * t.mm_nr,
         test::round_up(size_t(n_tok), size_t(t.tile_tokens())) / t.tile_tokens() * t.mm_nt,
         size_t(t.mm_nr), size_t(t.mm_nt));
}

// ---- matmul -------------------------------------------------------------------

struct MatmulShape {
  const char* name;
  int n_in, rows;
};
constexpr MatmulShape k_shapes[] = {
    {"tiny_qkv", 8, 24},
    {"stories_gate", 64, 172},
    {"stories_down", 172, 64},
    {"synthetic_qkv", 128, 256},
    {"smollm2_qkv", 576, 960},
    {"smollm2_down", 1536, 576},
    {"stories_output", 64, 512},
    // an odd block count in the matrix (3 x 37): 2-byte scales a row apart
    // in different halves of their words
    {"odd_blocks", 96, 37},
};
constexpr int k_token_counts[] = {1, 7, 33, 100};

struct MatmulCase {
  MatmulShape shape;
  GgmlType type;
};
void PrintTo(const MatmulCase& c, std::ostream* os) {
  *os << c.shape.name << " " << c.shape.n_in << "x" << c.shape.rows << " "
      << ggml_type_name(c.type);
}

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> cases;
  for (const MatmulShape& s : k_shapes) {
    for (GgmlType t : test::types_for_row(s.n_in)) cases.push_back({s, t});
  }
  return cases;
}

class ClMatmul : public testing::TestWithParam<MatmulCase> {};

// Runs one kernel variant: out (+)= W x for n_tok tokens of n_in values
// (token t at x + t * n_in), written at column off of rows ld floats apart.
using RunVariant = std::function<void(const TestMatrix& w, const ClMem& x, int n_tok,
                                      const ClMem& out, int ld, int off, bool accumulate)>;

// A variant, its name, and how its reference quantizes the activations
// (test::sixteen_bit's group; 0: the given ones).
struct Variant {
  RunVariant run;
  std::string name;
  size_t x_group = 0;
  double tolerance = 0;  // against the exact product; 0: tolerance(type)
  // matmul_mma_deq.cl: the product of the weights' values and x rounded to
  // fp16 as pack_x_f16 defines it (per token, times the power of two that
  // brings its largest |x| to [2^14, 2^15)), within fp16_tolerance (0: not
  // checked)
  bool fp16_inputs = false;
  double fp16_tolerance = 0;
};

// The float matmul (matmul.cl) with tuning t.
Variant matmul_variant(GgmlType type, const PrefillTuning& t) {
  auto k = std::make_shared<ClKernel>(matmul_kernel(type, t));
  RunVariant run = [k, t](const TestMatrix& w, const ClMem& x, int n_tok, const ClMem& out, int ld,
                          int off, bool acc) {
    set_args(*k, w.dev.q, w.dev.s, cl_int(w.n_in), cl_int(w.rows), x, cl_int(w.n_in), cl_int(n_tok),
             out, cl_int(ld), cl_int(off), cl_int(acc ? 1 : 0));
    run_matmul(*k, t, w.rows, n_tok);
  };
  return {run, describe(t)};
}

// quantize_x16 then matmul_x16 with tuning t (-DX16_PORTABLE=1 and
// -DTRANSPOSE_PORTABLE=1 when `portable`: the kernels' plain OpenCL C instead
// of x86 and clang builtins). The builtin variants launch as the engine does
// (work-groups of 16 along rows, the last one's items past the rows computing
// on clamped rows up to the barriers); the portable ones with the runtime's
// choice of local size.
Variant x16_variant(GgmlType type, const PrefillTuning& t, bool portable) {
  const std::string defines = ClPrefill::x16_defines(type, t) +
                              (portable ? " -DX16_PORTABLE=1 -DTRANSPOSE_PORTABLE=1" : "");
  auto quantize =
      std::make_shared<ClKernel>(build_kernel("cpu_transpose+matmul_x16", defines, "quantize_x16"));
  auto k =
      std::make_shared<ClKernel>(build_kernel("cpu_transpose+matmul_x16", defines, "matmul_x16"));
  RunVariant run = [quantize, k, t, portable](const TestMatrix& w, const ClMem& x, int n_tok,
                                              const ClMem& out, int ld, int off, bool acc) {
    const ClRuntime& rt = test::cl_test_runtime();
    const size_t xq_bytes = ClPrefill::x16_bytes(n_tok, w.n_in, t.x16_tg);
    const ClMem xq = rt.alloc(xq_bytes);
    cl_poison(xq, xq_bytes / 4);  // a record quantize_x16 misses gives NaN products
    set_args(*quantize, x, cl_int(w.n_in), cl_int(w.n_in), cl_int(n_tok), xq);
    run_2d(*quantize, size_t(w.n_in / 32), test::round_up(size_t(n_tok), 8) / 8, 0, 0);
    const size_t tiles = test::round_up(size_t(n_tok), size_t(8 * t.x16_tg)) / size_t(8 * t.x16_tg);
    set_args(*k, w.dev.q, w.dev.s, cl_int(w.n_in), cl_int(w.rows), xq, cl_int(n_tok), out,
             cl_int(ld), cl_int(off), cl_int(acc ? 1 : 0));
    const size_t items = (size_t(w.rows) + size_t(t.x16_vr) - 1) / size_t(t.x16_vr);
    if (portable) {
      run_2d(*k, items, tiles, 0, 0);
    } else {
      run_2d(*k, test::round_up(items, 16), tiles, 16, 1);
    }
  };
  return {run,
          "x16 vr " + std::to_string(t.x16_vr) + " tg " + std::to_string(t.x16_tg) +
              (portable ? " portable" : ""),
          32};
}

// out[t] = W x[t]; out[t] += W x[t]; and out[t][off .. off + rows) = W x[t]
// inside rows of ld = rows + 2 * off columns, for every token count, with
// each kernel variant, the tokens' x of magnitudes 10^-3 to 10^3 (one
// zero). Against the float64 product of the weights' values
// and x (|| delta || / || ref || within tolerance(type)); 16-bit variants
// also against x as they quantize it (1e-5: float rounding only).
void check_matmul(const MatmulShape& shape, GgmlType type, const std::vector<Variant>& variants) {
  const uint32_t seed = uint32_t(shape.n_in * 131 + shape.rows);
  const TestMatrix w = test::make_test_matrix(type, shape.n_in, shape.rows, seed);
  const int max_tok = 100;
  // tokens of different magnitudes (10^-3 .. 10^3 and a zero row), so a
  // per-token scale taken from the wrong token shows
  auto x = test::random_floats(size_t(max_tok) * size_t(shape.n_in), seed + 1);
  for (int tok = 0; tok < max_tok; ++tok) {
    const float scale = tok % 7 == 5 ? 0.0f : std::pow(10.0f, float((tok + 3) % 7 - 3));
    for (int i = 0; i < shape.n_in; ++i) x[size_t(tok) * shape.n_in + i] *= scale;
  }
  const auto init = test::random_floats(size_t(max_tok) * size_t(shape.rows), seed + 2);
  const ClMem x_dev = cl_buffer(x);
  auto product = [&](const std::vector<float>& wv, const std::vector<float>& xs, int n_tok) {
    std::vector<double> ref(size_t(n_tok) * size_t(shape.rows));
    for (int tok = 0; tok < n_tok; ++tok) {
      for (int r = 0; r < shape.rows; ++r) {
        double s = 0;
        for (int i = 0; i < shape.n_in; ++i) {
          s += double(wv[size_t(r) * shape.n_in + i]) * xs[size_t(tok) * shape.n_in + i];
        }
        ref[size_t(tok) * shape.rows + r] = s;
      }
    }
    return ref;
  };

  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const auto xq = v.x_group ? test::sixteen_bit(x, v.x_group) : x;
    for (int n_tok : k_token_counts) {
      SCOPED_TRACE("n_tok " + std::to_string(n_tok));
      const std::vector<double> exact = product(w.values, x, n_tok);
      const std::vector<double> ref =
          v.x_group       ? product(w.values, xq, n_tok)
          : v.fp16_inputs ? product(test::fp16_rounded(w.values),
                                    test::fp16_scaled_rows(x, size_t(shape.n_in)), n_tok)
                          : exact;
      for (int mode = 0; mode < 3; ++mode) {  // plain, accumulate, offset
        SCOPED_TRACE(mode == 0 ? "plain" : mode == 1 ? "accumulate" : "offset");
        const int off = mode == 2 ? 5 : 0;
        const int ld = shape.rows + 2 * off;
        const size_t n_out = size_t(n_tok) * size_t(ld) + k_pad;
        const ClMem out = test::cl_test_runtime().alloc(n_out * 4);
        cl_poison(out, n_out);
        if (mode == 1) {
          cl_check(clEnqueueWriteBuffer(test::cl_test_runtime().queue(), out.get(), CL_TRUE, 0,
                                        size_t(n_tok) * shape.rows * 4, init.data(), 0, nullptr,
                                        nullptr),
                   "clEnqueueWriteBuffer");
        }
        v.run(w, x_dev, n_tok, out, ld, off, mode == 1);
        const auto got = cl_read(out, n_out);
        std::vector<float> got_rows;
        std::vector<double> want = ref, want_exact = exact;
        size_t untouched_written = 0;
        for (int tok = 0; tok < n_tok; ++tok) {
          for (int c = 0; c < ld; ++c) {
            const float value = got[size_t(tok) * ld + c];
            if (c < off || c >= off + shape.rows) {
              untouched_written += !std::isnan(value);
            } else {
              got_rows.push_back(value);
            }
          }
        }
        if (mode == 1) {
          for (size_t e = 0; e < want.size(); ++e) {
            want[e] += init[e];
            want_exact[e] += init[e];
          }
        }
        if (v.x_group) {
          EXPECT_LE(test::relative_error(got_rows, want), 1e-5);
        }
        if (v.fp16_inputs && v.fp16_tolerance > 0) {
          EXPECT_LE(test::relative_error(got_rows, want), v.fp16_tolerance);
        }
        EXPECT_LE(test::relative_error(got_rows, want_exact),
                  v.tolerance > 0 ? v.tolerance : tolerance(type));
        EXPECT_EQ(untouched_written, 0u) << "write outside the column range";
        EXPECT_EQ(test::count_overwritten(got, size_t(n_tok) * ld), 0u) << "write past the end";
      }
    }
  }
}

TEST_P(ClMatmul, PlainAccumulateAndOffsetMatchReference) {
  const auto [shape, type] = GetParam();
  std::vector<Variant> variants;
  for (const PrefillTuning& t : matmul_tunings()) variants.push_back(matmul_variant(type, t));
  check_matmul(shape, type, variants);
}

// kernels/matmul_x16.cl: Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K rows, with the
// CPU default tiling, odd ones, and the portable code.
TEST_P(ClMatmul, SixteenBitActivationKernelMatchesReference) {
  const auto [shape, type] = GetParam();
  if (type != GgmlType::Q4_0 && type != GgmlType::Q4_1 && type != GgmlType::Q5_1 &&
      type != GgmlType::Q8_0 && type != GgmlType::Q4_K && type != GgmlType::Q5_K &&
      type != GgmlType::Q6_K) {
    GTEST_SKIP() << "matmul_x16 takes Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K";
  }
  PrefillTuning def, odd, portable;
  odd.x16_vr = 3;
  odd.x16_tg = 2;
  portable.x16_vr = 2;
  portable.x16_tg = 1;
  check_matmul(shape, type,
               {x16_variant(type, def, false), x16_variant(type, odd, false),
                x16_variant(type, portable, true)});
}

// The tensor-core kernel: quantized types only, NVIDIA only.
TEST_P(ClMatmul, TensorCoreKernelMatchesReference) {
  const auto [shape, type] = GetParam();
  if (!ClPrefill::mma_type(type)) GTEST_SKIP() << "the tensor-core kernel takes quantized types";
  if (!device_is_nvidia()) GTEST_SKIP() << "the tensor-core kernel runs on NVIDIA's OpenCL only";
  std::vector<Variant> variants;
  for (const MmaTiling& m : mma_tunings()) {
    const PrefillTuning& t = m.tile;
    const int split = m.split;
    // (Q8_0 in the large split tile: over what ptxas gives a work-group, so
    // ClPrefill never tries it; ClMma.LocalBytesMatchKernel checks that it
    // is the only such tiling and that it does not build.)
    if (ClPrefill::mma_local_bytes(type, t) > ClPrefill::k_mma_local_limit) continue;
    const std::string defines = ClPrefill::mma_defines(type, t, split);
    auto pack =
        std::make_shared<ClKernel>(build_kernel(ClPrefill::k_mma_program, defines, "pack_x_f16"));
    auto k = std::make_shared<ClKernel>(
        build_kernel(ClPrefill::k_mma_program, defines, "matmul_mma_deq"));
    auto sum = std::make_shared<ClKernel>(
        build_kernel(ClPrefill::k_mma_program, defines, "mma_split_sum"));
    RunVariant run = [pack, k, sum, t, split](const TestMatrix& w, const ClMem& x, int n_tok,
                                              const ClMem& out, int ld, int off, bool acc) {
      const ClRuntime& rt = test::cl_test_runtime();
      const size_t packed = ClPrefill::mma_packed_bytes(n_tok, w.n_in);
      const size_t scales = ClPrefill::mma_scale_bytes(n_tok);
      const ClMem xp = rt.alloc(packed);
      const ClMem xs = rt.alloc(scales);
      cl_poison(xp, packed / 4);  // what the pack kernel misses
      cl_poison(xs, scales / 4);  // shows as NaN
      set_args(*pack, x, cl_int(w.n_in), cl_int(w.n_in), cl_int(n_tok), xp, xs);
      const size_t group = size_t(ClPrefill::k_pack_group);
      run_2d(*pack, group, size_t(n_tok), group, 1);
      const size_t part_floats = size_t(split) * size_t(n_tok) * size_t(w.rows);
      const ClMem part = rt.alloc(part_floats * 4);
      cl_poison(part, part_floats);  // a share no split writes shows as NaN
      set_args(*k, w.dev.q, w.dev.s, cl_int(w.n_in), cl_int(w.rows), xp, xs, cl_int(n_tok), out,
               cl_int(ld), cl_int(off), cl_int(acc ? 1 : 0), part);
      run_2d(*k, ClPrefill::mma_rows_global(w.rows, t, split),
             test::round_up(size_t(n_tok), size_t(t.mma_tile_tokens())) / t.mma_tile_tokens(),
             size_t(t.mma_threads()), 1);
      if (split > 1) {
        set_args(*sum, part, cl_int(w.rows), cl_int(n_tok), out, cl_int(ld), cl_int(off),
                 cl_int(acc ? 1 : 0));
        run_2d(*sum, ClPrefill::split_sum_rows_global(w.rows), size_t(n_tok),
               size_t(ClPrefill::k_split_sum_group), 1);
      }
    };
    // fp16 weights and x (each rounded by at most 2^-11): ~2e-4 of the
    // exact product on these shapes; a wrong scale, code or fragment costs
    // far more. The types with float scales round them to fp16 first, so
    // only the others are checked against fp16 inputs too (1e-5: the order
    // of fp32 sums).
    Variant v{run, describe_mma(m), 0, 1e-3};
    v.fp16_inputs = true;
    const bool float_scales =
        type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
    v.fp16_tolerance = float_scales ? 0.0 : 1e-5;
    variants.push_back(v);
  }
  check_matmul(shape, type, variants);
}

// ClPrefill::mma_local_bytes against the local memory NVIDIA's compiler
// gives the kernel (CL_KERNEL_LOCAL_MEM_SIZE), for every tensor-core type and
// each tiling of the tests; a count over k_mma_local_limit must be the one
// case known to be (Q8_0's 256-row split large tile) and must fail to build, which
// ties the limit to the compiler.
TEST(ClMma, LocalBytesMatchKernel) {
  if (!device_is_nvidia()) GTEST_SKIP() << "the tensor-core kernel runs on NVIDIA's OpenCL only";
  const ClRuntime& rt = test::cl_test_runtime();
  int over_limit = 0;
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    for (const MmaTiling& m : mma_tunings()) {
      const size_t counted = ClPrefill::mma_local_bytes(type, m.tile);
      SCOPED_TRACE(std::string(ggml_type_name(type)) + " " + describe_mma(m));
      const std::string defines = ClPrefill::mma_defines(type, m.tile, m.split);
      if (counted > ClPrefill::k_mma_local_limit) {
        ++over_limit;
        EXPECT_EQ(type, GgmlType::Q8_0);
        EXPECT_EQ(m.tile.mma_tile_rows(), PrefillTuning{}.large_tile(4).mma_tile_rows());
        EXPECT_ANY_THROW(build_kernel(ClPrefill::k_mma_program, defines, "matmul_mma_deq"));
        continue;
      }
      const ClKernel k = build_kernel(ClPrefill::k_mma_program, defines, "matmul_mma_deq");
      cl_ulong used = 0;
      ASSERT_EQ(clGetKernelWorkGroupInfo(k.get(), rt.device().device, CL_KERNEL_LOCAL_MEM_SIZE,
                                         sizeof used, &used, nullptr),
                CL_SUCCESS);
      // (the compiler may align the arrays' end: at most 64 bytes more)
      EXPECT_GE(used, counted);
      EXPECT_LE(used, counted + 64);
    }
  }
  EXPECT_EQ(over_limit, 1);
}

// ---- the packs that compute their input (matmul_mma_deq.cl, NVIDIA only) ----

// xp (n_tok rows of n_in fp16 in pack_x_f16's order) times xs[t], back in
// column order: item e of a token holds block e / 4's values 4 tig..+3 and
// 16 + 4 tig..+3 (tig = e % 4).
std::vector<float> unpack_f16(const std::vector<uint16_t>& xp, const std::vector<float>& xs,
                              int n_in, int n_tok) {
  std::vector<float> y(size_t(n_in) * size_t(n_tok));
  for (int t = 0; t < n_tok; ++t) {
    for (int e = 0; e < n_in / 8; ++e) {
      for (int j = 0; j < 8; ++j) {
        const int col = 32 * (e / 4) + 4 * (e % 4) + (j < 4 ? j : 12 + j);
        const uint16_t h = xp[(size_t(t) * size_t(n_in / 8) + size_t(e)) * 8 + size_t(j)];
        y[size_t(t) * size_t(n_in) + size_t(col)] = fp16_to_fp32(h) * xs[size_t(t)];
      }
    }
  }
  return y;
}

// Runs `k` (arguments set up to xp, xs) over n_tok tokens and checks its
// packed rows against `ref` (n_tok rows of n_in, float64): per row within
// fp16's rounding (2^-11, plus float rounding of the inputs' arithmetic),
// xs[t] the power of two 2^-k that brings the row's largest |value| to
// [2^14, 2^15) (1 for a zero row), and nothing written past the rows.
// k_cap: per token, the largest 2^k the pack may scale by (rmsnorm: so that
// rms 2^k stays finite); empty: 126 for every token.
void expect_packed(const ClKernel& k, int first_out_arg, int n_in, int n_tok,
                   const std::vector<double>& ref, const std::vector<int>& k_cap = {}) {
  const ClRuntime& rt = test::cl_test_runtime();
  const size_t n_half = size_t(n_in) * size_t(n_tok), pad_words = 64;
  const ClMem xp = rt.alloc(n_half * 2 + pad_words * 4);
  const ClMem xs = rt.alloc(size_t(n_tok + 1) * 4);
  const float nan_halves = std::bit_cast<float>(0x7e007e00u);  // two fp16 NaNs
  cl_poison(xp, n_half / 2 + pad_words, nan_halves);
  cl_poison(xs, size_t(n_tok + 1));
  const cl_mem outs[2] = {xp.get(), xs.get()};
  for (int i = 0; i < 2; ++i) {
    cl_check(clSetKernelArg(k.get(), cl_uint(first_out_arg + i), sizeof(cl_mem), &outs[i]),
             "clSetKernelArg(pack output)");
  }
  const size_t group = size_t(ClPrefill::k_pack_group);
  run_2d(k, group, size_t(n_tok), group, 1);
  const auto words = cl_read<uint32_t>(xp, n_half / 2 + pad_words);
  std::vector<uint16_t> halves(n_half);
  std::memcpy(halves.data(), words.data(), n_half * 2);
  const auto scales = cl_read(xs, size_t(n_tok + 1));
  const auto got = unpack_f16(halves, scales, n_in, n_tok);
  for (int t = 0; t < n_tok; ++t) {
    const auto row = std::span(ref).subspan(size_t(t) * size_t(n_in), size_t(n_in));
    double m = 0;
    for (double v : row) m = std::max(m, std::fabs(v));
    int e = 0;
    std::frexp(m, &e);
    const int cap = k_cap.empty() ? 126 : k_cap[size_t(t)];
    const float want_scale = m > 0 ? std::ldexp(1.0f, -std::min(14 - (e - 1), cap)) : 1.0f;
    EXPECT_EQ(scales[size_t(t)], want_scale) << "token " << t;
    const auto got_row = std::span(got).subspan(size_t(t) * size_t(n_in), size_t(n_in));
    EXPECT_LE(test::relative_error(got_row, row), m > 0 ? 6e-4 : 0.0) << "token " << t;
  }
  EXPECT_TRUE(std::isnan(scales[size_t(n_tok)]));
  for (size_t w = n_half / 2; w < words.size(); ++w) EXPECT_EQ(words[w], 0x7e007e00u);
}

// Row widths: 2080 (65 blocks, 260 items: a work-group of 256 has some
// items twice) and 8224 (1028 items: 4 past what the work-items keep in
// registers, PACK_CACHE 4, which are computed twice).
constexpr int k_pack_widths[] = {2080, 8224};

// Tokens of magnitudes 10^-3..10^3 and a zero one; the odd tokens hold their
// largest value (1.5 times the magnitude) in the row's last column, the last
// item of the row (past the register cache at 8224), the others wherever
// the random values put it.
constexpr float k_pack_peak = 1.5f;
std::vector<float> pack_test_rows(int n_in, int n_tok, uint32_t seed) {
  auto x = test::random_floats(size_t(n_in) * size_t(n_tok), seed, -1.0f, 1.0f);
  for (int t = 0; t < n_tok; ++t) {
    const float mag = t == 2 ? 0.0f : std::pow(10.0f, float(t % 7) - 3.0f);
    for (int i = 0; i < n_in; ++i) x[size_t(t) * size_t(n_in) + size_t(i)] *= mag;
    if (t % 2 == 1) x[size_t(t + 1) * size_t(n_in) - 1] = k_pack_peak * mag;
  }
  return x;
}

TEST(ClPackF16, RmsnormPackMatchesReference) {
  if (!device_is_nvidia()) GTEST_SKIP() << "the tensor-core packs run on NVIDIA's OpenCL only";
  // the 8th token is scaled to ~1e-35: its squares underflow, rms is
  // 1 / sqrt(eps), and the ideal 2^k would make rms 2^k overflow
  const int n_tok = 8;
  const float eps = 1e-5f;
  const ClKernel k =
      build_kernel(ClPrefill::k_mma_program,
                   ClPrefill::mma_defines(GgmlType::Q4_0, PrefillTuning{}), "rmsnorm_pack_f16");
  for (int n_in : k_pack_widths) {
    SCOPED_TRACE("n_in " + std::to_string(n_in));
    auto x = pack_test_rows(n_in, n_tok, 31);
    for (int i = 0; i < n_in; ++i) x[size_t(n_tok - 1) * size_t(n_in) + size_t(i)] *= 1e-32f;
    auto g = test::random_floats(size_t(n_in), 32, -2.0f, 2.0f);
    g.back() = 2.5f;  // the odd tokens' largest value stays in the last column
    std::vector<double> ref;
    std::vector<int> k_cap;
    for (int t = 0; t < n_tok; ++t) {
      const float* xr = x.data() + size_t(t) * size_t(n_in);
      double ss = 0;
      for (int i = 0; i < n_in; ++i) ss += double(xr[i]) * xr[i];
      const double rms = 1.0 / std::sqrt(ss / n_in + eps);
      for (int i = 0; i < n_in; ++i) ref.push_back(xr[i] * rms * g[size_t(i)]);
      int e = 0;
      std::frexp(rms, &e);  // rms 2^k finite in float: k <= 126 - floor(log2 rms)
      k_cap.push_back(std::min(126, 126 - (e - 1)));
    }
    const ClMem x_dev = cl_buffer(x), g_dev = cl_buffer(g);
    set_args(k, x_dev, cl_int(n_in), cl_int(n_tok), g_dev, eps, x_dev, x_dev);  // xp, xs: below
    expect_packed(k, 5, n_in, n_tok, ref, k_cap);
  }
}

TEST(ClPackF16, GluPackMatchesReference) {
  if (!device_is_nvidia()) GTEST_SKIP() << "the tensor-core packs run on NVIDIA's OpenCL only";
  const int n_tok = 7;
  const ClKernel k =
      build_kernel(ClPrefill::k_mma_program,
                   ClPrefill::mma_defines(GgmlType::Q6_K, PrefillTuning{}), "glu_pack_f16");
  for (int n_in : k_pack_widths) {
    const auto gate = pack_test_rows(n_in, n_tok, 33);
    auto up = test::random_floats(size_t(n_in) * n_tok, 34, -3.0f, 3.0f);
    for (int t = 0; t < n_tok; ++t) up[size_t(t + 1) * size_t(n_in) - 1] = 5.0f;  // as for g
    const ClMem gate_dev = cl_buffer(gate), up_dev = cl_buffer(up);
    for (int gelu : {0, 1}) {
      SCOPED_TRACE(std::string(gelu ? "GELU" : "SiLU") + ", n_in " + std::to_string(n_in));
      std::vector<double> ref;
      for (size_t e = 0; e < gate.size(); ++e) {
        const double v = gate[e];
        const double act =
            gelu ? 0.5 * v * (1 + std::tanh(0.7978845608 * (v + 0.044715 * v * v * v)))
                 : v / (1 + std::exp(-v));
        ref.push_back(act * up[e]);
      }
      set_args(k, gate_dev, up_dev, cl_int(n_in), cl_int(n_tok), cl_int(gelu), gate_dev, gate_dev);
      expect_packed(k, 5, n_in, n_tok, ref);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClMatmul, testing::ValuesIn(matmul_cases()),
                         [](const testing::TestParamInfo<MatmulCase>& info) {
                           return std::string(info.param.shape.name) + "_" +
                                  ggml_type_name(info.param.type);
                         });

// ---- embed_rows -----------------------------------------------------------------

class ClEmbedRows : public testing::TestWithParam<GgmlType> {};

TEST_P(ClEmbedRows, MatchesDequantizedRows) {
  const GgmlType type = GetParam();
  const int n_embd = 256, n_vocab = 50, n_tok = 9, id_off = 3;  // one K-quant super-block
  const TestMatrix w = test::make_test_matrix(type, n_embd, n_vocab, 77 + uint32_t(type));
  std::vector<int32_t> ids(size_t(id_off + n_tok));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 17 + 5) % n_vocab);
  const ClMem ids_dev = cl_buffer(ids);
  const size_t n_out = size_t(n_tok) * n_embd + k_pad;
  const ClMem x = test::cl_test_runtime().alloc(n_out * 4);
  cl_poison(x, n_out);
  const ClKernel k = matmul_kernel(type, PrefillTuning{}, "embed_rows");
  set_args(k, w.dev.q, w.dev.s, cl_int(n_embd), ids_dev, cl_int(id_off), cl_int(n_tok), x);
  run_2d(k, size_t(n_embd), size_t(n_tok), 0, 0);
  const auto got = cl_read(x, n_out);
  std::vector<double> want;
  for (int t = 0; t < n_tok; ++t) {
    const int32_t row = ids[size_t(id_off + t)];
    for (int i = 0; i < n_embd; ++i) want.push_back(w.values[size_t(row) * n_embd + i]);
  }
  EXPECT_LE(test::relative_error(std::span(got).first(want.size()), want), 1e-7);
  EXPECT_EQ(test::count_overwritten(got, want.size()), 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, ClEmbedRows, testing::ValuesIn(ggml_supported_types()),
                         [](const testing::TestParamInfo<GgmlType>& info) {
                           return std::string(ggml_type_name(info.param));
                         });

}  // namespace
}  // namespace clchat
