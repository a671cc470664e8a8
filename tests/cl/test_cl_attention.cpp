// kernels/attention.cl and, on a CPU device, attention_cpu.cl (both
// attention_decode) on the CPU OpenCL device (PoCL)
// against a float64 reference: softmax(q . k_t / sqrt(head_dim)) v over the
// positions 0..n_pos-1 of one layer of the cache, query head h reading KV
// head h / (n_head / n_head_kv). Head layouts of the reference models
// (stories260K 8/4 x 8, tiny-random 2/2 x 4, SmolLM2 9/3 x 64), the synthetic
// test model (4/2 x 32) and a head size that is not a power of two (6/2 x
// 48); n_pos 1, 2, 17, 300 and 1100; work-group sizes from the smallest that
// covers a head up to 256. Tolerance: ||delta|| / ||ref|| <= 1e-4.
//
// The cache holds two layers and more positions than n_pos; the kernel reads
// layer 1, and every cache position at or past n_pos (and all of layer 0) is
// NaN, so reading past n_pos or from the wrong layer shows. The output and the
// scores scratch are NaN before each launch. Also a window that wraps around
// a sliding-window layer's ring of rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

using test::cl_buffer;
using test::cl_poison;
using test::cl_read;

struct HeadShape {
  const char* name;
  int n_head, n_head_kv, head_dim;
};
void PrintTo(const HeadShape& s, std::ostream* os) {
  *os << s.name << " heads " << s.n_head << "/" << s.n_head_kv << " x " << s.head_dim;
}
constexpr HeadShape k_head_shapes[] = {
    {"stories", 8, 4, 8},    {"tiny", 2, 2, 4},         {"smollm2", 9, 3, 64},
    {"synthetic", 4, 2, 32}, {"head_dim_48", 6, 2, 48},
};
constexpr int k_positions[] = {1, 2, 17, 300, 1100};
constexpr int k_n_ctx = 1200;  // cache positions per layer
constexpr int k_layers = 2;

// out[h] = sum_t softmax_t(q_h . k_t / sqrt(d)) v_t, in float64.
std::vector<double> ref_attention(const HeadShape& s, const std::vector<float>& q,
                                  const std::vector<float>& k_cache,
                                  const std::vector<float>& v_cache, size_t layer_off, int n_pos) {
  const int d = s.head_dim, n_kv = s.n_head_kv * d;
  std::vector<double> out(size_t(s.n_head * d), 0.0);
  std::vector<double> p(static_cast<size_t>(n_pos));
  for (int h = 0; h < s.n_head; ++h) {
    const int kvh = h / (s.n_head / s.n_head_kv);
    double max = -INFINITY;
    for (int t = 0; t < n_pos; ++t) {
      const float* k = &k_cache[layer_off + size_t(t) * n_kv + size_t(kvh * d)];
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(q[size_t(h * d + i)]) * k[i];
      p[size_t(t)] = dot / std::sqrt(double(d));
      max = std::max(max, p[size_t(t)]);
    }
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - max));
    for (int t = 0; t < n_pos; ++t) {
      const float* v = &v_cache[layer_off + size_t(t) * n_kv + size_t(kvh * d)];
      for (int i = 0; i < d; ++i) out[size_t(h * d + i)] += p[size_t(t)] / sum * v[i];
    }
  }
  return out;
}

// Work-group sizes to try: the smallest power of two covering a head, 64, 256.
std::vector<int> att_work_groups(int head_dim) {
  int smallest = 1;
  while (smallest < head_dim) smallest *= 2;
  std::vector<int> wgs = {smallest};
  for (int wg : {64, 256}) {
    if (wg > smallest) wgs.push_back(wg);
  }
  return wgs;
}

class ClAttention : public testing::TestWithParam<HeadShape> {};

