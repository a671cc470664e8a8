// Host side of the persistent decode kernels: eligibility, the weight arena,
// the barrier self-test and the per-token launch.
#include "engine/cl/persistent_decode.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/cl/fault_injection.h"
#include "engine/cl/forward.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace clchat {

namespace {

constexpr size_t k_layer_offsets = 12;  // LO_N in persistent_layout.cl
// Stages per layer, each ended by a grid barrier (P1..P5 in
// decode_persistent.cl and decode_persistent_cpu.cl), and the names the
// trace and the profile give them; the last name is the head's stage.
constexpr size_t k_stages = 5;
constexpr size_t k_att_split_max = 16;  // ATT_SPLIT_MAX in both persistent kernels
constexpr const char* k_stage_names[k_stages + 1] = {"qkv",     "attention", "wo",
                                                     "gate_up", "down",      "head"};
constexpr const char* k_start_name = "start";  // the CPU kernel's lead stage
constexpr size_t k_arena_align = 256;

size_t mem_size(const ClMem& m) {
  size_t n = 0;
  cl_check(clGetMemObjectInfo(m.get(), CL_MEM_SIZE, sizeof(n), &n, nullptr), "clGetMemObjectInfo");
  return n;
}

bool is_block_type(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16; }

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

std::unique_ptr<PersistentDecode> PersistentDecode::create(ClForward& f) {
  const ModelConfig& c = f.config_;
  const DeviceInfo& dev = f.rt_.device();
  const DecodeTuning& tuning = f.tuning_.decode;
  auto no = [](const std::string& why) {
    spdlog::info("persistent decode kernel not used: {}", why);
    return nullptr;
  };
  if (!tuning.persistent) return no("turned off (engine.persistent_decode, --no-persistent)");
  const bool cpu = dev.is_cpu;
  if (cpu) {
#if !defined(__x86_64__)
    return no("the CPU kernel needs an x86-64 host");
#endif
    if (!f.programs_.tuning().cpu_kernels) return no("CPU kernels off (cpu_kernels=0)");
    if (c.head_dim % 4 != 0) return no("head size not a multiple of 4");
  } else {
    if (dev.platform_name.find("NVIDIA") == std::string::npos) return no("not NVIDIA's OpenCL");
    if (!f.programs_.tuning().nv_shfl) return no("warp shuffles unavailable");
    if (c.head_dim < 32 || c.head_dim > 256 || (c.head_dim & (c.head_dim - 1)) != 0) {
      return no("head size not a power of two from 32 to 256");
    }
  }
  if (c.n_head % c.n_head_kv != 0) return no("query heads not a multiple of KV heads");
  if (c.n_rot % 2 != 0) return no("odd rotary dimension count");
  const auto& l0 = f.layers_.front();
  for (const auto& l : f.layers_) {
    if (l.qkv.size() != 1 || l.qkv[0].type != l0.qkv[0].type || l.wo.type != l0.wo.type ||
        l.ffn_gate.type != l0.ffn_gate.type || l.ffn_up.type != l0.ffn_gate.type ||
        l.ffn_down.type != l0.ffn_down.type) {
      return no("layers differ in weight types");
    }
  }
  const bool blocks = is_block_type(l0.qkv[0].type) || is_block_type(l0.wo.type) ||
                      is_block_type(l0.ffn_gate.type) || is_block_type(l0.ffn_down.type);
  if ((!cpu || blocks) && (c.n_embd % 32 != 0 || c.n_ff % 32 != 0)) {
    return no("row lengths not multiples of 32");
  }
  // Shapes to try, in order, until the self-test passes: work-items per
  // work-group and work-group counts. CPU: one work-group of 2 per core
  // (PoCL runs one per worker thread; more cannot all be resident). NVIDIA:
  // one work-group of 512 per SM, else two of 256 per SM, else one (the
  // kernel's registers decide; DecodeTuning::persist_wg_size keeps one
  // size). persist_wgs_per_cu sets work-groups per compute unit,
  // persist_groups their total.
  const size_t cus = dev.compute_units;
  std::vector<Shape> shapes;
  if (cpu) {
    shapes = {{2, {cus}}};
  } else {
    const int pwg = tuning.persist_wg_size;
    if (pwg != 256) shapes.push_back({512, {cus}});
    if (pwg != 512) shapes.push_back({256, {2 * cus, cus}});
    // decode_persistent.cl's local memory: xl (padded), att_acc (a row of
    // AW_STRIDE floats per warp), small arrays.
    std::erase_if(shapes, [&](const Shape& s) {
      const size_t parts = s.local / size_t(c.head_dim);
      const size_t stride = size_t(c.head_dim) + (parts > 1 ? 32 / parts : 0);
      const size_t local_bytes =
          size_t(std::max(c.n_embd, c.n_ff)) / 32 * 36 * 4 + s.local / 32 * stride * 4 + 512;
      return local_bytes > dev.local_mem_bytes;
    });
    if (shapes.empty()) return no("activations do not fit local memory");
  }
  for (Shape& s : shapes) {
    if (tuning.persist_wgs_per_cu > 0) s.groups = {cus * size_t(tuning.persist_wgs_per_cu)};
    if (tuning.persist_groups > 0) s.groups = {size_t(tuning.persist_groups)};
  }

  std::unique_ptr<PersistentDecode> p(new PersistentDecode(f));
  p->cpu_ = cpu;
  try {
    if (!p->build(shapes)) return nullptr;
  } catch (const std::exception& e) {
    return no(e.what());
  }
  spdlog::info("persistent decode kernel{}: {} work-groups of {}, {} barriers per token",
               cpu ? " (CPU)" : "", p->n_groups_, p->local_size_, p->barriers_per_token_);
  return p;
}

bool PersistentDecode::build(const std::vector<Shape>& shapes) {
  const ModelConfig& c = f_.config_;
  const ClRuntime& rt = f_.rt_;
  const DeviceMatrix& head = c.tied_embeddings ? f_.token_embd_ : f_.output_;

  // The arena: every weight buffer copied once, at 256-byte aligned offsets.
  std::vector<std::pair<const ClMem*, uint64_t>> parts;
  uint64_t total = 0;
  auto place = [&](const ClMem& m) {
    const uint64_t off = total;
    parts.emplace_back(&m, off);
    total += (mem_size(m) + k_arena_align - 1) / k_arena_align * k_arena_align;
    return off;
  };
  std::vector<uint64_t> layer_off;
  for (const auto& l : f_.layers_) {
    for (const DeviceMatrix* m : {&l.qkv[0], &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      layer_off.push_back(place(m->q));
      layer_off.push_back(place(m->s));
    }
    layer_off.push_back(place(l.attn_norm.q));
    layer_off.push_back(place(l.ffn_norm.q));
  }
  embd_q_ = place(f_.token_embd_.q);
  embd_s_ = place(f_.token_embd_.s);
  head_q_ = c.tied_embeddings ? embd_q_ : place(head.q);
  head_s_ = c.tied_embeddings ? embd_s_ : place(head.s);
  out_norm_ = place(f_.output_norm_.q);
  if (total > rt.device().max_alloc_bytes) {
    spdlog::info(
        "persistent decode kernel not used: weight arena of {} bytes exceeds one allocation",
        total);
    return false;
  }
  arena_ = rt.alloc(total);
  for (const auto& [m, off] : parts) {
    cl_check(clEnqueueCopyBuffer(rt.queue(), m->get(), arena_.get(), 0, off, mem_size(*m), 0,
                                 nullptr, nullptr),
             "clEnqueueCopyBuffer(arena)");
  }
  static_assert(sizeof(cl_ulong) == sizeof(uint64_t));
  layer_off_ = rt.upload(layer_off.data(), layer_off.size() * sizeof(uint64_t));
  if (layer_off.size() != f_.layers_.size() * k_layer_offsets) throw std::logic_error("layer_off");

  n_groups_ = 0;  // the most work-groups any shape tries, for the sizes
  for (const Shape& s : shapes) {
    n_groups_ = std::max(n_groups_, *std::max_element(s.groups.begin(), s.groups.end()));
  }
  lead_barriers_ = cpu_ ? 1 : 0;
  barriers_per_token_ = uint32_t(k_stages * size_t(c.n_layer) + 1 + lead_barriers_);
  char eps[64];
  std::snprintf(eps, sizeof(eps), "%.9ef", double(c.rms_eps));
  std::string defines =
      " -DN_EMBD=" + std::to_string(c.n_embd) + " -DN_FF=" + std::to_string(c.n_ff) +
      " -DN_HEAD=" + std::to_string(c.n_head) + " -DN_HEAD_KV=" + std::to_string(c.n_head_kv) +
      " -DHEAD_DIM=" + std::to_string(c.head_dim) + " -DN_ROT=" + std::to_string(c.n_rot) +
      " -DN_LAYER=" + std::to_string(c.n_layer) + " -DN_VOCAB=" + std::to_string(c.n_vocab) +
      " -DN_CTX=" + std::to_string(f_.n_ctx_) + " -DRMS_EPS=" + eps;
  const auto& l0 = f_.layers_.front();
  auto wt = [](GgmlType t) { return std::to_string(int(t)); };
  defines += " -DWT_QKV=" + wt(l0.qkv[0].type) + " -DWT_WO=" + wt(l0.wo.type) +
             " -DWT_FFN=" + wt(l0.ffn_gate.type) + " -DWT_DOWN=" + wt(l0.ffn_down.type) +
             " -DWT_HEAD=" + wt(head.type) + " -DWT_EMBD=" + wt(f_.token_embd_.type);
  const KernelTuning& tuning = f_.programs_.tuning();
  std::string source;
  auto add = [&source](const char* stem) {
    source += kernel_source(stem);
    source += '\n';
  };
  defines += " -DATT_SPLIT_MAX=" + std::to_string(k_att_split_max);
  const DecodeTuning& decode = f_.tuning_.decode;
  // Positions per attention split (the kernels' defaults are 128 on NVIDIA,
  // 64 on CPU devices).
  if (decode.att_split_pos > 0)
    defines += " -DATT_SPLIT_POS=" + std::to_string(decode.att_split_pos);
  // A/B runs of kernel variants in one build (clchat bench --tune
  // persist_defines=...), logged.
  if (!decode.persist_defines.empty()) {
    spdlog::info("persistent decode kernel: persist_defines {}", decode.persist_defines);
    defines += " " + decode.persist_defines;
  }
  bar_ = rt.alloc(4);
  abort_ = rt.alloc(4);
  part_val_ = rt.alloc(n_groups_ * 4);
  part_idx_ = rt.alloc(2 * n_groups_ * 4);  // NVIDIA self-test: two words per group
  // Attention split partials (the CPU kernel uses them when the head size is
  // a multiple of 8).
  att_part_ = rt.alloc(size_t(c.n_head) * k_att_split_max * size_t(c.head_dim + 2) * 4);
  att_count_ = rt.alloc(size_t(c.n_head) * 4);
  if (cpu_) {
    xn_ = rt.alloc(n_groups_ * (size_t(c.n_embd + 31) / 32 * 32) * 4);  // XN_STRIDE per group
    work_ = rt.alloc(4);
  }
  add("persistent_layout");
  if (cpu_) {
    trace_ticks_per_us_ = tsc_ticks_per_us();
    defines +=
        " -DNR=" + std::to_string(tuning.cpu_nr) + (tuning.cpu_portable ? " -DCPU_PORTABLE=1" : "");
    add("cpu_dot");
    add("attention_cpu");
    add("decode_persistent_cpu");
  } else {
    add("decode_persistent");
  }
  trace_ = rt.alloc((barriers_per_token_ + 1) * 8, true);
  trace_all_ = decode.trace;
  trace_sum_us_.assign(k_stages + 1, 0.0);
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
// arguments set (the buffers exist).
void PersistentDecode::build_kernel(const std::string& source, const std::string& defines) {
  const ClRuntime& rt = f_.rt_;
  const KernelTuning& tuning = f_.programs_.tuning();
  program_ = rt.build_program(
      cpu_ ? "decode_persistent_cpu" : "decode_persistent", source,
      tuning.build_options + defines + (cpu_ ? "" : " -DPWG=" + std::to_string(local_size_)));
  reset_barrier();
  kernel_ = rt.create_kernel(program_, "decode_token");
  set_args(kernel_, arena_, layer_off_, cl_ulong(embd_q_), cl_ulong(embd_s_), cl_ulong(head_q_),
           cl_ulong(head_s_), cl_ulong(out_norm_), f_.rope_cs_, f_.k_cache_, f_.v_cache_, f_.x_,
           f_.q_, f_.att_out_, f_.h_, f_.logits_, part_val_, part_idx_, f_.ids_, cl_int(0),
           cl_int(0), bar_, cl_uint(0), abort_, ClMem());
  if (cpu_) {
    set_arg(kernel_.get(), 24, work_);
    set_arg(kernel_.get(), 25, f_.scores_);
    set_arg(kernel_.get(), 26, xn_);
    set_arg(kernel_.get(), 27, spin_ticks());
    set_arg(kernel_.get(), 28, att_part_);
    set_arg(kernel_.get(), 29, att_count_);
  } else {
    set_arg(kernel_.get(), 24, att_part_);
    set_arg(kernel_.get(), 25, att_count_);
  }
  trace_arg_ = false;
}

// All work-groups must be resident at once, or the barrier never opens: run
// the barrier alone a few hundred times and check what crossed it. On
// NVIDIA the decode kernel itself runs the test (token_index < 0), so that
// its own registers and local memory decide residency; the CPU kernel's
// resources do not depend on the work-group count.
bool PersistentDecode::barrier_self_test() {
  const ClRuntime& rt = f_.rt_;
  const cl_int rounds = 300;
  const cl_uint zero = 0;
  ClMem errors = cpu_ ? rt.alloc(4, true) : ClMem();
  const ClMem& error_count = cpu_ ? errors : f_.ids_;  // NVIDIA: ids[0]
  cl_check(clEnqueueFillBuffer(rt.queue(), error_count.get(), &zero, 4, 0, 4, 0, nullptr, nullptr),
           "clEnqueueFillBuffer");
  ClKernel cpu_test;
  cl_kernel k = kernel_.get();
  if (cpu_) {
    cpu_test = rt.create_kernel(program_, "grid_barrier_selftest");
    set_args(cpu_test, bar_, cl_uint(bar_base_), rounds, part_idx_, errors, abort_);
    set_arg(cpu_test.get(), 6, spin_ticks());
    k = cpu_test.get();
  } else {
    set_arg(k, 18, cl_int(-rounds));
    set_arg(k, 21, cl_uint(bar_base_));
  }
  const size_t local = local_size_, global = n_groups_ * local;
  rt.finish();
  const auto t0 = std::chrono::steady_clock::now();
  cl_check(clEnqueueNDRangeKernel(rt.queue(), k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(barrier self-test)");
  rt.finish();
  barrier_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      rounds;
  bar_base_ += uint32_t(rounds) * uint32_t(n_groups_);
  cl_uint n_errors = 0, aborted = 0;
  cl_check(clEnqueueReadBuffer(rt.queue(), error_count.get(), CL_TRUE, 0, 4, &n_errors, 0, nullptr,
                               nullptr),
           "clEnqueueReadBuffer");
  cl_check(
      clEnqueueReadBuffer(rt.queue(), abort_.get(), CL_TRUE, 0, 4, &aborted, 0, nullptr, nullptr),
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

// Clears the barrier's count, the abort flag and the claim and split
// counters (no launch of the kernel may be in flight).
void PersistentDecode::reset_barrier() {
  const cl_uint zero = 0;
  auto clear = [&](const ClMem& m, size_t bytes) {
    cl_check(clEnqueueFillBuffer(f_.rt_.queue(), m.get(), &zero, 4, 0, bytes, 0, nullptr, nullptr),
             "clEnqueueFillBuffer");
  };
  clear(bar_, 4);
  bar_base_ = 0;
  clear(abort_, 4);
  if (work_) clear(work_, 4);
  clear(att_count_, size_t(f_.config_.n_head) * 4);  // an aborted token may leave splits uncounted
}

void PersistentDecode::enqueue(int token_index, int pos, bool traced) {
  const bool trace = traced || trace_all_;
  if (trace != trace_arg_) {
    if (trace) {
      set_arg(kernel_.get(), 23, trace_);
    } else {
      set_arg(kernel_.get(), 23, ClMem());
    }
    trace_arg_ = trace;
  }
  set_arg(kernel_.get(), 18, cl_int(token_index));
  set_arg(kernel_.get(), 19, cl_int(pos));
  set_arg(kernel_.get(), 21, cl_uint(bar_base_));
  if (++n_enqueued_ == fault::active().barrier_timeout) {  // test hook: a barrier gave up
    const cl_uint one = 1;
    cl_check(clEnqueueFillBuffer(f_.rt_.queue(), abort_.get(), &one, 4, 0, 4, 0, nullptr, nullptr),
             "clEnqueueFillBuffer");
  }
  const size_t local = local_size_, global = n_groups_ * local;
  cl_check(clEnqueueNDRangeKernel(f_.rt_.queue(), kernel_.get(), 1, nullptr, &global, &local, 0,
                                  nullptr, nullptr),
           "clEnqueueNDRangeKernel(decode_token)");
  bar_base_ += barriers_per_token_ * uint32_t(n_groups_);
  if (trace) read_trace(traced);
}

// The device clock after each barrier (work-group 0): t[0] at the start,
// then the lead barriers (the CPU kernel's embedding; with it the wait for
// the last work-group to start, i.e. for PoCL to wake its other workers:
// the "start" entry, outside the layers), then stage k of layer il ends at
// t[lead + 5 * il + k + 1]; the head at the last entry.
void PersistentDecode::read_trace(bool to_profile) {
  std::vector<cl_ulong> t(barriers_per_token_ + 1);
  cl_check(clEnqueueReadBuffer(f_.rt_.queue(), trace_.get(), CL_TRUE, 0, t.size() * 8, t.data(), 0,
                               nullptr, nullptr),
           "clEnqueueReadBuffer(trace)");
  ProfileReport p;
  p.layer_us.assign(f_.layers_.size(), 0.0);
  p.n_launches = 1;
  for (size_t k = 1; k < t.size(); ++k) {
    const double us = double(t[k] - t[k - 1]) / trace_ticks_per_us_;
    p.total_us += us;
    if (k <= lead_barriers_) {
      p.kernel_us[k_start_name] += us;
      if (trace_all_) trace_start_us_ += us;
      continue;
    }
    const bool head = k == t.size() - 1;
    const size_t in_layers = k - 1 - lead_barriers_;
    const size_t stage = head ? k_stages : in_layers % k_stages;
    if (trace_all_) trace_sum_us_[stage] += us;
    p.kernel_us[k_stage_names[stage]] += us;
    if (!head) p.layer_us[in_layers / k_stages] += us;
  }
  if (trace_all_) ++trace_tokens_;
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

void PersistentDecode::enqueue_ahead(int pos) {
  if (ahead_.size() >= k_slots) throw std::logic_error("too many tokens in flight");
  if (!ahead_ids_) {
    ahead_buf_ = f_.rt_.alloc(k_slots * 4, true);
    cl_int err = CL_SUCCESS;
    void* p =
        clEnqueueMapBuffer(f_.rt_.queue(), ahead_buf_.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                           k_slots * 4, 0, nullptr, nullptr, &err);
    cl_check(err, "clEnqueueMapBuffer(token slots)");
    ahead_ids_ = static_cast<int32_t*>(p);
  }
  enqueue(0, pos);
  const size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % k_slots;
  cl_event ev = nullptr;
  cl_check(clEnqueueReadBuffer(f_.rt_.queue(), f_.ids_.get(), CL_FALSE, 0, 4, &ahead_ids_[slot], 0,
                               nullptr, &ev),
           "clEnqueueReadBuffer(token)");
  ahead_.push_back({pos, slot, ClEvent(ev)});
  // NVIDIA's OpenCL may hold commands back until a flush.
  cl_check(clFlush(f_.rt_.queue()), "clFlush");
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
      cl_check(clEnqueueUnmapMemObject(f_.rt_.queue(), ahead_buf_.get(), ahead_ids_, 0, nullptr,
                                       nullptr),
               "clEnqueueUnmapMemObject(token slots)");
      f_.rt_.finish();
    }
  } catch (const std::exception& e) {
    spdlog::warn("persistent decode: {}", e.what());
  }
  if (trace_tokens_ == 0) return;
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
