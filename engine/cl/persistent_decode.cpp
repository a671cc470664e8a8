// Host side of the persistent decode kernels: eligibility, the weight arena,
// the barrier self-test and the per-token launch.
#include "engine/cl/persistent_decode.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/chat/sampler.h"
#include "engine/cl/fault_injection.h"
#include "engine/cl/programs.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace clchat {

namespace {

// Stages per layer, each ended by a grid barrier (P1..P5 in
// decode_persistent.cl and decode_persistent_cpu.cl), and the names the
// trace and the profile give them; the last name is the head's stage.
constexpr size_t k_stages = 5;
constexpr size_t k_att_split_max = 16;  // ATT_SPLIT_MAX in both persistent kernels
constexpr const char* k_stage_names[k_stages + 1] = {"qkv",     "attention", "wo",
                                                     "gate_up", "down",      "head"};
constexpr const char* k_start_name = "start";  // the CPU kernel's lead stage

// TSC ticks per microsecond, measured against the steady clock over 20 ms
// (x86-64 hosts; the CPU kernel's trace is in TSC ticks).
double tsc_ticks_per_us() {
#if defined(__x86_64__)
  const auto t0 = std::chrono::steady_clock::now();
  const unsigned long long c0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const unsigned long long c1 = __rdtsc();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return double(c1 - c0) / us;
#else
  return 1.0;
#endif
}

}  // namespace

std::string PersistentDecode::ineligible(const ModelConfig& c, const DeviceInfo& dev,
                                         const DecodeTuning& tuning, const DeviceWeights& w) {
  if (!tuning.persistent) return "turned off (engine.persistent_decode, --no-persistent)";
  const bool cpu = dev.is_cpu;
  if (c.n_embd_q() % 32 != 0) return "query width not a multiple of 32";
  if (cpu) {
#if !defined(__x86_64__)
    return "the CPU kernel needs an x86-64 host";
#endif
    if (!tuning.plan.cpu_kernels) return "CPU kernels off (cpu_kernels=0)";
    if (c.head_dim % 4 != 0) return "head size not a multiple of 4";
  } else {
    if (dev.platform_name.find("NVIDIA") == std::string::npos) return "not NVIDIA's OpenCL";
    if (!tuning.plan.nv_shfl) return "warp shuffles unavailable";
    // Its sampling chain (kernels/sample.cl) computes in double.
    if (!dev.has_extension("cl_khr_fp64")) return "no cl_khr_fp64";
    if (c.head_dim < 32 || c.head_dim > 256 || (c.head_dim & (c.head_dim - 1)) != 0) {
      return "head size not a power of two from 32 to 256";
    }
  }
  if (c.n_head % c.n_head_kv != 0) return "query heads not a multiple of KV heads";
  if (c.n_rot % 2 != 0) return "odd rotary dimension count";
  std::string why;
  const std::optional<LayerTypes> types = LayerTypes::of(w, &why);
  if (!types) return why;
  bool blocks = false;
  for (int r = 0; r < LayerTypes::n_roles; ++r) {
    blocks = blocks || ggml_is_quantized(types->type[r]) || ggml_is_quantized(types->alt[r]);
  }
  if ((!cpu || blocks) && (c.n_embd % 32 != 0 || c.n_ff % 32 != 0)) {
    return "row lengths not multiples of 32";
  }
  return "";
}

// Work-items per work-group and work-group counts, in the order tried until
// the self-test passes. CPU: one work-group of 2 per core (PoCL runs one per
// worker thread; more cannot all be resident). NVIDIA: one work-group of 512
// per SM, else two of 256 per SM, else one (the kernel's registers decide;
// DecodeTuning::persist_wg_size keeps one size). persist_wgs_per_cu sets
// work-groups per compute unit, persist_groups their total.
std::vector<PersistentDecode::Shape> PersistentDecode::shapes_to_try(const ModelConfig& c,
                                                                     const DeviceInfo& dev,
                                                                     const DecodeTuning& tuning) {
  const size_t cus = dev.compute_units;
  std::vector<Shape> shapes;
  if (dev.is_cpu) {
    shapes = {{2, {cus}}};
  } else {
    const int pwg = tuning.persist_wg_size;
    if (pwg != 256) shapes.push_back({512, {cus}});
    if (pwg != 512) shapes.push_back({256, {2 * cus, cus}});
    // decode_persistent.cl's local memory: xl (padded), att_acc (a row of
    // AW_STRIDE floats per warp), xr with post-norms, qn with head norms,
    // small arrays.
    std::erase_if(shapes, [&](const Shape& s) {
      const size_t parts = s.local / size_t(c.head_dim);
      const size_t stride = size_t(c.head_dim) + (parts > 1 ? 32 / parts : 0);
      const size_t local_bytes = size_t(std::max({c.n_embd, c.n_ff, c.n_embd_q()})) / 32 * 36 * 4 +
                                 s.local / 32 * stride * 4 + 512 +
                                 (c.post_norms ? size_t(c.n_embd) * 4 : 0) +
                                 (c.qk_norm ? size_t(c.head_dim) * 4 : 0);
      return local_bytes > dev.local_mem_bytes;
    });
  }
  for (Shape& s : shapes) {
    if (tuning.persist_wgs_per_cu > 0) s.groups = {cus * size_t(tuning.persist_wgs_per_cu)};
    if (tuning.persist_groups > 0) s.groups = {size_t(tuning.persist_groups)};
  }
  return shapes;
}

