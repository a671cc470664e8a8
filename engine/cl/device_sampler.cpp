// DeviceSampler: validate, fetch the kernel, allocate the candidates'
// scratch, bind the arguments by name once; per step set the parameters and
// enqueue the one launch (sample_chain: a group per chunk of the vocabulary,
// the last one to finish merging their candidates).
#include "engine/cl/device_sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "engine/chat/sampler.h"

namespace clchat {

namespace {

// Vocabulary ids a group selects from, at least: small enough that a GPU
// has a group per SM or so for the largest vocabularies (262,144 / 4,096 =
// 64 groups), large enough that the final merge stays short.
constexpr int k_min_chunk = 4096;
constexpr int k_max_groups = 64;

// The names of the chain's parameters in both kernels' signatures (sample.cl's
// sample_chain, decode_persistent.cl's decode_token), in their order.
constexpr std::array<const char*, 10> k_step_arg_names = {"n_recent",
                                                          "repeat_penalty",
                                                          "frequency_penalty",
                                                          "presence_penalty",
                                                          "top_k",
                                                          "temperature",
                                                          "top_p",
                                                          "min_p",
                                                          "seed",
                                                          "draw"};
constexpr size_t k_top_k_arg = 4;

}  // namespace

std::unique_ptr<DeviceSampler> DeviceSampler::create(const ClRuntime& rt, ClPrograms& programs,
                                                     int n_vocab, int n_ctx, const ClMem& logits,
                                                     const ClMem& ids) {
  if (!rt.device().has_extension("cl_khr_fp64")) {
    spdlog::info("{} has no cl_khr_fp64: sampling runs on the host", rt.device().name);
    return nullptr;
  }
  try {
    return std::unique_ptr<DeviceSampler>(
        new DeviceSampler(rt, programs, n_vocab, n_ctx, logits, ids));
  } catch (const KernelArgError&) {
    throw;  // a bug in clchat, not the device
  } catch (const ClError& e) {
    if (is_out_of_memory(e.code())) throw;
    spdlog::warn("sampling on the device unavailable ({}); sampling runs on the host", e.what());
    return nullptr;
  }
}

DeviceSampler::DeviceSampler(const ClRuntime& rt, ClPrograms& programs, int n_vocab, int n_ctx,
                             const ClMem& logits, const ClMem& ids)
    : rt_(rt), n_vocab_(n_vocab), n_ctx_(n_ctx), known_(size_t(n_ctx) + 1, -1) {
  if (n_vocab < 1 || n_ctx < 1) throw std::invalid_argument("DeviceSampler: empty vocabulary");
  wg_ = programs.tuning().sample_wg;
  const bool serial = wg_ == 1;  // CPU devices: a group per core
  const int max_groups = serial ? std::max(1, int(rt.device().compute_units)) : k_max_groups;
  n_groups_ = std::clamp((n_vocab + k_min_chunk - 1) / k_min_chunk, 1, max_groups);
  chunk_ = (n_vocab + n_groups_ - 1) / n_groups_;
  const int k_max = k_device_top_k_max;
  history_ = rt.alloc((size_t(n_ctx) + 1) * 4);
  part_ = rt.alloc(size_t(n_groups_) * size_t(k_max) * 8);
  part_n_ = rt.alloc(size_t(n_groups_) * 4);
  done_ = rt.alloc(4);
  const cl_uint zero = 0;
  cl_check(clEnqueueWriteBuffer(rt.queue(), done_.get(), CL_TRUE, 0, 4, &zero, 0, nullptr, nullptr),
           "clEnqueueWriteBuffer(done)");
  kernel_ = programs.sample_kernel("sample_chain", k_max);
  // The kernel needs groups of wg_ (reqd_work_group_size); a device whose
  // compiled kernel takes fewer (registers) would fail every launch.
  size_t kernel_wg = 0;
  cl_check(clGetKernelWorkGroupInfo(kernel_.get(), rt.device().device, CL_KERNEL_WORK_GROUP_SIZE,
                                    sizeof kernel_wg, &kernel_wg, nullptr),
           "clGetKernelWorkGroupInfo(sample_chain)");
  if (kernel_wg < size_t(wg_)) {
    throw ClError("sample_chain takes work-groups of at most " + std::to_string(kernel_wg) +
                      ", not " + std::to_string(wg_),
                  CL_INVALID_WORK_GROUP_SIZE);
  }
  // Nor may it need more local memory than the device has. (Not an
  // out-of-memory code: create() falls back to the host for this.)
  cl_ulong kernel_local = 0;
  cl_check(clGetKernelWorkGroupInfo(kernel_.get(), rt.device().device, CL_KERNEL_LOCAL_MEM_SIZE,
                                    sizeof kernel_local, &kernel_local, nullptr),
           "clGetKernelWorkGroupInfo(sample_chain, local memory)");
  if (kernel_local > rt.device().local_mem_bytes) {
    throw ClError("sample_chain needs " + std::to_string(kernel_local) +
                      " bytes of local memory, the device has " +
                      std::to_string(rt.device().local_mem_bytes),
                  CL_INVALID_WORK_GROUP_SIZE);
  }
  std::vector<KernelArg> list = {{"logits", logits},
                                 {"n_vocab", cl_int(n_vocab)},
                                 {"chunk", cl_int(chunk_)},
                                 {"history", history_},
                                 {"pos", cl_int(0)}};
  const std::vector<KernelArg> step = SampleStepArgs{}.kernel_args();
  list.insert(list.end(), step.begin(), step.end());
  list.insert(list.end(), {{"part", part_},
                           {"part_n", part_n_},
                           {"done", done_},
                           {"done_base", cl_uint(0)},
                           {"ids", ids}});
  const KernelArgs args(std::move(list));
  args.bind(kernel_);
  arg_pos_ = args.index("pos");
  arg_done_base_ = args.index("done_base");
  step_slots_ = SampleArgSlots(args);
}

std::vector<KernelArg> SampleStepArgs::kernel_args() const {
  const auto& n = k_step_arg_names;
  return {{n[0], n_recent},
          {n[1], repeat_penalty},
          {n[2], frequency_penalty},
          {n[3], presence_penalty},
          {n[4], top_k},
          {n[5], temperature},
          {n[6], top_p},
          {n[7], min_p},
          {n[8], seed},
          {n[9], draw}};
}

SampleArgSlots::SampleArgSlots(const KernelArgs& bound) {
  for (size_t i = 0; i < index_.size(); ++i) index_[i] = bound.index(k_step_arg_names[i]);
}

void SampleArgSlots::set(cl_kernel k, const SampleStepArgs& a) const {
  set_arg(k, index_[0], a.n_recent);
  set_arg(k, index_[1], a.repeat_penalty);
  set_arg(k, index_[2], a.frequency_penalty);
  set_arg(k, index_[3], a.presence_penalty);
  set_arg(k, index_[4], a.top_k);
  set_arg(k, index_[5], a.temperature);
  set_arg(k, index_[6], a.top_p);
  set_arg(k, index_[7], a.min_p);
  set_arg(k, index_[8], a.seed);
  set_arg(k, index_[9], a.draw);
}

void SampleArgSlots::set_top_k(cl_kernel k, cl_int top_k) const {
  set_arg(k, index_[k_top_k_arg], top_k);
}

int DeviceSampler::n_recent(const SamplingParams& p, int pos) {
  if (!p.penalized()) return 0;  // nothing to look back for
  return std::min(p.repeat_last_n, pos + 1);
}

bool DeviceSampler::holds(std::span<const int32_t> recent, int pos, const SamplingParams& p) const {
  const int n = n_recent(p, pos);
  if (recent.size() < size_t(n)) return false;
  for (int i = 0; i < n; ++i) {
    if (known_[size_t(pos - i)] != recent[recent.size() - 1 - size_t(i)]) return false;
  }
  return true;
}

void DeviceSampler::sync(std::span<const int32_t> recent, int pos, const SamplingParams& p) {
  if (pos < 0 || pos >= n_ctx_)
    throw std::out_of_range("DeviceSampler: position outside the context");
  const int n = n_recent(p, pos);
  if (recent.size() < size_t(n)) {
    throw std::invalid_argument("DeviceSampler: fewer recent tokens than the penalty window");
  }
  // The differing span of the window, positions [lo, hi].
  int lo = -1, hi = -1;
  for (int q = pos + 1 - n; q <= pos; ++q) {
    if (known_[size_t(q)] != recent[recent.size() - 1 - size_t(pos - q)]) {
      if (lo < 0) lo = q;
      hi = q;
    }
  }
  if (lo < 0) return;
  const int32_t* src = &recent[recent.size() - 1 - size_t(pos - lo)];
  const size_t count = size_t(hi - lo + 1);
  cl_check(clEnqueueWriteBuffer(rt_.queue(), history_.get(), CL_TRUE, size_t(lo) * 4, count * 4,
                                src, 0, nullptr, nullptr),
           "clEnqueueWriteBuffer(history)");
  std::copy(src, src + count, known_.begin() + lo);
}

SampleStepArgs DeviceSampler::step_args(const SamplingParams& p, uint64_t draw, int pos) {
  if (pos < 0 || pos >= n_ctx_)
    throw std::out_of_range("DeviceSampler: position outside the context");
  if (!device_samplable(p)) throw std::logic_error("DeviceSampler: parameters for the host");
  SampleStepArgs a;
  a.n_recent = n_recent(p, pos);
  a.top_k = p.greedy() ? 1 : p.top_k;
  a.repeat_penalty = p.repeat_penalty;
  a.frequency_penalty = p.frequency_penalty;
  a.presence_penalty = p.presence_penalty;
  a.temperature = p.temperature;
  a.top_p = p.top_p;
  a.min_p = p.min_p;
  a.seed = p.seed;
  a.draw = draw;
  if (pos + 1 <= n_ctx_) known_[size_t(pos) + 1] = -1;  // the pick, unknown until read back
  return a;
}

void DeviceSampler::enqueue(const SamplingParams& p, uint64_t draw, int pos) {
  const SampleStepArgs a = step_args(p, draw, pos);
  const cl_kernel k = kernel_.get();
  set_arg(k, arg_pos_, cl_int(pos));
  step_slots_.set(k, a);
  set_arg(k, arg_done_base_, cl_uint(done_base_));
  const size_t local = size_t(wg_), global = size_t(n_groups_) * local;
  cl_check(clEnqueueNDRangeKernel(rt_.queue(), k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
           "clEnqueueNDRangeKernel(sample_chain)");
  done_base_ += uint32_t(n_groups_);
}

void DeviceSampler::picked(int pos, int32_t id) {
  if (pos >= 0 && pos < n_ctx_) known_[size_t(pos) + 1] = id;
}

}  // namespace clchat
