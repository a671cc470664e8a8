// Helpers for the OpenCL kernel tests: the PoCL CPU runtime shared by a test
// binary, programs per tuning, buffers that are written, poisoned and read
// back synchronously, and random weight matrices in every GGML type together
// with the float values their bytes decode to (the reference's input).
//
// Header-only on purpose: each tests/test_*.cpp is its own binary and only
// the OpenCL ones include this.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/cl/programs.h"
#include "engine/cl/runtime.h"
#include "engine/cl/weights.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/quant.h"
#include "tests/test_support.h"

namespace clchat {

// Sets a kernel's arguments by position: set_args(k, buf, n, x) -> args 0,
// 1, 2. Tests only, where a kernel is run once and its output checked; the
// engine binds by name (KernelArgs, engine/cl/runtime.h), so that a changed
// signature fails at build time instead of shifting arguments.
template <typename... Args>
void set_args(const ClKernel& k, const Args&... args) {
  cl_uint i = 0;
  (set_arg(k.get(), i++, args), ...);
}

}  // namespace clchat

namespace clchat::test {

// The OpenCL device the tests run on, created once per binary: the first CPU
// device (PoCL here), or $CLCHAT_TEST_DEVICE (a select_device() spec such as
// "gpu") to run the same tests on another device.
inline ClRuntime& cl_test_runtime() {
  static ClRuntime rt = [] {
    const char* env = std::getenv("CLCHAT_TEST_DEVICE");
    return ClRuntime(select_device(env && *env ? env : "cpu"), false);
  }();
  return rt;
}

// Tunings every matvec test runs with: the device's own (PoCL: one
// work-item per row, matvec_cpu.cl), two GPU-like ones that exercise the
// reduction over several work-items per row, including the smallest
// work-group (4 x 2), and a work-group that is not a power of two (2 x 6:
// ROWS need only be even); on a CPU device also the variants of
// matvec_cpu.cl below.
inline std::vector<KernelTuning> matvec_tunings() {
  const KernelTuning device = KernelTuning::for_device(cl_test_runtime().device());
  // Same build options and reduction path (NVIDIA shuffles) as the device's.
  KernelTuning gpu_like = device, small = device, odd = device;
  gpu_like.tpr = 8;
  gpu_like.rows = 16;
  small.tpr = 4;
  small.rows = 2;
  odd.tpr = 2;
  odd.rows = 6;
  std::vector<KernelTuning> tunings = {device, gpu_like, small, odd};
  if (device.cpu_kernels && device.tpr == 1) {
    // matvec_cpu.cl: two rows per work-item in groups of 6, and without the
    // x86 builtin (F16C).
    KernelTuning cpu_odd = device, portable = device;
    cpu_odd.rows = 6;
    cpu_odd.cpu_nr = 2;
    portable.cpu_portable = true;
    tunings.insert(tunings.end(), {cpu_odd, portable});
  }
  return tunings;
}

inline std::string describe(const KernelTuning& t) {
  return "tpr " + std::to_string(t.tpr) + " rows " + std::to_string(t.rows) + " att_wg " +
         std::to_string(t.att_wg) + " argmax_wg " + std::to_string(t.argmax_wg) + " sample_wg " +
         std::to_string(t.sample_wg) + (t.nv_shfl ? " nv_shfl" : "") +
         (t.cpu_kernels
              ? " cpu_kernels nr " + std::to_string(t.cpu_nr) + (t.cpu_portable ? " portable" : "")
              : "");
}

// The device's tuning, and on a CPU device also without the CPU-specific
// kernels (attention.cl and argmax.cl are tested on PoCL too).
inline std::vector<KernelTuning> kernel_variants() {
  const KernelTuning device = KernelTuning::for_device(cl_test_runtime().device());
  if (!device.cpu_kernels) return {device};
  KernelTuning portable = device;
  portable.cpu_kernels = false;
  return {device, portable};
}

// One ClPrograms per distinct tuning, kept for the whole binary so each
// program is built (or loaded from the binary cache) once.
inline ClPrograms& cl_programs(const KernelTuning& t) {
  static std::map<std::string, std::unique_ptr<ClPrograms>> cache;
  const std::string key = describe(t) + " " + t.build_options;
  auto& p = cache[key];
  if (!p) p = std::make_unique<ClPrograms>(cl_test_runtime(), t);
  return *p;
}

// A read-write device buffer holding `data`.
template <typename T>
ClMem cl_buffer(std::span<const T> data) {
  const ClRuntime& rt = cl_test_runtime();
  ClMem m = rt.alloc(data.size_bytes());
  cl_check(clEnqueueWriteBuffer(rt.queue(), m.get(), CL_TRUE, 0, data.size_bytes(), data.data(), 0,
                                nullptr, nullptr),
           "clEnqueueWriteBuffer");
  return m;
}
template <typename T>
ClMem cl_buffer(const std::vector<T>& data) {
  return cl_buffer(std::span<const T>(data));
}

// Fills the first n floats of `m` with `value` (NaN by default): outputs are
// poisoned before each launch so an unwritten element cannot pass.
inline void cl_poison(const ClMem& m, size_t n,
                      float value = std::numeric_limits<float>::quiet_NaN()) {
  const ClRuntime& rt = cl_test_runtime();
  cl_check(clEnqueueFillBuffer(rt.queue(), m.get(), &value, sizeof(value), 0, n * sizeof(float), 0,
                               nullptr, nullptr),
           "clEnqueueFillBuffer");
  rt.finish();
}

template <typename T = float>
std::vector<T> cl_read(const ClMem& m, size_t n) {
  std::vector<T> out(n);
  cl_check(clEnqueueReadBuffer(cl_test_runtime().queue(), m.get(), CL_TRUE, 0, n * sizeof(T),
                               out.data(), 0, nullptr, nullptr),
           "clEnqueueReadBuffer");
  return out;
}

// Launches a 1-D range (local 0: the runtime chooses) and waits.
inline void cl_run(const ClKernel& k, size_t global, size_t local) {
  const ClRuntime& rt = cl_test_runtime();
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k.get(), 1, nullptr, &global,
                                  local ? &local : nullptr, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel");
  rt.finish();
}

inline size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// A rows x n_in weight matrix: GGUF bytes of `type`, the floats they decode
// to (what a reference multiplies with), and the repacked device copy.
struct TestMatrix {
  GgmlType type = GgmlType::F32;
  int n_in = 0;
  int rows = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized bytes, row-major
  DeviceMatrix dev;
};

// Quantizes `values` (rows x n_in) into `type`.
inline TestMatrix make_test_matrix(GgmlType type, const std::vector<float>& values, int n_in,
                                   int rows) {
  TestMatrix m;
  m.type = type;
  m.n_in = n_in;
  m.rows = rows;
  m.bytes = quantize_matrix(type, values, uint64_t(n_in));
  m.values = dequantize_matrix(type, m.bytes, uint64_t(n_in), uint64_t(rows));
  m.dev = upload_matrix(cl_test_runtime(), repack_matrix(type, m.bytes.data(), n_in, rows));
  return m;
}

// The GGUF bytes `bytes` of `type` as a test matrix.
inline TestMatrix test_matrix_from_bytes(GgmlType type, std::vector<uint8_t> bytes, int n_in,
                                         int rows) {
  TestMatrix m;
  m.type = type;
  m.n_in = n_in;
  m.rows = rows;
  m.bytes = std::move(bytes);
  m.values = dequantize_matrix(type, m.bytes, uint64_t(n_in), uint64_t(rows));
  m.dev = upload_matrix(cl_test_runtime(), repack_matrix(type, m.bytes.data(), n_in, rows));
  return m;
}

// Random weights: F32, F16, BF16, Q4_0, Q4_1 and Q8_0 quantized from random
// floats in [-1, 1); the other types as random blocks (random_blocks: every
// code and bit pattern, random scales).
inline TestMatrix make_test_matrix(GgmlType type, int n_in, int rows, uint32_t seed) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
      return make_test_matrix(type, random_floats(size_t(n_in) * size_t(rows), seed), n_in, rows);
    case GgmlType::BF16: {
      const std::vector<float> v = random_floats(size_t(n_in) * size_t(rows), seed);
      std::vector<uint8_t> b(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &v[i], 4);
        const uint16_t h = uint16_t(bits >> 16);  // truncated: any BF16 value will do
        std::memcpy(&b[2 * i], &h, 2);
      }
      return test_matrix_from_bytes(type, std::move(b), n_in, rows);
    }
    default:
      return test_matrix_from_bytes(type, random_blocks(type, uint64_t(n_in), uint64_t(rows), seed),
                                    n_in, rows);
  }
}