std::unique_ptr<PersistentDecode> PersistentDecode::create(const ModelConfig& c,
                                                           const ClRuntime& rt,
                                                           const DecodeTuning& tuning,
                                                           const DeviceWeights& w, DecodeState& s) {
  auto no = [](const std::string& why) {
    spdlog::info("persistent decode kernel not used: {}", why);
    return nullptr;
  };
  if (const std::string why = ineligible(c, rt.device(), tuning, w); !why.empty()) return no(why);
  const std::vector<Shape> shapes = shapes_to_try(c, rt.device(), tuning);
  if (shapes.empty()) return no("activations do not fit local memory");
  std::unique_ptr<PersistentDecode> p(new PersistentDecode(c, rt, tuning, w, s));
  try {
    if (!p->build(shapes)) return nullptr;
  } catch (const KernelArgError&) {
    throw;  // a bug in clchat, not the device
  } catch (const std::exception& e) {
    return no(e.what());
  }
  spdlog::info("persistent decode kernel{}: {} work-groups of {}, {} barriers per token; {}",
               p->cpu_ ? " (CPU)" : "", p->n_groups_, p->local_size_, p->barriers_per_token_,
               p->types_.describe(w));
  return p;
}

PersistentDecode::PersistentDecode(const ModelConfig& c, const ClRuntime& rt,
                                   const DecodeTuning& tuning, const DeviceWeights& w,
                                   DecodeState& s)
    : config_(c),
      rt_(rt),
      tuning_(tuning),
      w_(w),
      s_(s),
      types_(LayerTypes::of(w).value()),  // create() checked
      cpu_(rt.device().is_cpu) {}

bool PersistentDecode::build(const std::vector<Shape>& shapes) {
  std::optional<WeightArena> arena = WeightArena::build(w_, types_, rt_);
  if (!arena) {
    spdlog::info("persistent decode kernel not used: the weight arena exceeds one allocation");
    return false;
  }
  arena_ = std::move(*arena);
  n_groups_ = 0;  // the most work-groups any shape tries, for the sizes
  for (const Shape& s : shapes) {
    n_groups_ = std::max(n_groups_, *std::max_element(s.groups.begin(), s.groups.end()));
  }
  lead_barriers_ = cpu_ ? 1 : 0;
  barriers_per_token_ = uint32_t(k_stages * size_t(config_.n_layer) + 1 + lead_barriers_);
  alloc_scratch();
  if (cpu_) trace_ticks_per_us_ = tsc_ticks_per_us();
  trace_sum_us_.assign(k_stages + 1, 0.0);
  return try_shapes(shapes, source(), defines());
}

// The kernel's own buffers, sized for n_groups_ work-groups.
void PersistentDecode::alloc_scratch() {
  const ModelConfig& c = config_;
  bar_ = rt_.alloc(4);
  abort_ = rt_.alloc(4);
  part_val_ = rt_.alloc(n_groups_ * 4);
  part_idx_ = rt_.alloc(2 * n_groups_ * 4);
  // Attention split partials (the CPU kernel uses them when the head size is
  // a multiple of 8).
  att_part_ = rt_.alloc(size_t(c.n_head) * k_att_split_max * size_t(c.head_dim + 2) * 4);
  att_count_ = rt_.alloc(size_t(c.n_head) * 4);
  if (cpu_) {
    xn_ = rt_.alloc(n_groups_ * xn_stride() * 4);
    work_ = rt_.alloc(4);
  }
  post_out_ = rt_.alloc(size_t(c.n_embd) * 4);
  if (!cpu_) {
    // The sampling chain's maxima and list (decode_persistent.cl), and the
    // list's length, 0 between tokens.
    cand_ = rt_.alloc(
        (n_groups_ + std::max<size_t>(sample_scratch(), k_device_top_k_max) - k_device_top_k_max) *
        8);
    cand_n_ = rt_.alloc(4);
  }
  trace_ = rt_.alloc((barriers_per_token_ + 1) * 8, true);
}

