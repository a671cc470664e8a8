// Kernel arguments bound by name (KernelArgs, engine/cl/runtime.h): on the
// test device (PoCL reports argument names, from a fresh build and from a
// cached binary alike) a binding whose name, order or count differs from the
// kernel's signature is rejected with an error naming the kernel and the
// argument, and a correct one runs. The engine's own bindings are checked
// when it builds; here also a whole forward pass with the portable (GPU)
// kernels, which PoCL builds too. The NVIDIA-only kernels (decode_persistent.cl,
// matmul_mma_deq.cl, attention_mma.cl) are checked when the engine builds them there.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cl/forward.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"
#include "tests/gguf_fixtures.h"

namespace clchat {
namespace {

constexpr const char* k_source =
    "__kernel void probe(int alpha, __global float* beta, ulong gamma) {\n"
    "  beta[0] = (float)alpha + (float)gamma;\n"
    "}\n";

std::string bind_error(const ClKernel& k, const KernelArgs& args) {
  try {
    args.bind(k);
  } catch (const KernelArgError& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_names_checked(const ClRuntime& rt) {
  const ClProgram p = rt.build_program("probe", k_source, "-cl-std=CL1.2");
  const ClKernel k = rt.create_kernel(p, "probe");
  const ClMem out = rt.alloc(4);
  EXPECT_EQ(bind_error(k, {{"alpha", cl_int(1)}, {"betta", out}, {"gamma", cl_ulong(2)}}),
            "kernel probe: argument 1 is 'beta', bound as 'betta'");
  EXPECT_EQ(bind_error(k, {{"gamma", cl_int(1)}, {"beta", out}, {"alpha", cl_ulong(2)}}),
            "kernel probe: argument 0 is 'alpha', bound as 'gamma'");
  EXPECT_EQ(bind_error(k, {{"alpha", cl_int(1)}, {"beta", out}}),
            "kernel probe takes 3 arguments; 2 are bound");
  // Right: it runs.
  const KernelArgs args = {{"alpha", cl_int(40)}, {"beta", out}, {"gamma", cl_ulong(2)}};
  args.bind(k);
  EXPECT_EQ(args.index("gamma"), 2u);
  EXPECT_THROW(args.index("delta"), KernelArgError);
  const size_t one = 1;
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k.get(), 1, nullptr, &one, &one, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel");
  float got = 0;
  cl_check(clEnqueueReadBuffer(rt.queue(), out.get(), CL_TRUE, 0, 4, &got, 0, nullptr, nullptr),
           "clEnqueueReadBuffer");
  EXPECT_EQ(got, 42.0f);
}

bool names_reported(const ClRuntime& rt) {
  const ClProgram p = rt.build_program("probe", k_source, "-cl-std=CL1.2");
  const ClKernel k = rt.create_kernel(p, "probe");
  size_t n = 0;
  return clGetKernelArgInfo(k.get(), 0, CL_KERNEL_ARG_NAME, 0, nullptr, &n) == CL_SUCCESS;
}

TEST(KernelArgs, MisnamedBindingsAreRejected) {
  const test::TempDir cache;
  const ClRuntime rt(test::cl_test_runtime().device(), false, cache.path());
  if (!test::cl_test_runtime().device().is_cpu && !names_reported(rt)) {
    GTEST_SKIP() << "this driver does not report argument names";
  }
  expect_names_checked(rt);  // built from source (and cached)
  size_t n_cached = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache.path())) {
    n_cached += e.path().extension() == ".bin";
  }
  ASSERT_EQ(n_cached, 1u);
  if (!test::cl_test_runtime().device().is_cpu && !names_reported(rt)) {
    GTEST_SKIP() << "this driver does not report argument names of a cached binary";
  }
  expect_names_checked(rt);  // loaded from the cache
}

TEST(KernelArgs, ScalarTypesKeepTheirSize) {
  EXPECT_EQ(KernelArg("a", cl_int(1)).size(), 4u);
  EXPECT_EQ(KernelArg("a", cl_uint(1)).size(), 4u);
  EXPECT_EQ(KernelArg("a", cl_ulong(1)).size(), 8u);
  EXPECT_EQ(KernelArg("a", cl_float(1)).size(), 4u);
  EXPECT_EQ(KernelArg("a", ClMem()).size(), sizeof(cl_mem));
}

// The portable kernels (matvec.cl, attention.cl, argmax.cl, the tiled
// matmul.cl) bind and give the same greedy ids as the device's own.
TEST(KernelArgs, PortableKernelsBindAndAgree) {
  SyntheticSpec spec;
  spec.name = "test-kernel-args";
  spec.n_embd = 128;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.n_vocab = 512;
  spec.n_ctx = 64;
  spec.layer_type = GgmlType::Q4_0;
  spec.embd_type = GgmlType::Q8_0;
  spec.tied = true;
  spec.seed = 4242;
  const std::string path = write_synthetic_model_tmp(spec);
  const Model model = load_model(path);
  const DeviceInfo& device = test::cl_test_runtime().device();
  auto greedy = [&](const Tuning& tuning) {
    ClForward cl(model, test::cl_test_runtime(), ClForwardOptions{64, 8, tuning});
    std::vector<int32_t> ids{cl.prefill(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0)};
    for (int pos = 10; pos < 30; ++pos) ids.push_back(cl.decode_argmax(ids.back(), pos));
    return ids;
  };
  Tuning portable = Tuning::for_device(device);
  portable.decode.persistent = false;
  portable.decode.plan.cpu_kernels = false;
  portable.decode.plan.tpr = 8;
  portable.decode.plan.rows = 4;
  portable.decode.plan.att_wg = 128;
  portable.decode.plan.argmax_wg = 256;
  portable.prefill = PrefillTuning{};  // the GPU tiling (tensor cores off)
  portable.prefill.norm_wg = 64;
  EXPECT_EQ(greedy(portable), greedy(Tuning::for_device(device)));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace clchat