// The weight types a row of n_in values can be stored in (legacy quantized
// types need whole blocks of 32, K-quants and IQ4_XS of 256).
inline std::vector<GgmlType> types_for_row(int n_in) {
  std::vector<GgmlType> t;
  for (GgmlType type : ggml_supported_types()) {
    if (ggml_row_bytes(type, uint64_t(n_in))) t.push_back(type);
  }
  return t;
}

// x as the CPU kernels' 16-bit activations define it, written here from
// that definition (kernels/matmul_x16.cl's quantize_x16 and cpu_dot.cl's
// x16_quantize, with groups of 32): per group
// d = max|x| / 32767, q = round-half-even(x * 32767 / max|x|); the values d * q.
inline std::vector<float> sixteen_bit(const std::vector<float>& x, size_t group) {
  const float max_code = 32767.0f;
  std::vector<float> y(x.size());
  for (size_t b = 0; b + group <= x.size(); b += group) {
    float amax = 0;
    for (size_t i = b; i < b + group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / max_code, id = amax > 0 ? max_code / amax : 0.0f;
    for (size_t i = b; i < b + group; ++i) y[i] = d * std::nearbyint(x[i] * id);
  }
  return y;
}

// Each value rounded to the nearest fp16 (ties to even).
inline std::vector<float> fp16_rounded(const std::vector<float>& v) {
  std::vector<float> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) y[i] = fp16_to_fp32(fp32_to_fp16(v[i]));
  return y;
}