// decode_persistent.cl's SAMPLE_A: the ulongs of local memory (xl, LOCAL_XP
// floats) its sampling chain works in.
size_t PersistentDecode::sample_scratch() const {
  const size_t local_x = size_t(std::max({config_.n_ff, config_.n_embd, config_.n_embd_q()}));
  return local_x / 32 * 36 / 2;
}

bool PersistentDecode::samples(const SamplingParams& p) const {
  if (cpu_ || !device_samplable(p)) return false;
  const size_t top_k = p.greedy() ? 1 : size_t(p.top_k);
  const size_t scratch = sample_scratch();
  // The list and the sorted candidates, or the radix select's bins, its
  // output and the sorted ones; the maxima (decode_persistent.cl).
  return scratch >= 2 * size_t(k_device_top_k_max) + 128 && top_k <= n_groups_ &&
         n_groups_ + k_device_top_k_max <= scratch;
}

// Floats per work-group in xn_ (CPU kernel): the normed input (n_embd
// rounded up to 32 floats), then a stage's input as 16-bit integers with a
// scale and a sum per 32 values (cpu_dot.cl's X16_BYTES, 128-byte aligned),
// for the longest of n_embd, n_ff and the query width rounded up to 32, then
// with post-norms the group's copy of the residual stream (n_embd rounded
// up); the kernel checks it.
size_t PersistentDecode::xn_stride() const {
  auto up32 = [](size_t n) { return (n + 31) / 32 * 32; };
  const size_t n16 = up32(size_t(std::max({config_.n_embd, config_.n_ff, config_.n_embd_q()})));
  const size_t x16_bytes = n16 * 2 + (n16 / 32 * 8 + 127) / 128 * 128;
  const size_t embd = up32(size_t(config_.n_embd));
  return embd + up32(x16_bytes / 4) + (config_.post_norms ? embd : 0);
}

// The model's shape and weight types, then the tuning's options.
std::string PersistentDecode::defines() const {
  const ModelConfig& c = config_;
  const DeviceWeights& w = w_;
  char eps[64];
  std::snprintf(eps, sizeof(eps), "%.9ef", double(c.rms_eps));
  std::string d =
      " -DN_EMBD=" + std::to_string(c.n_embd) + " -DN_FF=" + std::to_string(c.n_ff) +
      " -DN_HEAD=" + std::to_string(c.n_head) + " -DN_HEAD_KV=" + std::to_string(c.n_head_kv) +
      " -DHEAD_DIM=" + std::to_string(c.head_dim) + " -DN_ROT=" + std::to_string(c.n_rot) +
      " -DN_LAYER=" + std::to_string(c.n_layer) + " -DN_VOCAB=" + std::to_string(c.n_vocab) +
      " -DN_CTX=" + std::to_string(s_.n_ctx) +
      " -DID_RING=" + std::to_string(DecodeState::k_id_ring) + " -DRMS_EPS=" + eps;
  // Per role its type and its ALT type (the same when the layers share one:
  // the kernels' ALT branches then fold away).
  auto wt = [](GgmlType t) { return std::to_string(int(t)); };
  constexpr const char* k_roles[LayerTypes::n_roles] = {"Q", "K", "V", "WO", "FFN", "DOWN"};
  for (int r = 0; r < LayerTypes::n_roles; ++r) {
    d += std::string(" -DWT_") + k_roles[r] + "=" + wt(types_.type[r]) + " -DWT_" + k_roles[r] +
         "_ALT=" + wt(types_.alt[r]);
  }
  d += " -DWT_HEAD=" + wt(w.head().type) + " -DWT_EMBD=" + wt(w.token_embd.type);
  if (!c.plain_llama()) d += graph_defines();
  d += " -DATT_SPLIT_MAX=" + std::to_string(k_att_split_max);
  if (!cpu_) d += prefetch_defines();
  // Positions per attention split (the kernels' defaults are 128 on NVIDIA,
  // 64 on CPU devices).
  if (tuning_.att_split_pos > 0) d += " -DATT_SPLIT_POS=" + std::to_string(tuning_.att_split_pos);
  if (cpu_) {
    d += " -DXN_STRIDE=" + std::to_string(xn_stride());
    d += " -DNR=" + std::to_string(tuning_.plan.cpu_nr) +
         (tuning_.plan.cpu_portable ? " -DCPU_PORTABLE=1" : "");
  }
  // A/B runs of kernel variants in one build (clchat bench --tune
  // persist_defines=...), logged.
  if (!tuning_.persist_defines.empty()) {
    spdlog::info("persistent decode kernel: persist_defines {}", tuning_.persist_defines);
    d += " " + tuning_.persist_defines;
  }
  return d;
}

