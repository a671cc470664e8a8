// The OpenCL programs of the engine, built for one device with its tuning
// (KernelTuning, engine/cl/tuning.h):
// matvec.cl once per weight type in use (-DWTYPE=...), attention.cl and
// argmax.cl once; on CPU devices matvec_cpu.cl, attention_cpu.cl and
// argmax_cpu.cl instead (see KernelTuning::cpu_kernels). argmax is built
// without fast-math flags. Kernel objects are created per use so each can keep its own
// arguments (the decode plan sets most of them once).
#pragma once

#include <map>
#include <string>

#include "engine/cl/runtime.h"
#include "engine/cl/tuning.h"
#include "engine/gguf/ggml_types.h"

namespace clchat {

class ClPrograms {
 public:
  ClPrograms(const ClRuntime& rt, KernelTuning tuning);
  const KernelTuning& tuning() const { return tuning_; }

  // matvec.cl kernels for weights of `type`: "matvec", "ffn_gate_up",
  // "qkv_rope", "get_row".
  ClKernel weight_kernel(GgmlType type, const char* name);
  ClKernel attention_kernel();               // "attention_decode"
  ClKernel argmax_kernel(const char* name);  // "argmax_partial", "argmax_final"
  // kernels/sample.cl ("sample_chain"), strict math, with
  // SAMPLE_WG = tuning().sample_wg and K_MAX = k_max. Needs cl_khr_fp64 (a
  // build failure throws ClError).
  ClKernel sample_kernel(const char* name, int k_max);
  // CPU devices: the lm_head with the greedy argmax folded in
  // ("matvec_argmax" of matvec_cpu.cl, built after argmax_cpu.cl): one
  // launch instead of three, each saving PoCL's ~20 us of waking its worker
  // threads between commands.
  bool fused_head_argmax() const { return use_cpu_matvec() && tuning_.cpu_fuse; }
  ClKernel head_argmax_kernel(GgmlType type);
  // CPU devices: qkv_rope over the stacked [Wq; Wk; Wv] with the decode
  // attention folded in ("qkv_rope_attention" of matvec_cpu.cl, built after
  // attention_cpu.cl): each head runs as soon as its rows are written.
  bool fused_qkv_attention() const { return use_cpu_matvec() && tuning_.cpu_fuse; }
  ClKernel qkv_attention_kernel(GgmlType type);

 private:
  // kernels/<stem>.cl built with defines (cached); stem "a+b" builds a.cl
  // and b.cl as one program.
  const ClProgram& program(const std::string& stem, const std::string& defines,
                           bool strict_math = false);
  std::string matvec_defines(GgmlType type) const;
  std::string matvec_cpu_defines(GgmlType type) const;
  bool use_cpu_matvec() const { return tuning_.cpu_kernels && tuning_.tpr == 1; }
  bool shfl_self_test();
  const ClRuntime& rt_;
  KernelTuning tuning_;
  std::map<std::string, ClProgram> programs_;  // by stem + defines
};

// The device ran out of memory (CL_MEM_OBJECT_ALLOCATION_FAILURE,
// CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY): the fallbacks that catch a
// failing optional path rethrow these, since what follows would fail too.
bool is_out_of_memory(cl_int code);

// Source text of kernels/<stem>.cl, embedded at build time; "a+b": a.cl's
// text, then b.cl's, as one program.
std::string kernel_source(const std::string& stems);

}  // namespace clchat