// x in rows of n values, each row as matmul_mma_deq.cl's pack_x_f16 defines
// it: times 2^k, k bringing the row's largest |x| to [2^14, 2^15) (clamped
// to -126..126; 0 for a zero row), rounded to fp16, and divided by 2^k.
inline std::vector<float> fp16_scaled_rows(const std::vector<float>& x, size_t n) {
  std::vector<float> y(x.size());
  for (size_t r = 0; r + n <= x.size(); r += n) {
    float m = 0;
    for (size_t i = r; i < r + n; ++i) m = std::max(m, std::fabs(x[i]));
    int e = 0;
    std::frexp(m, &e);  // m = f 2^e, f in [0.5, 1): floor(log2 m) = e - 1
    const int k = m > 0 ? std::clamp(14 - (e - 1), -126, 126) : 0;
    for (size_t i = r; i < r + n; ++i) {
      y[i] = std::ldexp(fp16_to_fp32(fp32_to_fp16(std::ldexp(x[i], k))), -k);
    }
  }
  return y;
}

// W (rows x n_in, row-major) @ x in float64.
inline std::vector<double> matvec_f64(const std::vector<float>& w, const std::vector<float>& x,
                                      int n_in, int rows) {
  std::vector<double> out(size_t(rows), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n_in; ++i) {
      out[size_t(r)] += double(w[size_t(r) * size_t(n_in) + size_t(i)]) * double(x[size_t(i)]);
    }
  }
  return out;
}

// ||a - b|| / ||b|| with b in float64.
inline double relative_error(std::span<const float> a, std::span<const double> b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Number of elements of `v` from `begin` on that are no longer NaN (a write
// past the end of an output).
inline size_t count_overwritten(const std::vector<float>& v, size_t begin) {
  size_t n = 0;
  for (size_t i = begin; i < v.size(); ++i) n += !std::isnan(v[i]);
  return n;
}

// A KV cache written by a kernel against `ref`, whose NaN entries mark the
// places the kernel must leave alone (the buffer was NaN-poisoned): the
// written entries within `tol` (relative), none of the others touched.
inline void expect_cache_matches(const ClMem& cache, const std::vector<double>& ref, double tol) {
  const std::vector<float> got = cl_read(cache, ref.size());
  std::vector<float> got_set;
  std::vector<double> want;
  size_t stray = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    if (std::isnan(ref[e])) {
      stray += !std::isnan(got[e]);
    } else {
      got_set.push_back(got[e]);
      want.push_back(ref[e]);
    }
  }
  EXPECT_LE(relative_error(got_set, want), tol);
  EXPECT_EQ(stray, 0u) << "cache written outside the chunk's positions";
}

}  // namespace clchat::test