// attention_decode of every kernel variant and work-group size over n_pos
// keys from float offset `off` of the caches (rows wrapping back by `ring`
// from key wrap_at on), against ref; outputs and scores NaN before each run.
void expect_attention_matches(const HeadShape& s, const ClMem& q, const ClMem& k_cache,
                              const ClMem& v_cache, size_t off, int n_pos, int wrap_at, int ring,
                              const std::vector<double>& ref) {
  const int d = s.head_dim;
  const ClRuntime& rt = test::cl_test_runtime();
  const size_t n_out = size_t(s.n_head * d) + 16;
  const ClMem out = rt.alloc(n_out * 4);
  const ClMem scores = rt.alloc(size_t(s.n_head) * size_t(n_pos) * 4);
  for (const KernelTuning& variant : test::kernel_variants()) {
    for (const int wg : att_work_groups(d)) {
      KernelTuning t = variant;
      t.att_wg = wg;
      SCOPED_TRACE(test::describe(t));
      const ClKernel k = test::cl_programs(t).attention_kernel();
      cl_poison(out, n_out);
      cl_poison(scores, size_t(s.n_head) * size_t(n_pos));
      set_args(k, q, k_cache, v_cache, cl_ulong(off), cl_int(n_pos), cl_int(wrap_at), cl_int(ring),
               cl_int(s.n_head), cl_int(s.n_head_kv), cl_int(d), scores, cl_int(n_pos), out);
      test::cl_run(k, size_t(s.n_head) * size_t(wg), size_t(wg));
      const auto got = cl_read(out, n_out);
      EXPECT_LE(test::relative_error(std::span(got).first(size_t(s.n_head * d)), ref), 1e-4);
      EXPECT_EQ(test::count_overwritten(got, size_t(s.n_head * d)), 0u) << "write past the heads";
    }
  }
}

