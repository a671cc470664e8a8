#include "engine/cl/programs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace clchat {

// Generated from kernels/*.cl by kernels/embed_kernels.cmake.
const std::map<std::string, std::string_view>& embedded_kernel_sources();

std::string kernel_source(const std::string& stems) {
  const auto& sources = embedded_kernel_sources();
  std::string text;
  for (size_t begin = 0; begin <= stems.size();) {
    const size_t end = std::min(stems.find('+', begin), stems.size());
    const std::string stem = stems.substr(begin, end - begin);
    auto it = sources.find(stem);
    if (it == sources.end()) throw std::logic_error("no embedded kernel source " + stem + ".cl");
    text += it->second;
    text += '\n';
    begin = end + 1;
  }
  return text;
}

bool is_out_of_memory(cl_int code) {
  return code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES ||
         code == CL_OUT_OF_HOST_MEMORY;
}

ClPrograms::ClPrograms(const ClRuntime& rt, KernelTuning tuning) : rt_(rt), tuning_(tuning) {
  // The shuffles (shfl.sync, full mask) need whole warps: a matvec work-group
  // of 8 or 12 items gave wrong RMSNorm sums.
  if (tuning_.nv_shfl && tuning_.matvec_wg() % 32 != 0) tuning_.nv_shfl = false;
  if (tuning_.nv_shfl && !shfl_self_test()) tuning_.nv_shfl = false;
}

// Builds the shuffle path and checks its lane sums; any failure (the driver
// rejecting inline PTX included) selects the portable path, except the
// device running out of memory, which is rethrown.
bool ClPrograms::shfl_self_test() {
  try {
    ClKernel k = rt_.create_kernel(program("quant_blocks+matvec", matvec_defines(GgmlType::F32)),
                                   "shfl_selftest");
    const size_t n = 64;
    ClMem out = rt_.alloc(n * sizeof(float));
    bind_args(k, {{"width", cl_int(tuning_.tpr)}, {"out", out}});
    cl_check(clEnqueueNDRangeKernel(rt_.queue(), k.get(), 1, nullptr, &n, &n, 0, nullptr, nullptr),
             "clEnqueueNDRangeKernel(shfl_selftest)");
    std::vector<float> got(n);
    cl_check(clEnqueueReadBuffer(rt_.queue(), out.get(), CL_TRUE, 0, n * sizeof(float), got.data(),
                                 0, nullptr, nullptr),
             "clEnqueueReadBuffer(shfl_selftest)");
    const size_t w = size_t(tuning_.tpr);
    for (size_t i = 0; i < n; ++i) {
      const size_t first = i / w * w;
      const float want = float(w * first + w * (w - 1) / 2);
      if (got[i] != want) {
        spdlog::warn("warp-shuffle self-test failed (lane {}: {} != {}); using the portable path",
                     i, got[i], want);
        return false;
      }
    }
    spdlog::info("warp-shuffle reductions enabled (self-test passed)");
    return true;
  } catch (const ClError& e) {
    // Out of memory is the device's state, not the shuffles': the load that
    // follows would fail too, so report it once, from here.
    if (is_out_of_memory(e.code())) throw;
    spdlog::warn("warp-shuffle path unavailable ({}); using the portable path", e.what());
    return false;
  } catch (const KernelArgError&) {
    throw;  // a bug in clchat, not the device
  } catch (const std::exception& e) {
    spdlog::warn("warp-shuffle path unavailable ({}); using the portable path", e.what());
    return false;
  }
}

std::string ClPrograms::matvec_defines(GgmlType type) const {
  return " -DWTYPE=" + std::to_string(int(type)) + " -DTPR=" + std::to_string(tuning_.tpr) +
         " -DROWS=" + std::to_string(tuning_.rows) + (tuning_.nv_shfl ? " -DUSE_NV_SHFL=1" : "");
}

const ClProgram& ClPrograms::program(const std::string& stem, const std::string& defines,
                                     bool strict_math) {
  const std::string key = stem + defines;
  auto it = programs_.find(key);
  if (it != programs_.end()) return it->second;
  // Strict programs drop the fast-math flags: argmax must compare exactly
  // and keep its isnan tests, which -cl-fast-relaxed-math may remove.
  const std::string options = strict_math ? "-cl-std=CL1.2" : tuning_.build_options;
  ClProgram p = rt_.build_program(stem, kernel_source(stem), options + defines);
  return programs_.emplace(key, std::move(p)).first->second;
}

std::string ClPrograms::matvec_cpu_defines(GgmlType type) const {
  return " -DWTYPE=" + std::to_string(int(type)) + " -DROWS=" + std::to_string(tuning_.rows) +
         " -DNR=" + std::to_string(tuning_.cpu_nr) + " -DX16_AS=__local" +
         (tuning_.cpu_portable ? " -DCPU_PORTABLE=1" : "");
}

ClKernel ClPrograms::weight_kernel(GgmlType type, const char* name) {
  // get_row (once per token) always comes from matvec.cl.
  if (use_cpu_matvec() && std::string_view(name) != "get_row") {
    return rt_.create_kernel(program("quant_blocks+cpu_dot+matvec_cpu", matvec_cpu_defines(type)),
                             name);
  }
  return rt_.create_kernel(program("quant_blocks+matvec", matvec_defines(type)), name);
}

ClKernel ClPrograms::head_argmax_kernel(GgmlType type) {
  if (!fused_head_argmax()) throw std::logic_error("matvec_argmax needs the CPU kernels");
  return rt_.create_kernel(program("argmax_cpu+quant_blocks+cpu_dot+matvec_cpu",
                                   matvec_cpu_defines(type) + " -DWITH_ARGMAX=1"),
                           "matvec_argmax");
}

ClKernel ClPrograms::qkv_attention_kernel(GgmlType type) {
  if (!fused_qkv_attention()) throw std::logic_error("qkv_rope_attention needs the CPU kernels");
  return rt_.create_kernel(program("attention_cpu+quant_blocks+cpu_dot+matvec_cpu",
                                   matvec_cpu_defines(type) + " -DATT_WG=" +
                                       std::to_string(tuning_.att_wg) + " -DWITH_ATTENTION=1"),
                           "qkv_rope_attention");
}

ClKernel ClPrograms::attention_kernel() {
  return rt_.create_kernel(program(tuning_.cpu_kernels ? "attention_cpu" : "attention",
                                   " -DATT_WG=" + std::to_string(tuning_.att_wg)),
                           "attention_decode");
}

ClKernel ClPrograms::argmax_kernel(const char* name) {
  return rt_.create_kernel(program(tuning_.cpu_kernels ? "argmax_cpu" : "argmax",
                                   " -DARGMAX_WG=" + std::to_string(tuning_.argmax_wg), true),
                           name);
}

ClKernel ClPrograms::sample_kernel(const char* name, int k_max) {
  return rt_.create_kernel(program("sample",
                                   " -DSAMPLE_WG=" + std::to_string(tuning_.sample_wg) +
                                       " -DK_MAX=" + std::to_string(k_max),
                                   true),
                           name);
}

}  // namespace clchat