// The options of a graph other than llama's (decode_persistent.cl's NEOX ..
// Q_MUL).
std::string PersistentDecode::graph_defines() const {
  const ModelConfig& c = config_;
  auto flt = [](float v) {
    char b[64];
    std::snprintf(b, sizeof(b), "%.9ef", double(v));
    return std::string(b);
  };
  auto flag = [](const char* name, bool on) {
    return std::string(" -D") + name + "=" + (on ? "1" : "0");
  };
  std::string d = " -DN_EMBD_Q=" + std::to_string(c.n_embd_q());
  if (cpu_) d += " -DGENERAL_GRAPH=1";  // decode_persistent_cpu.cl's head-wise P1
  d += flag("NEOX", c.rope_style == RopeStyle::Neox) + flag("QKV_BIAS", c.qkv_bias) +
       flag("QK_NORM", c.qk_norm) + flag("POST_NORMS", c.post_norms) +
       flag("FFN_GELU", c.ffn_act == FfnActivation::GeluTanh);
  if (c.sliding_window > 0) {
    d += " -DWINDOW=" + std::to_string(c.sliding_window) +
         " -DKV_RING=" + std::to_string(s_.kv_ring);
  }
  if (c.embed_scale != 1.0f) d += " -DEMBED_SCALE=" + flt(c.embed_scale);
  if (c.q_scale() != 1.0f) d += " -DQ_MUL=" + flt(c.q_scale());
  return d;
}

// The NVIDIA kernel prefetches the layers' weights into L2 a layer ahead
// where a layer's weights are at most 16 MiB, and not at all above that
// (L2_PREFETCH=0): between the sizes measured, where SmolLM2-135M's 2 MB
// layers (Q4_0), SmolLM2-360M's 5.5 MB, Qwen2.5-0.5B's 8.4 MB and Gemma 3
// 270M's gain from it or break even and the 1B and 1.7B shapes' 34 and 38 MB
// layers decode 8-13% faster with none (H200; decode_persistent.cl has the
// figures; on the H100 only the stage-ahead prefetch against the layer-ahead
// one was measured, not against none). OpenCL has no query for L2:
// NVIDIA's CL_DEVICE_GLOBAL_MEM_CACHE_SIZE is the L1s' total (4.125 MiB on
// the H100).
std::string PersistentDecode::prefetch_defines() const {
  if (tuning_.persist_defines.find("-DL2_PREFETCH") != std::string::npos) return "";
  constexpr uint64_t k_prefetch_layer_bytes = uint64_t(16) << 20;
  uint64_t layer_bytes = 0;
  for (const DeviceWeights::Layer& l : w_.layers)
    layer_bytes = std::max(layer_bytes, l.matrix_bytes());
  return layer_bytes > k_prefetch_layer_bytes ? " -DL2_PREFETCH=0" : "";
}

// The kernel's source: the arena layout, then (CPU) the shared dot products
// and attention, then the kernel.
std::string PersistentDecode::source() const {
  std::string text;
  auto add = [&text](const char* stem) {
    text += kernel_source(stem);
    text += '\n';
  };
  add("quant_blocks");
  add("persistent_layout");
  if (cpu_) {
    add("cpu_dot");
    add("attention_cpu");
    add("decode_persistent_cpu");
  } else {
    add("sample");  // the sampling chain's functions
    add("decode_persistent");
  }
  return text;
}