TEST_P(ClAttention, MatchesReferenceAtEveryLength) {
  const HeadShape s = GetParam();
  const int d = s.head_dim, n_kv = s.n_head_kv * d;
  const size_t layer_size = size_t(k_n_ctx) * size_t(n_kv);
  const size_t layer_off = layer_size;  // layer 1
  // q spans a wider range than k so that softmax is far from uniform.
  const auto q = test::random_floats(size_t(s.n_head * d), 11, -3.0f, 3.0f);
  const auto k_values = test::random_floats(layer_size, 12);
  const auto v_values = test::random_floats(layer_size, 13);
  const ClMem q_dev = cl_buffer(q);

  for (const int n_pos : k_positions) {
    SCOPED_TRACE("n_pos " + std::to_string(n_pos));
    // Layer 0 and every position >= n_pos of layer 1 are NaN.
    std::vector<float> k_cache(k_layers * layer_size, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> v_cache = k_cache;
    const size_t n_valid = size_t(n_pos) * size_t(n_kv);
    std::copy_n(k_values.begin(), n_valid, k_cache.begin() + ptrdiff_t(layer_off));
    std::copy_n(v_values.begin(), n_valid, v_cache.begin() + ptrdiff_t(layer_off));
    const auto ref = ref_attention(s, q, k_cache, v_cache, layer_off, n_pos);
    expect_attention_matches(s, q_dev, cl_buffer(k_cache), cl_buffer(v_cache), layer_off, n_pos,
                             k_n_ctx, k_n_ctx, ref);
  }
}

// A sliding-window layer's ring (engine/cl/decode_state.h): layer 1 holds
// `ring` rows and the window's n_pos keys start at row first_row, wrapping
// to row 0 after the last row (wrap_at = ring - first_row). The rows outside
// the window are NaN; the reference takes the keys in window order.
TEST_P(ClAttention, WindowWrapsAroundTheRing) {
  const HeadShape s = GetParam();
  const int d = s.head_dim, n_kv = s.n_head_kv * d, ring = 40, n_pos = 25, first_row = 31;
  const size_t layer_off = size_t(ring) * size_t(n_kv);  // layer 1
  const auto q = test::random_floats(size_t(s.n_head * d), 31, -3.0f, 3.0f);
  const auto k_window = test::random_floats(size_t(n_pos) * n_kv, 32);
  const auto v_window = test::random_floats(size_t(n_pos) * n_kv, 33);
  std::vector<float> k_cache(2 * layer_off, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> v_cache = k_cache;
  for (int t = 0; t < n_pos; ++t) {
    const size_t row = layer_off + size_t((first_row + t) % ring) * n_kv;
    std::copy_n(k_window.begin() + ptrdiff_t(t * n_kv), n_kv, k_cache.begin() + ptrdiff_t(row));
    std::copy_n(v_window.begin() + ptrdiff_t(t * n_kv), n_kv, v_cache.begin() + ptrdiff_t(row));
  }
  const auto ref = ref_attention(s, q, k_window, v_window, 0, n_pos);
  expect_attention_matches(s, cl_buffer(q), cl_buffer(k_cache), cl_buffer(v_cache),
                           layer_off + size_t(first_row) * n_kv, n_pos, ring - first_row, ring,
                           ref);
}

INSTANTIATE_TEST_SUITE_P(Heads, ClAttention, testing::ValuesIn(k_head_shapes),
                         [](const testing::TestParamInfo<HeadShape>& info) {
                           return std::string(info.param.name);
                         });

// A sharply peaked softmax: for the first query head of each group, one
// position's key is 40 times the query (score ~100), so that head's output is
// that position's value; exp() without the max subtraction would overflow.
TEST(ClAttention, PeakedScoresPickOnePosition) {
  const HeadShape s = {"smollm2", 9, 3, 64};
  const int d = s.head_dim, n_kv = s.n_head_kv * d, n_pos = 300, hot = 123;
  auto q = test::random_floats(size_t(s.n_head * d), 21, -1.0f, 1.0f);
  auto k_cache = test::random_floats(size_t(k_n_ctx) * n_kv, 22, -0.1f, 0.1f);
  const auto v_cache = test::random_floats(size_t(k_n_ctx) * n_kv, 23);
  for (int h = 0; h < s.n_head; ++h) {  // k_hot = 40 q for every head's KV head
    const int kvh = h / (s.n_head / s.n_head_kv);
    for (int i = 0; i < d; ++i) {
      k_cache[size_t(hot * n_kv + kvh * d + i)] =
          40.0f * q[size_t(kvh * (s.n_head / s.n_head_kv) * d + i)];
    }
  }
  const auto ref = ref_attention(s, q, k_cache, v_cache, 0, n_pos);
  for (int h = 0; h < s.n_head; h += s.n_head / s.n_head_kv) {  // the premise
    const int kvh = h / (s.n_head / s.n_head_kv);
    for (int i = 0; i < d; ++i) {
      ASSERT_NEAR(ref[size_t(h * d + i)], v_cache[size_t(hot * n_kv + kvh * d + i)], 1e-6);
    }
  }
  const ClRuntime& rt = test::cl_test_runtime();
  const ClMem q_dev = cl_buffer(q), k_dev = cl_buffer(k_cache), v_dev = cl_buffer(v_cache);
  const ClMem out = rt.alloc(size_t(s.n_head * d) * 4);
  const ClMem scores = rt.alloc(size_t(s.n_head) * k_n_ctx * 4);
  for (const KernelTuning& t : test::kernel_variants()) {
    SCOPED_TRACE(test::describe(t));
    const ClKernel k = test::cl_programs(t).attention_kernel();
    cl_poison(out, size_t(s.n_head * d));
    cl_poison(scores, size_t(s.n_head) * k_n_ctx);
    set_args(k, q_dev, k_dev, v_dev, cl_ulong(0), cl_int(n_pos), cl_int(k_n_ctx), cl_int(k_n_ctx),
             cl_int(s.n_head), cl_int(s.n_head_kv), cl_int(d), scores, cl_int(k_n_ctx), out);
    test::cl_run(k, size_t(s.n_head) * size_t(t.att_wg), size_t(t.att_wg));
    const auto got = cl_read(out, size_t(s.n_head * d));
    EXPECT_LE(test::relative_error(std::span<const float>(got), ref), 1e-4);
  }
}

}  // namespace
}  // namespace clchat