// Builds the kernel for each shape in turn and keeps the first whose
// work-groups pass the barrier self-test.
bool PersistentDecode::try_shapes(const std::vector<Shape>& shapes, const std::string& source,
                                  const std::string& defines) {
  for (const Shape& shape : shapes) {
    local_size_ = shape.local;
    try {
      build_kernel(source, defines);
      for (const size_t n : shape.groups) {
        n_groups_ = n;
        if (barrier_self_test()) return true;
        reset_barrier();
      }
    } catch (const ClError& e) {
      // e.g. CL_OUT_OF_RESOURCES: this shape's registers do not fit.
      if (&shape == &shapes.back()) throw;
      spdlog::info("persistent decode kernel: work-groups of {}: {}", shape.local, e.what());
    }
  }
  spdlog::warn("persistent decode kernel not used: the grid barrier self-test failed");
  return false;
}

// The program for work-groups of local_size_ and its kernel with its
// arguments bound (the buffers exist).
void PersistentDecode::build_kernel(const std::string& source, const std::string& defines) {
  program_ = rt_.build_program(cpu_ ? "decode_persistent_cpu" : "decode_persistent", source,
                               tuning_.plan.build_options + defines +
                                   (cpu_ ? ""
                                         : " -DPWG=" + std::to_string(local_size_) +
                                               " -DSAMPLE_WG=" + std::to_string(local_size_) +
                                               " -DK_MAX=" + std::to_string(k_device_top_k_max) +
                                               " -DSAMPLE_FUNCTIONS_ONLY=1 -DSAMPLE_PTX_MATH=1"));
  reset_barrier();
  kernel_ = rt_.create_kernel(program_, "decode_token");
  const WeightArena& a = arena_;
  std::vector<KernelArg> args = {{"arena", a.arena},
                                 {"layer_off", a.layer_off},
                                 {"embd_q", cl_ulong(a.embd_q)},
                                 {"embd_s", cl_ulong(a.embd_s)},
                                 {"head_q", cl_ulong(a.head_q)},
                                 {"head_s", cl_ulong(a.head_s)},
                                 {"out_norm", cl_ulong(a.out_norm)},
                                 {"rope_cs", w_.rope_cs},
                                 {"rope_cs_swa", w_.rope_table_swa()}};
  args.insert(args.end(), {{"k_cache", s_.k_cache},
                           {"v_cache", s_.v_cache},
                           {"x", s_.x},
                           {"q", s_.q},
                           {"att", s_.att_out},
                           {"h", s_.h},
                           {"logits", s_.logits},
                           {"part_val", part_val_},
                           {"part_idx", part_idx_},
                           {"ids", s_.ids},
                           {"token_index", cl_int(0)},
                           {"pos", cl_int(0)},
                           {"bar", bar_},
                           {"bar_base", cl_uint(0)},
                           {"abort_flag", abort_},
                           {"trace", ClMem()}});
  if (cpu_) {
    args.insert(
        args.end(),
        {{"work", work_}, {"scores", s_.scores}, {"xn", xn_}, {"spin_ticks", spin_ticks()}});
  }
  args.insert(args.end(), {{"att_part", att_part_}, {"att_count", att_count_}, {"o", post_out_}});
  if (!cpu_) {
    args.insert(args.end(), {{"history", ClMem()}, {"cand", cand_}, {"cand_n", cand_n_}});
    SampleStepArgs argmax;
    argmax.top_k = 0;  // the kernel's argmax, not its chain
    const std::vector<KernelArg> step = argmax.kernel_args();
    args.insert(args.end(), step.begin(), step.end());
  }
  const KernelArgs bound(args);
  bound.bind(kernel_);
  if (!cpu_) {
    arg_history_ = bound.index("history");
    sample_slots_ = SampleArgSlots(bound);
  }
  history_bound_ = nullptr;
  kernel_samples_ = false;
  arg_token_index_ = bound.index("token_index");
  arg_pos_ = bound.index("pos");
  arg_bar_base_ = bound.index("bar_base");
  arg_trace_ = bound.index("trace");
  trace_arg_ = false;
}

// All work-groups must be resident at once, or the barrier never opens: run
// the barrier alone a few hundred times and check what crossed it. On
// NVIDIA the decode kernel itself runs the test (token_index < 0), so that
// its own registers and local memory decide residency; the CPU kernel's
// resources do not depend on the work-group count.
bool PersistentDecode::barrier_self_test() {
  const cl_int rounds = 300;
  const cl_uint zero = 0;
  ClMem errors = cpu_ ? rt_.alloc(4, true) : ClMem();
  const ClMem& error_count = cpu_ ? errors : s_.ids;  // NVIDIA: ids[0]
  cl_check(clEnqueueFillBuffer(rt_.queue(), error_count.get(), &zero, 4, 0, 4, 0, nullptr, nullptr),
           "clEnqueueFillBuffer");
  ClKernel cpu_test;
  cl_kernel k = kernel_.get();
  if (cpu_) {
    cpu_test = rt_.create_kernel(program_, "grid_barrier_selftest");
    bind_args(cpu_test, {{"counter", bar_},
                         {"bar_base", cl_uint(bar_base_)},
                         {"rounds", rounds},
                         {"data", part_idx_},
                         {"errors", errors},
                         {"abort_flag", abort_},
                         {"spin_ticks", spin_ticks()}});
    k = cpu_test.get();
  } else {
    set_arg(k, arg_token_index_, cl_int(-rounds));
    set_arg(k, arg_bar_base_, cl_uint(bar_base_));
  }
  barrier_us_ = run_barrier_test(k, rounds);
  cl_uint n_errors = 0, aborted = 0;
  cl_check(clEnqueueReadBuffer(rt_.queue(), error_count.get(), CL_TRUE, 0, 4, &n_errors, 0, nullptr,
                               nullptr),
           "clEnqueueReadBuffer");
  cl_check(
      clEnqueueReadBuffer(rt_.queue(), abort_.get(), CL_TRUE, 0, 4, &aborted, 0, nullptr, nullptr),
      "clEnqueueReadBuffer");
  if (n_errors != 0 || aborted != 0) {
    spdlog::info(
        "persistent decode kernel: grid barrier self-test with {} work-groups failed ({} "
        "errors{})",
        n_groups_, n_errors, aborted ? ", timed out" : "");
    return false;
  }
  return true;
}

// Runs the self-test kernel `k` (its arguments set) over n_groups_
// work-groups; returns the time per barrier in microseconds.
double PersistentDecode::run_barrier_test(cl_kernel k, int rounds) {
  const size_t local = local_size_, global = n_groups_ * local;
  rt_.finish();
  const auto t0 = std::chrono::steady_clock::now();
  cl_check(clEnqueueNDRangeKernel(rt_.queue(), k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(barrier self-test)");
  rt_.finish();
  bar_base_ += uint32_t(rounds) * uint32_t(n_groups_);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         rounds;
}

// Clears the barrier's count, the abort flag and the claim and split
// counters (no launch of the kernel may be in flight).
void PersistentDecode::reset_barrier() {
  const cl_uint zero = 0;
  auto clear = [&](const ClMem& m, size_t bytes) {
    cl_check(clEnqueueFillBuffer(rt_.queue(), m.get(), &zero, 4, 0, bytes, 0, nullptr, nullptr),
             "clEnqueueFillBuffer");
  };
  clear(bar_, 4);
  bar_base_ = 0;
  clear(abort_, 4);
  if (work_) clear(work_, 4);
  clear(att_count_, size_t(config_.n_head) * 4);  // an aborted token may leave splits uncounted
  if (cand_n_) clear(cand_n_, 4);                 // or a sampling list
}

void PersistentDecode::set_sample_args(const SampleStepArgs* a, const ClMem* history) {
  const cl_kernel k = kernel_.get();
  if (!a) {
    if (kernel_samples_) sample_slots_.set_top_k(k, 0);  // top_k 0: the argmax
    kernel_samples_ = false;
    return;
  }
  if (!history) throw std::logic_error("PersistentDecode: sampling without a history buffer");
  if (history->get() != history_bound_) {
    set_arg(k, arg_history_, *history);
    history_bound_ = history->get();
  }
  sample_slots_.set(k, *a);
  kernel_samples_ = true;
}

void PersistentDecode::sample_logits(const SampleStepArgs& a, const ClMem& history, int pos) {
  if (cpu_) throw std::logic_error("PersistentDecode: the CPU kernel does not sample");
  if (pos < 0) throw std::out_of_range("PersistentDecode: negative position");
  set_sample_args(&a, &history);
  set_trace_arg(false);
  launch(0, -1 - pos, 2);  // a grid barrier and the last one's arrival
}

void PersistentDecode::set_trace_arg(bool trace) {
  if (trace == trace_arg_) return;
  if (trace) {
    set_arg(kernel_.get(), arg_trace_, trace_);
  } else {
    set_arg(kernel_.get(), arg_trace_, ClMem());
  }
  trace_arg_ = trace;
}

void PersistentDecode::launch(int token_index, int pos_arg, uint32_t barriers, cl_event* launched) {
  set_arg(kernel_.get(), arg_token_index_, cl_int(token_index));
  set_arg(kernel_.get(), arg_pos_, cl_int(pos_arg));
  set_arg(kernel_.get(), arg_bar_base_, cl_uint(bar_base_));
  const size_t local = local_size_, global = n_groups_ * local;
  cl_check(clEnqueueNDRangeKernel(rt_.queue(), kernel_.get(), 1, nullptr, &global, &local, 0,
                                  nullptr, launched),
           "clEnqueueNDRangeKernel(decode_token)");
  bar_base_ += barriers * uint32_t(n_groups_);
}

void PersistentDecode::enqueue(int token_index, int pos, bool traced, const SampleStepArgs* sample,
                               const ClMem* history) {
  enqueue_step(token_index, pos, traced, sample, history, nullptr);
}

void PersistentDecode::enqueue_step(int token_index, int pos, bool traced,
                                    const SampleStepArgs* sample, const ClMem* history,
                                    cl_event* launched) {
  if (sample && cpu_) throw std::logic_error("PersistentDecode: the CPU kernel does not sample");
  if (!cpu_) set_sample_args(sample, history);
  const bool trace = traced || tuning_.trace;
  set_trace_arg(trace);
  if (++n_enqueued_ == fault::active().barrier_timeout) {  // test hook: a barrier gave up
    const cl_uint one = 1;
    cl_check(clEnqueueFillBuffer(rt_.queue(), abort_.get(), &one, 4, 0, 4, 0, nullptr, nullptr),
             "clEnqueueFillBuffer");
  }
  // A sampled token passes one more grid barrier (decode_persistent.cl).
  launch(token_index, pos, barriers_per_token_ + (sample ? 1 : 0), launched);
  if (sample) ++n_sampled_;
  if (trace) read_trace(traced);
}

// The device clock after each barrier (work-group 0): t[0] at the start,
// then the lead barriers (the CPU kernel's embedding; with it the wait for
// the last work-group to start, i.e. for PoCL to wake its other workers:
// the "start" entry, outside the layers), then stage k of layer il ends at
// t[lead + 5 * il + k + 1]; the head at the last entry.
void PersistentDecode::read_trace(bool to_profile) {
  std::vector<cl_ulong> t(barriers_per_token_ + 1);
  cl_check(clEnqueueReadBuffer(rt_.queue(), trace_.get(), CL_TRUE, 0, t.size() * 8, t.data(), 0,
                               nullptr, nullptr),
           "clEnqueueReadBuffer(trace)");
  ProfileReport p;
  p.layer_us.assign(size_t(config_.n_layer), 0.0);
  p.n_launches = 1;
  for (size_t k = 1; k < t.size(); ++k) {
    const double us = double(t[k] - t[k - 1]) / trace_ticks_per_us_;
    p.total_us += us;
    if (k <= lead_barriers_) {
      p.kernel_us[k_start_name] += us;
      if (tuning_.trace) trace_start_us_ += us;
      continue;
    }
    const bool head = k == t.size() - 1;
    const size_t in_layers = k - 1 - lead_barriers_;
    const size_t stage = head ? k_stages : in_layers % k_stages;
    if (tuning_.trace) trace_sum_us_[stage] += us;
    p.kernel_us[k_stage_names[stage]] += us;
    if (!head) p.layer_us[in_layers / k_stages] += us;
  }
  if (tuning_.trace) ++trace_tokens_;
  if (to_profile) profile_ = std::move(p);
}

// The CPU barrier's timeout, 0.1 s, in TSC ticks.
cl_ulong PersistentDecode::spin_ticks() const { return cl_ulong(trace_ticks_per_us_ * 1e5); }

bool PersistentDecode::rearm() {
  if (!ahead_.empty()) throw std::logic_error("rearm: tokens in flight");
  ++n_timeouts_;
  if (n_timeouts_ >= k_max_timeouts) return false;
  // Every work-group has left the aborted launch (the host read its id
  // after it finished).
  reset_barrier();
  return true;
}

void PersistentDecode::enqueue_ahead(int pos, const std::function<void(int pos)>& after_launch,
                                     const std::function<SampleStepArgs(int pos)>& in_kernel,
                                     const ClMem* history) {
  if (ahead_.size() >= k_slots) throw std::logic_error("too many tokens in flight");
  if (!ahead_ids_) {
    ahead_buf_ = rt_.alloc(k_slots * 4, true);
    cl_int err = CL_SUCCESS;
    void* p = clEnqueueMapBuffer(rt_.queue(), ahead_buf_.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                 0, k_slots * 4, 0, nullptr, nullptr, &err);
    cl_check(err, "clEnqueueMapBuffer(token slots)");
    ahead_ids_ = static_cast<int32_t*>(p);
    if (!cpu_) {
      read_queue_ = ClQueue(clCreateCommandQueue(rt_.context(), rt_.device().device, 0, &err));
      cl_check(err, "clCreateCommandQueue(token reads)");
    }
  }
  // The id's copy is the kernel's (NVIDIA) and the last thing the token
  // writes (no sampling chain after the launch).
  const bool own_queue = read_queue_ && !after_launch;
  cl_event launched = nullptr;
  const SampleStepArgs a = in_kernel ? in_kernel(pos) : SampleStepArgs{};
  enqueue_step(0, pos, false, in_kernel ? &a : nullptr, in_kernel ? history : nullptr,
               own_queue ? &launched : nullptr);
  const ClEvent launch_event(launched);
  if (after_launch) after_launch(pos);
  const size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % k_slots;
  ahead_.push_back({pos, slot, ClEvent(enqueue_id_read(pos, slot, launch_event.get()))});
  // NVIDIA's OpenCL may hold commands back until a flush.
  cl_check(clFlush(rt_.queue()), "clFlush");
  if (own_queue) cl_check(clFlush(read_queue_.get()), "clFlush(token reads)");
}

cl_event PersistentDecode::enqueue_id_read(int pos, size_t slot, cl_event launch_event) {
  // A launch at pos + k_id_ring is enqueued only after the read at pos was
  // taken: at most k_slots tokens are in flight, at consecutive positions.
  static_assert(size_t(DecodeState::k_id_ring) >= k_slots);
  const bool own = launch_event != nullptr;
  const size_t at = own ? (size_t(s_.n_ctx) + size_t(pos % DecodeState::k_id_ring)) * 4 : 0;
  cl_event ev = nullptr;
  cl_check(clEnqueueReadBuffer(own ? read_queue_.get() : rt_.queue(), s_.ids.get(), CL_FALSE, at, 4,
                               &ahead_ids_[slot], own ? 1 : 0, own ? &launch_event : nullptr, &ev),
           "clEnqueueReadBuffer(token)");
  return ev;
}

int32_t PersistentDecode::take(int pos) {
  if (!ahead_at(pos)) throw std::logic_error("take: no token in flight at this position");
  const cl_event ev = ahead_.front().read.get();
  cl_check(clWaitForEvents(1, &ev), "clWaitForEvents(token)");
  const int32_t id = ahead_ids_[ahead_.front().slot];
  ahead_.pop_front();
  return id;
}

void PersistentDecode::drop_ahead() {
  if (ahead_.empty()) return;
  // Forgotten even if a wait fails (the error still reaches the caller).
  const std::deque<Ahead> pending = std::exchange(ahead_, {});
  // The reads write into ahead_ids_: they must land before a slot is reused.
  for (const Ahead& a : pending) {
    const cl_event ev = a.read.get();
    cl_check(clWaitForEvents(1, &ev), "clWaitForEvents(token)");
  }
}

PersistentDecode::~PersistentDecode() {
  try {
    drop_ahead();
    if (ahead_ids_) {
      cl_check(
          clEnqueueUnmapMemObject(rt_.queue(), ahead_buf_.get(), ahead_ids_, 0, nullptr, nullptr),
          "clEnqueueUnmapMemObject(token slots)");
      rt_.finish();
    }
  } catch (const std::exception& e) {
    spdlog::warn("persistent decode: {}", e.what());
  }
  if (trace_tokens_ > 0) log_trace_sums();
}

// DecodeTuning::trace: the per-stage times per token, averaged.
void PersistentDecode::log_trace_sums() const {
  std::string line = lead_barriers_ > 0
                         ? std::string(" ") + k_start_name + " " +
                               std::to_string(trace_start_us_ / trace_tokens_) + " us;"
                         : std::string();
  double total = trace_start_us_ / trace_tokens_;
  for (size_t i = 0; i < trace_sum_us_.size(); ++i) {
    const double us = trace_sum_us_[i] / trace_tokens_;
    total += us;
    line += std::string(" ") + k_stage_names[i] + " " + std::to_string(us) + " us;";
  }
  spdlog::warn(
      "persistent trace over {} tokens (per token):{} total {:.1f} us; bare barrier {:.2f} us",
      trace_tokens_, line, total, barrier_us_);
}

}  // namespace clchat
