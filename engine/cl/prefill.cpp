// ClPrefill: the chunked prefill plan (kernels built once, arguments preset;
// per chunk only the token count, position and id offset change).
#include "engine/cl/prefill.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "engine/cl/decode_plan.h"
#include "engine/cl/fault_injection.h"
#include "engine/cl/programs.h"
#include "engine/gguf/quant.h"

namespace clchat {

namespace {

size_t ceil_div(size_t n, size_t m) { return (n + m - 1) / m; }

// Work-group size of an element-wise step over `global0` items: the largest
// divisor of global0 up to 256 (and the device's limit).
size_t elementwise_local(size_t global0, size_t device_max) {
  const size_t cap = std::min<size_t>(256, std::max<size_t>(device_max, 1));
  for (size_t l = std::min(cap, global0); l > 1; --l) {
    if (global0 % l == 0) return l;
  }
  return 1;
}

// The arguments of matmul (matmul.cl):
// out[t * ld_out + out_off + r] (+)= sum_i W[r, i] x[t * ld_x + i] for the
// n_tok tokens t (n_tok set per chunk).
KernelArgs matmul_args(const DeviceMatrix& w, const ClMem& x, int ld_x, int n_tok, const ClMem& out,
                       int ld_out, int out_off, bool accumulate) {
  return {{"wq", w.q},
          {"ws", w.s},
          {"n_in", cl_int(w.n_in)},
          {"n_rows", cl_int(w.rows)},
          {"x", x},
          {"ld_x", cl_int(ld_x)},
          {"n_tok", cl_int(n_tok)},
          {"out", out},
          {"ld_out", cl_int(ld_out)},
          {"out_off", cl_int(out_off)},
          {"accumulate", cl_int(accumulate ? 1 : 0)}};
}

// Of matmul_mma_deq (matmul_mma_deq.cl): the same product, x packed by
// pack_x_f16 into xp (and its per-token scales into xs).
// `part`: split-K's partial sums (MMA_SPLIT > 1), else not read (any buffer).
KernelArgs mma_args(const DeviceMatrix& w, const ClMem& xp, const ClMem& xs, int n_tok,
                    const ClMem& out, int ld_out, int out_off, bool accumulate, const ClMem& part) {
  return {{"wq", w.q},
          {"ws", w.s},
          {"n_in", cl_int(w.n_in)},
          {"n_rows", cl_int(w.rows)},
          {"xp", xp},
          {"xs", xs},
          {"n_tok", cl_int(n_tok)},
          {"out", out},
          {"ld_out", cl_int(ld_out)},
          {"out_off", cl_int(out_off)},
          {"accumulate", cl_int(accumulate ? 1 : 0)},
          {"part", part}};
}

// Of mma_split_sum (matmul_mma_deq.cl): out (+)= the splits' sums in part.
KernelArgs split_sum_args(const ClMem& part, int n_rows, int n_tok, const ClMem& out, int ld_out,
                          int out_off, bool accumulate) {
  return {{"part", part},
          {"n_rows", cl_int(n_rows)},
          {"n_tok", cl_int(n_tok)},
          {"out", out},
          {"ld_out", cl_int(ld_out)},
          {"out_off", cl_int(out_off)},
          {"accumulate", cl_int(accumulate ? 1 : 0)}};
}

KernelArgs pack_args(const ClMem& x, int ld_x, int n_in, int n_tok, const ClMem& xp,
                     const ClMem& xs) {
  return {{"x", x},
          {"ld_x", cl_int(ld_x)},
          {"n_in", cl_int(n_in)},
          {"n_tok", cl_int(n_tok)},
          {"xp", xp},
          {"xs", xs}};
}

}  // namespace

ClPrefill::ClPrefill(const ModelConfig& config, ClRuntime& rt, const DeviceWeights& w,
                     DecodeState& s, int chunk, const std::string& build_options,
                     const PrefillTuning& tuning, ClPrograms* decode_programs)
    : config_(config),
      rt_(rt),
      decode_programs_(decode_programs),
      w_(w),
      s_(s),
      chunk_(chunk),
      build_options_(build_options),
      tuning_(tuning) {
  if (chunk_ < 1) throw std::invalid_argument("prefill chunk must be at least 1");
  profile_ = rt_.profiling() && tuning_.profile;
  const ModelConfig& c = config_;
  const size_t n = size_t(chunk_);
  if (c.head_dim > 4096) throw std::invalid_argument("head size above 4096");
  glu_vec_ = rt_.device().is_cpu && c.n_ff % 8 == 0 ? 8 : 1;
  ops_defines_ = " -DNORM_WG=" + std::to_string(tuning_.norm_wg) +
                 " -DHEAD_MAX=" + std::to_string(std::max(c.head_dim, 4)) +
                 " -DGLU_VEC=" + std::to_string(glu_vec_);
  x_ = rt_.alloc(n * size_t(c.n_embd) * 4);
  xn_ = rt_.alloc(n * size_t(c.n_embd) * 4);
  qkv_ = rt_.alloc(n * size_t(c.n_embd_q() + 2 * c.n_embd_kv()) * 4);
  q_ = rt_.alloc(n * size_t(c.n_embd_q()) * 4);
  att_ = rt_.alloc(n * size_t(c.n_embd_q()) * 4);
  g_ = rt_.alloc(n * size_t(c.n_ff) * 4);
  u_ = rt_.alloc(n * size_t(c.n_ff) * 4);
  // the widest input of a matrix product, for its quantized or packed form
  const int widest = std::max({c.n_embd, c.n_embd_q(), c.n_ff});
  if (tuning_.mm_x16) {
    xq_ = rt_.alloc(x16_bytes(chunk_, widest, tuning_.x16_tg));
  }
  if (tuning_.tensor_cores) {
    xp_ = rt_.alloc(mma_packed_bytes(chunk_, widest));
    xps_ = rt_.alloc(mma_scale_bytes(chunk_));
    // Split-K's partial sums (allocated by the first matrix that splits): a
    // matrix splits over s only where s x its plan's tokens x its rows fit
    // (split_fits), e.g. Wo and ffn_down over 4 at a full chunk, the 1B's
    // stacked Q/K/V over 2.
    part_floats_ = size_t(std::max(tuning_.mma_split, tuning_.mma_large)) * n *
                   size_t(std::max(c.n_embd, c.n_embd_q()));
  }
  build_steps();
  if (decode_programs_) build_decode_steps();
}

ClKernel ClPrefill::kernel(const std::string& stem, const std::string& defines, const char* name) {
  const std::string key = stem + defines;
  auto it = std::find_if(programs_.begin(), programs_.end(),
                         [&](const auto& p) { return p.first == key; });
  if (it == programs_.end()) {
    programs_.emplace_back(key,
                           rt_.build_program(stem, kernel_source(stem), build_options_ + defines));
    it = programs_.end() - 1;
  }
  return rt_.create_kernel(it->second, name);
}

std::string ClPrefill::matmul_defines(GgmlType type, const PrefillTuning& t) {
  return " -DWTYPE=" + std::to_string(int(type)) + " -DMM_VR=" + std::to_string(t.mm_vr) +
         " -DMM_NR=" + std::to_string(t.mm_nr) + " -DMM_WT=" + std::to_string(t.mm_wt) +
         " -DMM_NT=" + std::to_string(t.mm_nt) + (t.mm_direct ? " -DMM_DIRECT=1" : "");
}

std::string ClPrefill::x16_defines(GgmlType type, const PrefillTuning& t) {
  return " -DWTYPE=" + std::to_string(int(type)) + " -DX16_VR=" + std::to_string(t.x16_vr) +
         " -DX16_TG=" + std::to_string(t.x16_tg);
}

std::string ClPrefill::attention_defines(int head_dim, const PrefillTuning& t) {
  return " -DHEAD_DIM=" + std::to_string(head_dim) + " -DATT_TQ=" + std::to_string(t.att_tq) +
         " -DATT_TK=" + std::to_string(t.att_tk) + " -DATT_KS=" + std::to_string(t.att_ks) +
         " -DATT_DS=" + std::to_string(std::max(t.att_ds, 1)) +
         (t.att_direct ? " -DATT_DIRECT=1" : "");
}

std::string ClPrefill::mma_defines(GgmlType type, const PrefillTuning& t, int split) {
  return " -DWTYPE=" + std::to_string(int(type)) + " -DMMA_MI=" + std::to_string(t.mma_mi) +
         " -DMMA_NJ=" + std::to_string(t.mma_nj) + " -DMMA_WR=" + std::to_string(t.mma_wr) +
         " -DMMA_WN=" + std::to_string(t.mma_wn) + " -DMMA_KB=" + std::to_string(t.mma_kb) +
         " -DMMA_STAGES=" + std::to_string(t.mma_stages) +
         (split > 1 ? " -DMMA_SPLIT=" + std::to_string(split) : "") +
         " -DPACK_WG=" + std::to_string(k_pack_group) +
         " -DSPLIT_SUM_WG=" + std::to_string(k_split_sum_group);
}

// A case of a row tile and 40 rows more by a token tile and 9 tokens more
// (edge tiles on both axes), with stages enough that each split has two
// and the copy ring wraps, the last one partly filled (one block more;
// K-quants: whole super-blocks), against a float64 product of the same
// dequantized weights, in the work-groups of `tile`, through mma_split_sum
// where it splits over K. The output and the partial sums start as NaN.
// Any exception (the driver rejecting the PTX or the tile's local memory
// included) or a mismatch says no. Each program (type, tile, split) is
// tested once.
bool ClPrefill::mma_ok(GgmlType type, const PrefillTuning& tile, int split) {
  const std::string defines = mma_defines(type, tile, split);
  const std::string& key = defines;
  for (const auto& [k, ok] : mma_checked_) {
    if (k == key) return ok;
  }
  const int tokens = tile.mma_tile_tokens();
  bool ok = false;
  try {
    const int per_block = std::max(32, ggml_block_size(type)) / 32;  // blocks of 32 a type's block
    const int n_stages = std::max(2 * split, tile.mma_stages + 1);
    const int n_blocks =
        int(ceil_div(size_t(n_stages * tile.mma_kb + 1), size_t(per_block))) * per_block;
    const int rows = 40 + tile.mma_tile_rows();
    const int n_tok = 9 + tokens;
    const int n_in = 32 * n_blocks;
    std::vector<float> wv(size_t(n_in) * rows), xv(size_t(n_in) * n_tok);
    uint32_t st = 12345u + uint32_t(type);
    auto rnd = [&st] {
      st = st * 1664525u + 1013904223u;
      return float(int((st >> 8) & 0xffff) - 32768) / 32768.0f;
    };
    for (float& v : wv) v = rnd();
    for (float& v : xv) v = rnd();
    const std::vector<uint8_t> bytes = quantize_matrix(type, wv, uint64_t(n_in));
    const std::vector<float> deq = dequantize_matrix(type, bytes, uint64_t(n_in), uint64_t(rows));
    const DeviceMatrix w = upload_matrix(rt_, repack_matrix(type, bytes.data(), n_in, rows));
    ClMem x = rt_.alloc(xv.size() * 4);
    ClMem out = rt_.alloc(size_t(n_tok) * rows * 4);
    ClMem part = rt_.alloc(size_t(split) * n_tok * rows * 4);
    cl_check(clEnqueueWriteBuffer(rt_.queue(), x.get(), CL_TRUE, 0, xv.size() * 4, xv.data(), 0,
                                  nullptr, nullptr),
             "clEnqueueWriteBuffer(mma self-test)");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto poison = [&](const ClMem& m, size_t floats) {
      cl_check(
          clEnqueueFillBuffer(rt_.queue(), m.get(), &nan, 4, 0, floats * 4, 0, nullptr, nullptr),
          "clEnqueueFillBuffer(mma self-test)");
    };
    poison(out, size_t(n_tok) * rows);
    poison(part, size_t(split) * n_tok * rows);
    ClMem xp = rt_.alloc(mma_packed_bytes(n_tok, n_in));
    ClMem xs = rt_.alloc(mma_scale_bytes(n_tok));
    ClKernel pack = kernel(k_mma_program, defines, "pack_x_f16");
    pack_args(x, n_in, n_in, n_tok, xp, xs).bind(pack);
    const size_t pack_global[2] = {size_t(k_pack_group), size_t(n_tok)};
    const size_t pack_local[2] = {size_t(k_pack_group), 1};
    cl_check(clEnqueueNDRangeKernel(rt_.queue(), pack.get(), 2, nullptr, pack_global, pack_local, 0,
                                    nullptr, nullptr),
             "clEnqueueNDRangeKernel(mma self-test pack)");
    ClKernel k = kernel(k_mma_program, defines, "matmul_mma_deq");
    mma_args(w, xp, xs, n_tok, out, rows, 0, false, part).bind(k);
    const size_t global[2] = {mma_rows_global(rows, tile, split),
                              ceil_div(size_t(n_tok), size_t(tile.mma_tile_tokens()))};
    const size_t local[2] = {size_t(tile.mma_threads()), 1};
    cl_check(clEnqueueNDRangeKernel(rt_.queue(), k.get(), 2, nullptr, global, local, 0, nullptr,
                                    nullptr),
             "clEnqueueNDRangeKernel(mma self-test)");
    if (split > 1) {
      ClKernel sum = kernel(k_mma_program, defines, "mma_split_sum");
      split_sum_args(part, rows, n_tok, out, rows, 0, false).bind(sum);
      const size_t sum_global[2] = {split_sum_rows_global(rows), size_t(n_tok)};
      const size_t sum_local[2] = {size_t(k_split_sum_group), 1};
      cl_check(clEnqueueNDRangeKernel(rt_.queue(), sum.get(), 2, nullptr, sum_global, sum_local, 0,
                                      nullptr, nullptr),
               "clEnqueueNDRangeKernel(mma self-test sum)");
    }
    std::vector<float> got(size_t(n_tok) * rows);
    cl_check(clEnqueueReadBuffer(rt_.queue(), out.get(), CL_TRUE, 0, got.size() * 4, got.data(), 0,
                                 nullptr, nullptr),
             "clEnqueueReadBuffer(mma self-test)");
    double err = 0, norm = 0;
    for (int t = 0; t < n_tok; ++t) {
      for (int r = 0; r < rows; ++r) {
        double want = 0;
        for (int i = 0; i < n_in; ++i) {
          want += double(deq[size_t(r) * n_in + i]) * double(xv[size_t(t) * n_in + i]);
        }
        const double d = double(got[size_t(t) * rows + r]) - want;
        err += std::isfinite(d) ? d * d : 1e30;
        norm += want * want;
      }
    }
    const double rel = std::sqrt(err / norm);
    // fp16 weights and x: ~2e-4 here (each rounded by at most 2^-11)
    ok = rel <= 2e-3;
    if (ok) {
      spdlog::info(
          "tensor-core prefill matmul for {}, tiles of {} tokens, split {}: self-test error {:.2g}",
          ggml_type_name(type), tokens, split, rel);
    } else {
      spdlog::warn(
          "tensor-core prefill matmul for {}, tiles of {} tokens, split {}: self-test failed "
          "(error {:.3g})",
          ggml_type_name(type), tokens, split, rel);
    }
  } catch (const KernelArgError&) {
    throw;  // a bug in clchat, not the device
  } catch (const std::exception& e) {
    spdlog::info(
        "tensor-core prefill matmul for {}, tiles of {} tokens, split {}: unavailable ({})",
        ggml_type_name(type), tokens, split, e.what());
  }
  mma_checked_.emplace_back(key, ok);
  return ok;
}

bool ClPrefill::attention_mma_ok() {
  if (attention_mma_checked_ >= 0) return attention_mma_checked_ == 1;
  const int d = config_.head_dim;
  bool ok = false;
  if (tuning_.tensor_cores && tuning_.att_mma && (d == 64 || d == 128)) {
    try {
      // 2 query heads on 1 KV head, 70 queries at positions 9.. with a
      // window of 20 (masked keys on both sides, a partial tile)
      const int n_head = 2, n_tok = 70, pos0 = 9, window = 20, ring = 96;
      uint32_t st = 777u;
      auto rnd = [&st] {
        st = st * 1664525u + 1013904223u;
        return float(int((st >> 8) & 0xffff) - 32768) / 16384.0f;
      };
      std::vector<float> q(size_t(n_tok) * n_head * d), kc(size_t(ring) * d), vc(size_t(ring) * d);
      for (float& v : q) v = rnd();
      for (float& v : kc) v = rnd();
      for (float& v : vc) v = rnd();
      std::vector<double> want(q.size());
      for (int t = 0; t < n_tok; ++t) {
        const int pos = pos0 + t, first = std::max(0, pos + 1 - window);
        for (int h = 0; h < n_head; ++h) {
          std::vector<double> p;
          double mx = -1e300, sum = 0;
          for (int k = first; k <= pos; ++k) {
            double dot = 0;
            for (int i = 0; i < d; ++i) {
              dot += double(q[(size_t(t) * n_head + h) * d + i]) * kc[size_t(k) * d + i];
            }
            p.push_back(dot / std::sqrt(double(d)));
            mx = std::max(mx, p.back());
          }
          for (double& v : p) sum += (v = std::exp(v - mx));
          for (int i = 0; i < d; ++i) {
            double o = 0;
            for (int k = first; k <= pos; ++k) o += p[size_t(k - first)] * vc[size_t(k) * d + i];
            want[(size_t(t) * n_head + h) * d + i] = o / sum;
          }
        }
      }
      const ClMem q_dev = rt_.upload(q.data(), q.size() * 4);
      const ClMem k_dev = rt_.upload(kc.data(), kc.size() * 4);
      const ClMem v_dev = rt_.upload(vc.data(), vc.size() * 4);
      const ClMem out = rt_.alloc(q.size() * 4);
      ClKernel k = kernel(k_att_mma_program, attention_mma_defines(d), "attention_mma");
      const KernelArgs args = {{"q", q_dev},
                               {"k_cache", k_dev},
                               {"v_cache", v_dev},
                               {"layer_off", cl_ulong(0)},
                               {"pos0", cl_int(pos0)},
                               {"n_tok", cl_int(n_tok)},
                               {"n_head", cl_int(n_head)},
                               {"n_head_kv", cl_int(1)},
                               {"window", cl_int(window)},
                               {"ring", cl_int(ring)},
                               {"out", out}};
      args.bind(k);
      const size_t global[2] = {size_t(n_head), ceil_div(size_t(n_tok), size_t(k_att_mma_queries)) *
                                                    size_t(k_att_mma_threads)};
      const size_t local[2] = {1, size_t(k_att_mma_threads)};
      cl_check(clEnqueueNDRangeKernel(rt_.queue(), k.get(), 2, nullptr, global, local, 0, nullptr,
                                      nullptr),
               "clEnqueueNDRangeKernel(attention self-test)");
      std::vector<float> got(q.size());
      cl_check(clEnqueueReadBuffer(rt_.queue(), out.get(), CL_TRUE, 0, got.size() * 4, got.data(),
                                   0, nullptr, nullptr),
               "clEnqueueReadBuffer(attention self-test)");
      double err = 0, norm = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const double delta = double(got[e]) - want[e];
        err += std::isfinite(delta) ? delta * delta : 1e30;
        norm += want[e] * want[e];
      }
      const double rel = std::sqrt(err / norm);
      ok = rel <= 5e-3;  // q, k, v and p in fp16: ~1e-3
      spdlog::log(ok ? spdlog::level::info : spdlog::level::warn,
                  "tensor-core prefill attention, heads of {}: self-test error {:.2g}{}", d, rel,
                  ok ? "" : " (failed: the portable kernel)");
    } catch (const KernelArgError&) {
      throw;  // a bug in clchat, not the device
    } catch (const std::exception& e) {
      spdlog::info("tensor-core prefill attention: unavailable ({})", e.what());
    }
  }
  attention_mma_checked_ = ok ? 1 : 0;
  return ok;
}

ClKernel ClPrefill::weight_kernel(GgmlType type, const char* name) {
  return kernel("quant_blocks+matmul", matmul_defines(type, tuning_), name);
}

ClPrefill::Step ClPrefill::matmul_step(const DeviceMatrix& w, const ClMem& x, int ld_x,
                                       const ClMem& out, int ld_out, int out_off, bool accumulate,
                                       const char* label) {
  Step s;
  const PrefillTuning& t = tuning_;
  s.kernel = weight_kernel(w.type, "matmul");
  s.global0 = ceil_div(size_t(w.rows), size_t(t.tile_rows())) * size_t(t.mm_nr);
  s.local0 = size_t(t.mm_nr);
  s.local1 = size_t(t.mm_nt);
  s.tokens_per_group = t.tile_tokens();
  s.label = label;
  const KernelArgs args = matmul_args(w, x, ld_x, 0, out, ld_out, out_off, accumulate);
  args.bind(s.kernel);
  s.arg_n_tok = int(args.index("n_tok"));
  return s;
}

bool ClPrefill::mma_weights(const DeviceMatrix& w) {
  return tuning_.tensor_cores && mma_type(w.type) && w.n_in % 32 == 0 && mma_ok(w.type, tuning_);
}

// A kernel of matmul_mma_deq.cl that writes xp_ and xps_, a work-group of
// k_pack_group per token; `input`: the activations that xp_ then holds packed
// (for add_matmul), null where the following matrix step says so itself.
// From the program of the weight type that reads them, so no program is
// built for it alone.
ClPrefill::Step ClPrefill::packing_step(const char* name, GgmlType type, const char* label,
                                        const ClMem* input, const KernelArgs& args) {
  Step s;
  s.kernel = kernel(k_mma_program, mma_defines(type, tuning_), name);
  s.local0 = size_t(k_pack_group);
  s.global0 = size_t(k_pack_group);
  s.local1 = 1;
  s.label = label;
  s.mma_input = input;
  args.bind(s.kernel);
  s.arg_n_tok = int(args.index("n_tok"));
  return s;
}

// x (chunk, ld_x) -> xp_, xps_
ClPrefill::Step ClPrefill::pack_step(const ClMem& x, int ld_x, int n_in, GgmlType type) {
  return packing_step("pack_x_f16", type, "pack_x", nullptr,
                      pack_args(x, ld_x, n_in, 0, xp_, xps_));
}

// xn_ = rmsnorm(x_) * g, written packed for tensor-core products
// (rmsnorm_pack_f16): xn_ itself is not written. H200, Llama-3.2-1B shape
// Q4_0, pp512: two launches fewer a layer, the norm and the pack of 16 MB
// of activations a chunk in one pass.
ClPrefill::Step ClPrefill::norm_pack_step(const ClMem& g, GgmlType type, const char* label) {
  return packing_step("rmsnorm_pack_f16", type, label, &xn_,
                      {{"x", x_},
                       {"n_in", cl_int(config_.n_embd)},
                       {"n_tok", cl_int(0)},
                       {"g", g},
                       {"eps", config_.rms_eps},
                       {"xp", xp_},
                       {"xs", xps_}});
}

// g_ = act(g_) * u_ written packed for a tensor-core ffn_down (glu_pack_f16):
// g_ itself is not written.
ClPrefill::Step ClPrefill::glu_pack_step(GgmlType type) {
  const bool gelu = config_.ffn_act == FfnActivation::GeluTanh;
  return packing_step("glu_pack_f16", type, gelu ? "gelu_mul" : "silu_mul", &g_,
                      {{"gate", g_},
                       {"up", u_},
                       {"n_in", cl_int(config_.n_ff)},
                       {"n_tok", cl_int(0)},
                       {"gelu", cl_int(gelu ? 1 : 0)},
                       {"xp", xp_},
                       {"xs", xps_}});
}

void ClPrefill::add_mma_steps(std::vector<Step>& into, const DeviceMatrix& w, const ClMem& x,
                              const ClMem& out, int ld_out, int out_off, bool accumulate,
                              const char* label) {
  // Fewer work-groups than compute units at a full chunk leave SMs idle
  // (wo and ffn_down: 576 rows): halve the tile's warps along rows until
  // the grid covers the device (PrefillTuning::mma_fit).
  PrefillTuning t = tuning_;
  const size_t units = rt_.device().compute_units;
  auto groups = [&](const PrefillTuning& u) {
    return ceil_div(size_t(w.rows), size_t(u.mma_tile_rows())) *
           ceil_div(size_t(plan_tokens_), size_t(u.mma_tile_tokens()));
  };
  while (t.mma_fit && t.mma_wr > 1 && groups(t) < units) t.mma_wr /= 2;
  // Large matrices: a wider token tile where the grid then still has 1.4
  // work-groups per compute unit (PrefillTuning::mma_widen): each A fragment
  // built feeds twice the mma. H200, pp512, Llama-3.2-1B shape Q4_0 (gate
  // and up: 512 groups widened), 51.2k tok/s against 47.5k without. The
  // threshold (2026-11-29, after the fused packs; widened: Q/K/V of the 1B
  // and 1.7B shapes, Qwen2.5-0.5B's gate and up): at least 3 groups a unit
  // 43.6k / 67.1k / 91.0k tok/s (1.7B / 1B / Qwen), 1.4 44.7k / 67.4k /
  // 91.9k, 0.9 (also the 1B's Wo and down at 128 groups) 44.6k / 67.1k /
  // 91.4k. The widened tile holds twice the activations in local memory
  // (Q8_0: ~115 KB with three stages; NVIDIA's OpenCL built and passed every
  // type on the H200): it is self-tested too, and a device that refuses it
  // keeps the narrower tile.
  PrefillTuning wide = t;
  wide.mma_nj *= 2;
  auto grid_full = [&](size_t n_groups) { return 5 * n_groups >= 7 * units; };
  // Each split at least 4 stages long, within part_ (split-K's sums).
  auto split_fits = [&](const PrefillTuning& u, int s) {
    const size_t n_stages = ceil_div(size_t(w.n_in / 32), size_t(u.mma_kb));
    return n_stages >= size_t(4 * s) &&
           size_t(s) * size_t(plan_tokens_) * size_t(w.rows) <= part_floats_;
  };
  // The fewest splits from `from` to `most` whose grid `covers` the device,
  // if tile_for(s) fits the local memory (and, split, split_fits) and
  // passes its self-test; 0: none (the first count that covers decides).
  auto fewest_splits = [&](int from, int most, auto tile_for, auto covers) {
    for (int s = from; s <= most; ++s) {
      const PrefillTuning u = tile_for(s);
      if (!covers(groups(u) * size_t(s))) continue;
      const bool fits =
          mma_local_bytes(w.type, u) <= k_mma_local_limit && (s == 1 || split_fits(u, s));
      return fits && mma_ok(w.type, u, s) ? s : 0;
    }
    return 0;
  };
  // The large tile (PrefillTuning::mma_large, large_tile) where its grid,
  // split over K into the fewest work-groups that do, fills its waves of
  // compute units to 95% and the kernel fits the local memory; 256 rows
  // first, then 192. H200 pp512 (2026-11-30), against the tiles below:
  // Llama-3.2-1B shape Q4_0 78.7-79.3k against 74.7-75.1k (gate and up
  // unsplit, Wo and ffn_down split over 4), SmolLM2-1.7B 53.0-53.2k against
  // 50.3-50.5k; unsplit with stages of 2 blocks in a ring of 4 rather than 4
  // in a ring of 3: 80.7-81.3k / 54.4-54.7k. Full waves rather than 95% of
  // one (the 1B's stacked Q/K/V split over 3 into 144 groups on 132 units,
  // with part_ sized for it, not kept: 1,074 us a chunk against 726 with its
  // widened tile). The 192-row tile (the 1B's Q/K/V split over 2, the
  // 1.7B's unsplit; Q8_0's Wo and ffn_down, whose 256-row split tile exceeds
  // the local memory, split over 3): 1B 81.3-81.9k against 80.7-80.8k (Q/K/V
  // 678 us against 726), 1.7B 55.6-55.8k against 54.1k (1,392 us against
  // 1,605), 1B Q8_0 72.3k against 64.3-64.5k.
  auto full_waves = [&](size_t n_groups) {
    return 100 * n_groups >= 95 * ceil_div(n_groups, units) * units;
  };
  int large_splits = 0, large_m16 = 0;
  for (const int m16 : {4, 3}) {
    large_splits = fewest_splits(
        1, t.mma_large, [&](int s) { return t.large_tile(s, m16); }, full_waves);
    if (large_splits > 0) {
      large_m16 = m16;
      break;
    }
  }
  int split = 1;
  if (large_splits > 0) {
    t = t.large_tile(large_splits, large_m16);
    split = large_splits;
  } else if (t.mma_widen && grid_full(groups(wide)) && mma_ok(w.type, wide)) {
    t = wide;
  } else if (t.mma_widen && !grid_full(groups(wide))) {
    // Split-K (PrefillTuning::mma_split): the widened tile with each row
    // tile's stages over the fewest work-groups that fill the grid, each at
    // least 4 stages long, where part_ holds their sums.
    const int s = fewest_splits(
        2, t.mma_split, [&](int) { return wide; }, grid_full);
    if (s > 0) {
      t = wide;
      split = s;
    }
  }
  const std::string defines = mma_defines(w.type, t, split);
  Step s;
  s.kernel = kernel(k_mma_program, defines, "matmul_mma_deq");
  s.global0 = mma_rows_global(w.rows, t, split);
  s.local0 = size_t(t.mma_threads());
  s.local1 = 1;
  s.tokens_per_group = t.mma_tile_tokens();
  s.label = label;
  s.mma_input = &x;
  s.product = Product::tensor_cores;
  s.large_tile = large_splits > 0;
  s.tile_defines = defines;
  if (split > 1 && !part_) part_ = rt_.alloc(part_floats_ * 4);
  const ClMem& part = split > 1 ? part_ : out;  // (not read without a split)
  const KernelArgs args = mma_args(w, xp_, xps_, 0, out, ld_out, out_off, accumulate, part);
  args.bind(s.kernel);
  s.arg_n_tok = int(args.index("n_tok"));
  into.push_back(std::move(s));
  if (split == 1) return;
  // The splits' sums into out, under the product's label (the profile's
  // time for the matrix includes it); xp_ still holds x packed.
  Step sum;
  sum.kernel = kernel(k_mma_program, defines, "mma_split_sum");
  sum.global0 = split_sum_rows_global(w.rows);
  sum.local0 = size_t(k_split_sum_group);
  sum.local1 = 1;
  sum.label = label;
  sum.mma_input = &x;
  sum.split_sum = true;
  const KernelArgs sum_args = split_sum_args(part_, w.rows, 0, out, ld_out, out_off, accumulate);
  sum_args.bind(sum.kernel);
  sum.arg_n_tok = int(sum_args.index("n_tok"));
  into.push_back(std::move(sum));
}

size_t ClPrefill::mma_rows_global(int rows, const PrefillTuning& t, int split) {
  return ceil_div(size_t(rows), size_t(t.mma_tile_rows())) * size_t(split) *
         size_t(t.mma_threads());
}

size_t ClPrefill::mma_local_bytes(GgmlType type, const PrefillTuning& t) {
  const size_t code_words = type == GgmlType::Q8_0 ? 2 : 1;  // QV: uint4 of codes a block
  size_t record_words = 4;                                   // SWORDS: scale-record words a block
  if (type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q8_0) {
    record_words = 1;
  } else if (type == GgmlType::Q5_0 || type == GgmlType::Q5_1 || type == GgmlType::Q4_K) {
    record_words = 2;
  }
  const size_t xq = size_t(t.mma_kb) * 4;        // packed uint4 a token a stage
  const size_t ldq = xq % 8 == 4 ? xq : xq + 4;  // their row stride
  const size_t blocks = size_t(t.mma_stages) * size_t(t.mma_kb) * size_t(t.mma_tile_rows());
  return blocks * code_words * 16 + ceil_div(blocks * record_words, size_t(4)) * 16 +
         size_t(t.mma_stages) * size_t(t.mma_tile_tokens()) * ldq * 16;
}

size_t ClPrefill::split_sum_rows_global(int rows) {
  return ceil_div(size_t(rows), size_t(k_split_sum_group)) * size_t(k_split_sum_group);
}

bool ClPrefill::x16_weights(const DeviceMatrix& w) const {
  const bool type_ok = w.type == GgmlType::Q4_0 || w.type == GgmlType::Q4_1 ||
                       w.type == GgmlType::Q5_1 || w.type == GgmlType::Q8_0 ||
                       w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K ||
                       w.type == GgmlType::Q6_K;
  return tuning_.mm_x16 && type_ok && w.n_in % 32 == 0 && xq_;
}

// x (chunk, ld_x) -> xq_; one work-item per block and group of 8 tokens
// (the last tile of x16_tg groups padded with zeros). From the program of
// the weight type that reads them, so no program is built for it alone.
ClPrefill::Step ClPrefill::quantize_step(const ClMem& x, int ld_x, int n_in, GgmlType type) {
  Step s;
  s.kernel = kernel("cpu_transpose+matmul_x16", x16_defines(type, tuning_), "quantize_x16");
  s.global0 = size_t(n_in / 32);
  s.local0 = elementwise_local(s.global0, rt_.device().max_work_group_size);
  s.local1 = 1;
  s.tokens_per_group = 8;
  s.label = "quantize_x";
  const KernelArgs args = {
      {"x", x}, {"ld_x", cl_int(ld_x)}, {"n_in", cl_int(n_in)}, {"n_tok", cl_int(0)}, {"xq", xq_}};
  args.bind(s.kernel);
  s.arg_n_tok = int(args.index("n_tok"));
  return s;
}

// Work-groups of 16 work-items along rows (PoCL runs a group's items in
// one thread: 16 x x16_vr rows share the cached activations of its tokens).
ClPrefill::Step ClPrefill::matmul_x16_step(const DeviceMatrix& w, const ClMem& x, const ClMem& out,
                                           int ld_out, int out_off, bool accumulate,
                                           const char* label) {
  Step s;
  const PrefillTuning& t = tuning_;
  s.kernel = kernel("cpu_transpose+matmul_x16", x16_defines(w.type, t), "matmul_x16");
  s.local0 = std::min<size_t>(16, rt_.device().max_work_group_size);
  s.global0 = ceil_div(ceil_div(size_t(w.rows), size_t(t.x16_vr)), s.local0) * s.local0;
  s.local1 = 1;
  s.tokens_per_group = 8 * t.x16_tg;
  s.label = label;
  s.x16_input = &x;
  const KernelArgs args = {{"wq", w.q},
                           {"ws", w.s},
                           {"n_in", cl_int(w.n_in)},
                           {"n_rows", cl_int(w.rows)},
                           {"xq", xq_},
                           {"n_tok", cl_int(0)},
                           {"out", out},
                           {"ld_out", cl_int(ld_out)},
                           {"out_off", cl_int(out_off)},
                           {"accumulate", cl_int(accumulate ? 1 : 0)}};
  args.bind(s.kernel);
  s.arg_n_tok = int(args.index("n_tok"));
  return s;
}

void ClPrefill::add_matmul(std::vector<Step>& into, const DeviceMatrix& w, const ClMem& x, int ld_x,
                           const ClMem& out, int ld_out, int out_off, bool accumulate,
                           const char* label) {
  if (mma_weights(w)) {
    if (into.empty() || into.back().mma_input != &x) {
      into.push_back(pack_step(x, ld_x, w.n_in, w.type));
    }
    add_mma_steps(into, w, x, out, ld_out, out_off, accumulate, label);
    return;
  }
  if (!x16_weights(w)) {
    into.push_back(matmul_step(w, x, ld_x, out, ld_out, out_off, accumulate, label));
    into.back().product = Product::portable;
    return;
  }
  if (into.empty() || into.back().x16_input != &x) {
    into.push_back(quantize_step(x, ld_x, w.n_in, w.type));
  }
  into.push_back(matmul_x16_step(w, x, out, ld_out, out_off, accumulate, label));
  into.back().product = Product::x16;
}

int ClPrefill::split_products() const {
  return int(
      std::count_if(steps_.begin(), steps_.end(), [](const Step& s) { return s.split_sum; }));
}

int ClPrefill::large_tile_products() const {
  return int(
      std::count_if(steps_.begin(), steps_.end(), [](const Step& s) { return s.large_tile; }));
}

std::vector<int> ClPrefill::short_plan_tokens() const {
  std::vector<int> tokens;
  for (const ShortPlan& p : short_plans_) tokens.push_back(p.tokens);
  return tokens;
}

int ClPrefill::matrix_products(Product kind) const {
  return int(std::count_if(steps_.begin(), steps_.end(),
                           [kind](const Step& s) { return s.product == kind; }));
}

ClPrefill::Step ClPrefill::norm_step(const ClMem& x, const ClMem& g, const ClMem& out,
                                     const char* label, bool accumulate) {
  Step s;
  s.kernel = kernel("prefill_ops", ops_defines_, "rmsnorm_rows");
  s.global0 = size_t(tuning_.norm_wg);
  s.local0 = size_t(tuning_.norm_wg);
  s.local1 = 1;
  s.label = label;
  const KernelArgs args = {
      {"x", x},    {"row0", cl_int(0)},      {"n", cl_int(config_.n_embd)},
      {"g", g},    {"eps", config_.rms_eps}, {"accumulate", cl_int(accumulate ? 1 : 0)},
      {"out", out}};
  args.bind(s.kernel);
  s.arg_row0 = int(args.index("row0"));
  return s;
}

// attention_prefill's dim lanes (att_ds 0): on GPUs one per 32 dimensions of
// heads of 256 or more (the size measured; heads of 128 keep one work-item
// per query until a 128 shape is), on CPU devices none. (H100, Gemma 3 270M
// shape pp512:
// 6,524-6,591 tok/s with one work-item holding all 256 dimensions of q and o,
// 49,774-50,039 with 4 dim lanes, 58,545-58,615 with 8, 54,593-55,121 with 16
// and 4 queries per work-group; Qwen2.5-0.5B's head of 64 with 2: 46,117-46,557
// against 45,805-45,977, left at 1), and for heads of 256 tiles of 8 keys
// (65,567-65,855 against 53,275-58,202 at 16; 4 dim lanes and 32 queries:
// 51,323-51,672). Then its local memory: K and V tiles, the partial (m, l, o) of
// att_ks - 1 key lanes per query and the dim lanes' partial scores. Fewer key
// lanes for wide heads (128: 89 KB at the GPU defaults) until it fits the
// device.
PrefillTuning ClPrefill::attention_tuning() const {
  const ModelConfig& c = config_;
  PrefillTuning t = tuning_;
  if (t.att_direct) {  // no lanes, no local memory
    t.att_ks = 1;
    t.att_ds = 1;
    return t;
  }
  if (t.att_ds == 0) {
    const bool wide = !rt_.device().is_cpu && c.head_dim >= 256;
    t.att_ds = wide ? c.head_dim / 32 : 1;
    if (wide) t.att_tk = std::min(t.att_tk, 8);
    while (t.att_tk % t.att_ks != 0) --t.att_ks;  // key lanes divide the tile
  }
  while ((c.head_dim / 4) % t.att_ds != 0 ||
         size_t(t.att_tq * t.att_ks * t.att_ds) > rt_.device().max_work_group_size) {
    --t.att_ds;
  }
  auto local_bytes = [&] {
    const size_t lanes = size_t(t.att_ks - 1) * size_t(t.att_tq);
    const size_t partial_scores = t.att_ds > 1 ? size_t(t.att_tq * t.att_tk * t.att_ds) * 4 : 0;
    return (lanes + 2 * size_t(t.att_tk)) * size_t(c.head_dim) * 4 + lanes * 8 + partial_scores;
  };
  while (t.att_ks > 1 && local_bytes() > rt_.device().local_mem_bytes) {
    t.att_ks /= 2;
    while (t.att_tk % t.att_ks != 0) --t.att_ks;
  }
  // then fewer keys per tile (heads of 256: 64 KB of K and V at 32 keys)
  while (t.att_tk > 1 && local_bytes() > rt_.device().local_mem_bytes) t.att_tk /= 2;
  return t;
}

// embedding of the chunk: x[t] = token_embd[ids[id_off + t]]
ClPrefill::Step ClPrefill::embed_step() {
  const ModelConfig& c = config_;
  const DeviceMatrix& e = w_.token_embd;
  Step embed;
  embed.kernel = weight_kernel(e.type, "embed_rows");
  embed.global0 = size_t(c.n_embd);
  embed.local0 = elementwise_local(embed.global0, rt_.device().max_work_group_size);
  embed.local1 = 1;
  embed.label = "embed";
  const KernelArgs args = {{"wq", e.q},     {"ws", e.s},           {"n_in", cl_int(c.n_embd)},
                           {"ids", s_.ids}, {"id_off", cl_int(0)}, {"n_tok", cl_int(0)},
                           {"x", x_}};
  args.bind(embed.kernel);
  embed.arg_id_off = int(args.index("id_off"));
  embed.arg_n_tok = int(args.index("n_tok"));
  return embed;
}

// The full chunk's plan, and shorter ones where their tiles differ. H200,
// Llama-3.2-1B shape Q4_0, `clchat bench -p N -n 0 -d 512` (a chunk of 512,
// N tokens after 512 of context), against every chunk on the full plan:
// N = 23 6.1k tok/s against 4.2k, 64 15.6k against 11.6k, 128 29.5-29.8k
// against 22.0-22.1k, 256 49.1-49.4k against 42.7-43.3k, pp512 even; a
// 535-token chat turn's first token (512 + 23) 10.5-10.9 ms against
// 12.1-12.3.
void ClPrefill::build_steps() {
  // final norm of rows row0.. and lm_head, for run_logits (logits_ set later)
  head_steps_.clear();
  head_steps_.push_back(norm_step(x_, w_.output_norm.q, xn_, "output_norm"));
  short_plans_.clear();
  plan_tokens_ = chunk_;
  build_plan();
  // Only the tensor-core products choose their tiles by the token count.
  if (!tuning_.short_plans || matrix_products(Product::tensor_cores) == 0) return;
  std::vector<Step> full = std::move(steps_);
  std::vector<size_t> full_ends = std::move(layer_ends_);
  for (int tokens = chunk_ / 2; tokens >= k_short_plan_tokens; tokens /= 2) {
    plan_tokens_ = tokens;
    build_plan();
    if (same_launches(steps_, short_plans_.empty() ? full : short_plans_.back().steps)) continue;
    short_plans_.push_back({tokens, std::move(steps_), std::move(layer_ends_)});
  }
  plan_tokens_ = chunk_;
  steps_ = std::move(full);
  layer_ends_ = std::move(full_ends);
}

bool ClPrefill::same_launches(const std::vector<Step>& a, const std::vector<Step>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Step& x, const Step& y) {
    return x.global0 == y.global0 && x.local0 == y.local0 && x.local1 == y.local1 &&
           x.tokens_per_group == y.tokens_per_group && x.tile_defines == y.tile_defines &&
           x.split_sum == y.split_sum && x.product == y.product;
  });
}

void ClPrefill::build_plan() {
  steps_.clear();
  steps_.push_back(embed_step());
  if (config_.embed_scale != 1.0f) steps_.push_back(embed_scale_step());
  const PrefillTuning att_tuning = attention_tuning();
  layer_ends_.clear();
  for (int il = 0; il < config_.n_layer; ++il) {
    add_layer_steps(il, att_tuning);
    layer_ends_.push_back(steps_.size());
  }
}

// g = act(g) * u, act the model's (SiLU or GELU)
ClPrefill::Step ClPrefill::activation_step() {
  const ModelConfig& c = config_;
  const bool gelu = c.ffn_act == FfnActivation::GeluTanh;
  Step act = elementwise_step(gelu ? "gelu_mul" : "silu_mul", size_t(c.n_ff / glu_vec_),
                              gelu ? "gelu_mul" : "silu_mul");
  const KernelArgs args = {{"g", g_}, {"u", u_}, {"n", cl_int(c.n_ff)}, {"n_tok", cl_int(0)}};
  args.bind(act.kernel);
  act.arg_n_tok = int(args.index("n_tok"));
  return act;
}

// x *= sqrt(n_embd) (Gemma)
ClPrefill::Step ClPrefill::embed_scale_step() {
  Step scale = elementwise_step("scale_rows", size_t(config_.n_embd), "embed_scale");
  const KernelArgs args = {
      {"x", x_}, {"s", config_.embed_scale}, {"n", cl_int(config_.n_embd)}, {"n_tok", cl_int(0)}};
  args.bind(scale.kernel);
  scale.arg_n_tok = int(args.index("n_tok"));
  return scale;
}

ClPrefill::Step ClPrefill::elementwise_step(const char* name, size_t n, const char* label) {
  Step s;
  s.kernel = kernel("prefill_ops", ops_defines_, name);
  s.global0 = n;
  s.local0 = elementwise_local(n, rt_.device().max_work_group_size);
  s.local1 = 1;
  s.label = label;
  return s;
}

// The llama graph's RoPE: q -> q_, k and v -> cache at pos0 + t.
ClPrefill::Step ClPrefill::rope_step(int il, cl_ulong layer_off) {
  const ModelConfig& c = config_;
  Step rope = elementwise_step("rope_kv_rows", size_t(c.n_embd + 2 * c.n_embd_kv()) / 2, "rope_kv");
  const KernelArgs args = {{"qkv", qkv_},
                           {"n_tok", cl_int(0)},
                           {"n_embd", cl_int(c.n_embd)},
                           {"n_embd_kv", cl_int(c.n_embd_kv())},
                           {"head_dim", cl_int(c.head_dim)},
                           {"n_rot", cl_int(c.n_rot)},
                           {"rope_cs", w_.rope_table(il)},
                           {"pos0", cl_int(0)},
                           {"q", q_},
                           {"k_cache", s_.k_cache},
                           {"v_cache", s_.v_cache},
                           {"layer_off", layer_off}};
  args.bind(rope.kernel);
  rope.arg_n_tok = int(args.index("n_tok"));
  rope.arg_pos0 = int(args.index("pos0"));
  return rope;
}

// Any architecture's: per head, + bias, RMSNorm of q and k heads, RoPE of
// the model's style; q -> q_, k and v -> cache at pos0 + t.
ClPrefill::Step ClPrefill::head_step(int il, cl_ulong layer_off, const QkvLayout& in) {
  const ModelConfig& c = config_;
  const DeviceWeights::Layer& w = w_.layers[size_t(il)];
  static const ClMem k_none;
  Step head;
  head.kernel = kernel("prefill_ops", ops_defines_, "head_rows");
  head.global0 = size_t(c.n_head + 2 * c.n_head_kv) * size_t(tuning_.norm_wg);
  head.local0 = size_t(tuning_.norm_wg);
  head.local1 = 1;
  head.label = "head_rope_kv";
  const KernelArgs args = {{"qkv", *in.buffer},
                           {"ld", cl_int(in.ld)},
                           {"k_at", cl_int(in.k_at)},
                           {"v_at", cl_int(in.v_at)},
                           {"bias", w.qkv_bias.q ? w.qkv_bias.q : k_none},
                           {"n_tok", cl_int(0)},
                           {"n_head", cl_int(c.n_head)},
                           {"n_head_kv", cl_int(c.n_head_kv)},
                           {"head_dim", cl_int(c.head_dim)},
                           {"q_norm", w.q_norm.q ? w.q_norm.q : k_none},
                           {"k_norm", w.k_norm.q ? w.k_norm.q : k_none},
                           {"eps", c.rms_eps},
                           {"n_rot", cl_int(c.n_rot)},
                           {"neox", cl_int(c.rope_style == RopeStyle::Neox ? 1 : 0)},
                           {"rope_cs", w_.rope_table(il)},
                           {"pos0", cl_int(0)},
                           {"q_scale", c.q_scale()},
                           {"q", q_},
                           {"k_cache", s_.k_cache},
                           {"v_cache", s_.v_cache},
                           {"layer_off", layer_off},
                           {"ring", cl_int(s_.kv[size_t(il)].rows)}};
  args.bind(head.kernel);
  head.arg_n_tok = int(args.index("n_tok"));
  head.arg_pos0 = int(args.index("pos0"));
  return head;
}

// x += W in, or with post-norms x += rmsnorm(W in) * post_norm (through xn_,
// free by then).
void ClPrefill::add_residual_steps(const DeviceMatrix& w, const ClMem& in, int ld_in,
                                   const DeviceMatrix& post_norm, const char* label,
                                   const char* norm_label) {
  const int n_embd = config_.n_embd;
  if (!post_norm.q) {
    add_matmul(steps_, w, in, ld_in, x_, n_embd, 0, true, label);
    return;
  }
  add_matmul(steps_, w, in, ld_in, xn_, n_embd, 0, false, label);
  steps_.push_back(norm_step(xn_, post_norm.q, x_, norm_label, true));
}

void ClPrefill::add_layer_steps(int il, const PrefillTuning& att_tuning) {
  const ModelConfig& c = config_;
  const DeviceWeights::Layer& w = w_.layers[size_t(il)];
  const int n_q = c.n_embd_q(), n_qkv = n_q + 2 * c.n_embd_kv();
  const cl_ulong layer_off = s_.kv[size_t(il)].offset;
  // xn = rmsnorm(x) * attn_norm; qkv = [Wq; Wk; Wv] xn
  const bool qkv_mma = std::all_of(w.qkv.begin(), w.qkv.end(),
                                   [this](const DeviceMatrix& m) { return mma_weights(m); });
  steps_.push_back(qkv_mma ? norm_pack_step(w.attn_norm.q, w.qkv.front().type, "attn_norm")
                           : norm_step(x_, w.attn_norm.q, xn_, "attn_norm"));
  int row_base = 0;
  for (const DeviceMatrix& m : w.qkv) {
    add_matmul(steps_, m, xn_, c.n_embd, qkv_, n_qkv, row_base, false, "qkv");
    row_base += m.rows;
  }
  steps_.push_back(c.plain_llama()
                       ? rope_step(il, layer_off)
                       : head_step(il, layer_off, {&qkv_, n_qkv, n_q, n_q + c.n_embd_kv()}));
  steps_.push_back(attention_step(il, layer_off, att_tuning));
  // x += Wo att (post-norm'ed when the model has post-norms)
  add_residual_steps(w.wo, att_, n_q, w.post_attn_norm, "wo", "post_attn_norm");
  // h = act(Wg xn) * (Wu xn), xn = rmsnorm(x) * ffn_norm
  const bool ffn_mma = mma_weights(w.ffn_gate) && mma_weights(w.ffn_up);
  steps_.push_back(ffn_mma ? norm_pack_step(w.ffn_norm.q, w.ffn_gate.type, "ffn_norm")
                           : norm_step(x_, w.ffn_norm.q, xn_, "ffn_norm"));
  add_matmul(steps_, w.ffn_gate, xn_, c.n_embd, g_, c.n_ff, 0, false, "ffn_gate");
  add_matmul(steps_, w.ffn_up, xn_, c.n_embd, u_, c.n_ff, 0, false, "ffn_up");
  steps_.push_back(mma_weights(w.ffn_down) ? glu_pack_step(w.ffn_down.type) : activation_step());
  // x += Wd h (post-norm'ed when the model has post-norms)
  add_residual_steps(w.ffn_down, g_, c.n_ff, w.post_ffn_norm, "ffn_down", "post_ffn_norm");
}

// causal attention of the chunk against the cache (the layer's window)
ClPrefill::Step ClPrefill::attention_step(int il, cl_ulong layer_off,
                                          const PrefillTuning& att_tuning) {
  const ModelConfig& c = config_;
  Step att;
  att.global0 = size_t(c.n_head);
  att.local0 = 1;
  if (attention_mma_ok()) {
    att.kernel = kernel(k_att_mma_program, attention_mma_defines(c.head_dim), "attention_mma");
    att.local1 = size_t(k_att_mma_threads);
    att.tokens_per_group = k_att_mma_queries;
  } else {
    att.kernel = kernel("cpu_transpose+attention_prefill",
                        attention_defines(c.head_dim, att_tuning), "attention_prefill");
    att.local1 = att_tuning.att_direct ? 1
                                       : size_t(att_tuning.att_tq) * size_t(att_tuning.att_ks) *
                                             size_t(att_tuning.att_ds);
    att.tokens_per_group = att_tuning.att_tq;
  }
  att.label = "attention";
  const KernelArgs att_args = {{"q", q_},
                               {"k_cache", s_.k_cache},
                               {"v_cache", s_.v_cache},
                               {"layer_off", layer_off},
                               {"pos0", cl_int(0)},
                               {"n_tok", cl_int(0)},
                               {"n_head", cl_int(c.n_head)},
                               {"n_head_kv", cl_int(c.n_head_kv)},
                               {"window", cl_int(c.is_swa(il) ? c.sliding_window : 0)},
                               {"ring", cl_int(s_.kv[size_t(il)].rows)},
                               {"out", att_}};
  att_args.bind(att.kernel);
  att.arg_pos0 = int(att_args.index("pos0"));
  att.arg_n_tok = int(att_args.index("n_tok"));
  return att;
}

// ---- decode steps: one token of another architecture -------------------------

// out (+)= W @ (x, or rmsnorm(x) * norm_w): the decode plan's matvec kernels.
ClPrefill::Step ClPrefill::matvec_step(const DeviceMatrix& w, const ClMem& x, const ClMem* norm_w,
                                       bool accumulate, const ClMem& out, const char* label) {
  const KernelTuning& t = decode_programs_->tuning();
  Step s;
  s.kernel = decode_programs_->weight_kernel(w.type, "matvec");
  s.local0 = size_t(t.matvec_wg());
  s.global0 = ceil_div(size_t(w.rows), size_t(t.rows)) * s.local0;
  s.local1 = 1;
  s.label = label;
  matvec_args(w, x, norm_w, config_.rms_eps, accumulate, out).bind(s.kernel);
  return s;
}

// One position's attention over the cache (the decode plan's kernel, a
// work-group per head): a window's keys start at its first position's row
// and wrap at the end of the layer's ring (set per step by enqueue()).
ClPrefill::Step ClPrefill::decode_attention_step(int il, cl_ulong layer_off) {
  const ModelConfig& c = config_;
  const KernelTuning& t = decode_programs_->tuning();
  Step att;
  att.kernel = decode_programs_->attention_kernel();
  att.local0 = size_t(t.att_wg);
  att.global0 = size_t(c.n_head) * att.local0;
  att.local1 = 1;
  att.label = "attention";
  att.att_base = layer_off;
  att.att_window = c.is_swa(il) ? c.sliding_window : 0;
  att.att_ring = s_.kv[size_t(il)].rows;
  const KernelArgs args = attention_decode_args(c, s_, q_, s_.kv[size_t(il)], att_);
  args.bind(att.kernel);
  att.arg_att_off = int(args.index("layer_off"));
  att.arg_att_n = int(args.index("n_pos"));
  att.arg_att_wrap = int(args.index("wrap_at"));
  return att;
}

// x += W in, or x += rmsnorm(W in) * post_norm, as matvec steps.
void ClPrefill::add_decode_residual_steps(const DeviceMatrix& w, const ClMem& in,
                                          const DeviceMatrix& post_norm, const char* label,
                                          const char* norm_label) {
  if (!post_norm.q) {
    decode_steps_.push_back(matvec_step(w, in, nullptr, true, x_, label));
    return;
  }
  decode_steps_.push_back(matvec_step(w, in, nullptr, false, xn_, label));
  decode_steps_.push_back(norm_step(xn_, post_norm.q, x_, norm_label, true));
}

// q, k and v of one token: stacked [Wq; Wk; Wv] rows land contiguously in
// qkv1_; separate matrices write sub-buffers at offsets aligned for
// clCreateSubBuffer (CL_DEVICE_MEM_BASE_ADDR_ALIGN), head_rows reads them there.
void ClPrefill::build_decode_qkv() {
  const ModelConfig& c = config_;
  const int n_q = c.n_embd_q(), n_kv = c.n_embd_kv();
  cl_uint align_bits = 0;
  cl_check(clGetDeviceInfo(rt_.device().device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                           &align_bits, nullptr),
           "clGetDeviceInfo(CL_DEVICE_MEM_BASE_ADDR_ALIGN)");
  const int align = std::max(1, int(align_bits / 32));  // in floats
  auto round = [&](int n) { return (n + align - 1) / align * align; };
  split_k_at_ = round(n_q);
  split_v_at_ = round(split_k_at_ + n_kv);
  qkv1_ = rt_.alloc(size_t(std::max(split_v_at_ + n_kv, n_q + 2 * n_kv)) * 4);
  const int at[3] = {0, split_k_at_, split_v_at_}, len[3] = {n_q, n_kv, n_kv};
  for (int i = 0; i < 3; ++i) {
    const cl_buffer_region region{size_t(at[i]) * 4, size_t(len[i]) * 4};
    cl_int err = CL_SUCCESS;
    cl_mem sub = clCreateSubBuffer(qkv1_.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                   &region, &err);
    cl_check(err, "clCreateSubBuffer(qkv)");
    qkv1_parts_[size_t(i)] = ClMem(sub);
  }
}

void ClPrefill::build_decode_steps() {
  const ModelConfig& c = config_;
  build_decode_qkv();
  decode_steps_.push_back(embed_step());
  if (c.embed_scale != 1.0f) decode_steps_.push_back(embed_scale_step());
  const int n_q = c.n_embd_q(), n_kv = c.n_embd_kv();
  for (int il = 0; il < c.n_layer; ++il) {
    const DeviceWeights::Layer& w = w_.layers[size_t(il)];
    const cl_ulong layer_off = s_.kv[size_t(il)].offset;
    const size_t first_step = decode_steps_.size();
    // q, k, v = [Wq; Wk; Wv] rmsnorm(x) * attn_norm
    const bool stacked = w.qkv.size() == 1;
    for (size_t i = 0; i < w.qkv.size(); ++i) {
      decode_steps_.push_back(matvec_step(w.qkv[i], x_, &w.attn_norm.q, false,
                                          stacked ? qkv1_ : qkv1_parts_[i], "qkv"));
    }
    const QkvLayout in = stacked ? QkvLayout{&qkv1_, 0, n_q, n_q + n_kv}
                                 : QkvLayout{&qkv1_, 0, split_k_at_, split_v_at_};
    decode_steps_.push_back(head_step(il, layer_off, in));
    decode_steps_.push_back(decode_attention_step(il, layer_off));
    add_decode_residual_steps(w.wo, att_, w.post_attn_norm, "wo", "post_attn_norm");
    // h = act(Wg xn) * (Wu xn), xn = rmsnorm(x) * ffn_norm: in one launch
    // when gate and up share a type, else two and the activation.
    if (w.ffn_gate.type != w.ffn_up.type) {
      decode_steps_.push_back(matvec_step(w.ffn_gate, x_, &w.ffn_norm.q, false, g_, "ffn_gate"));
      decode_steps_.push_back(matvec_step(w.ffn_up, x_, &w.ffn_norm.q, false, u_, "ffn_up"));
      decode_steps_.push_back(activation_step());
      add_decode_residual_steps(w.ffn_down, g_, w.post_ffn_norm, "ffn_down", "post_ffn_norm");
      for (size_t i = first_step; i < decode_steps_.size(); ++i) decode_steps_[i].layer = il;
      continue;
    }
    const KernelTuning& t = decode_programs_->tuning();
    Step gate_up;
    gate_up.kernel = decode_programs_->weight_kernel(w.ffn_gate.type, "ffn_gate_up");
    gate_up.local0 = size_t(t.matvec_wg());
    gate_up.global0 = ceil_div(size_t(c.n_ff), size_t(t.rows)) * gate_up.local0;
    gate_up.local1 = 1;
    gate_up.label = "ffn_gate_up";
    bind_args(gate_up.kernel, {{"wq_gate", w.ffn_gate.q},
                               {"ws_gate", w.ffn_gate.s},
                               {"wq_up", w.ffn_up.q},
                               {"ws_up", w.ffn_up.s},
                               {"n_in", cl_int(c.n_embd)},
                               {"n_rows", cl_int(c.n_ff)},
                               {"x", x_},
                               {"norm_w", w.ffn_norm.q},
                               {"eps", c.rms_eps},
                               {"act", cl_int(c.ffn_act == FfnActivation::GeluTanh ? 1 : 0)},
                               {"h", g_}});
    decode_steps_.push_back(std::move(gate_up));
    add_decode_residual_steps(w.ffn_down, g_, w.post_ffn_norm, "ffn_down", "post_ffn_norm");
    for (size_t i = first_step; i < decode_steps_.size(); ++i) decode_steps_[i].layer = il;
  }
}

void ClPrefill::add_decode_profile(ProfileReport& into) {
  for (const auto& [step, ev] : decode_events_) {
    into.add(step->label, step->layer, event_device_us(ev));
  }
  decode_events_.clear();
}

cl_event ClPrefill::enqueue(Step& s, int n_tok, int pos0, int id_off, int row0, bool want_event) {
  if (s.arg_n_tok >= 0) set_arg(s.kernel.get(), cl_uint(s.arg_n_tok), cl_int(n_tok));
  if (s.arg_pos0 >= 0) set_arg(s.kernel.get(), cl_uint(s.arg_pos0), cl_int(pos0));
  if (s.arg_id_off >= 0) set_arg(s.kernel.get(), cl_uint(s.arg_id_off), cl_int(id_off));
  if (s.arg_row0 >= 0) set_arg(s.kernel.get(), cl_uint(s.arg_row0), cl_int(row0));
  if (s.arg_att_n >= 0) {  // one position, pos0: the window's positions first..pos0
    const int first = s.att_window > 0 ? std::max(0, pos0 + 1 - s.att_window) : 0;
    const int row = first % s.att_ring;  // then on, wrapping at the ring's end
    const cl_ulong off = s.att_base + cl_ulong(row) * cl_ulong(config_.n_embd_kv());
    set_arg(s.kernel.get(), cl_uint(s.arg_att_off), off);
    set_arg(s.kernel.get(), cl_uint(s.arg_att_n), cl_int(pos0 + 1 - first));
    set_arg(s.kernel.get(), cl_uint(s.arg_att_wrap), cl_int(s.att_ring - row));
  }
  if (s.local0 == 0 || s.local1 == 0) {
    throw std::logic_error(std::string("prefill step ") + s.label + " has no local size");
  }
  const size_t groups1 = ceil_div(size_t(n_tok), size_t(s.tokens_per_group));
  const size_t global[2] = {s.global0, groups1 * s.local1};
  const size_t local[2] = {s.local0, s.local1};
  cl_event ev = nullptr;
  cl_int err = fault::enqueue_error();  // CLCHAT_FAULT=enqueue, a test hook
  if (err == CL_SUCCESS) {
    err = clEnqueueNDRangeKernel(rt_.queue(), s.kernel.get(), 2, nullptr, global, local, 0, nullptr,
                                 profile_ || want_event ? &ev : nullptr);
  }
  if (ev && !want_event) events_.emplace_back(s.label, ClEvent(ev));
  if (err != CL_SUCCESS) {
    if (ev && want_event) clReleaseEvent(ev);
    throw ClError(
        std::string("enqueueing prefill kernel ") + s.label + " failed: " + cl_error_name(err),
        err);
  }
  return want_event ? ev : nullptr;
}

// One chunk: ids[id_off .. id_off + n_tok) at positions pos0.., all layers;
// the chunk's final hidden states are left in x_.
bool ClPrefill::enqueue_chunk(int id_off, int n_tok, int pos0, const std::function<bool()>& stop) {
  // The plan of the fewest tokens that holds the chunk.
  std::vector<Step>* steps = &steps_;
  const std::vector<size_t>* layer_ends = &layer_ends_;
  for (ShortPlan& p : short_plans_) {
    if (n_tok > p.tokens) break;
    steps = &p.steps;
    layer_ends = &p.layer_ends;
  }
  // With `stop`: after layer l is queued (with a marker), wait for layer
  // l - 1's marker and ask it; the device runs layer l meanwhile.
  ClEvent layer_before;
  auto end = layer_ends->begin();
  for (size_t i = 0; i < steps->size(); ++i) {
    enqueue((*steps)[i], n_tok, pos0, id_off, 0);
    if (!stop || end == layer_ends->end() || i + 1 != *end) continue;
    ++end;
    cl_event marker = nullptr;
    cl_check(clEnqueueMarkerWithWaitList(rt_.queue(), 0, nullptr, &marker),
             "clEnqueueMarkerWithWaitList(prefill layer)");
    ClEvent layer(marker);
    if (layer_before) {
      const cl_event wait = layer_before.get();
      cl_check(clWaitForEvents(1, &wait), "clWaitForEvents(prefill layer)");
      if (stop()) {
        rt_.finish();
        return false;
      }
    }
    layer_before = std::move(layer);
  }
  return true;
}

bool ClPrefill::run(int n_tokens, int pos, const ClMem& last_x, const std::function<bool()>& stop) {
  int n_chunk = 0;
  const bool one_by_one = n_tokens == 1 || chunk_ == 1;
  if (one_by_one && !decode_steps_.empty()) {  // decode steps, token by token
    for (int t = 0; t < n_tokens; ++t) {
      for (Step& st : decode_steps_) {
        cl_event ev = enqueue(st, 1, pos + t, t, 0, decode_profiling_);
        if (ev) decode_events_.emplace_back(&st, ClEvent(ev));
      }
    }
    n_chunk = 1;
  } else {
    for (int done = 0; done < n_tokens; done += n_chunk) {
      n_chunk = std::min(chunk_, n_tokens - done);
      if (!enqueue_chunk(done, n_chunk, pos + done, stop)) {
        events_.clear();  // a stopped run's profile is not reported
        return false;
      }
    }
    if (profile_) report_profile(n_tokens);
  }
  const size_t row_bytes = size_t(config_.n_embd) * 4;
  cl_check(clEnqueueCopyBuffer(rt_.queue(), x_.get(), last_x.get(), size_t(n_chunk - 1) * row_bytes,
                               0, row_bytes, 0, nullptr, nullptr),
           "clEnqueueCopyBuffer(prefill last hidden state)");
  return true;
}

// Device time per step label over the runs so far, to stderr (tuning aid:
// PrefillTuning::profile with a profiling queue: clchat bench --profile
// --tune profile=1).
void ClPrefill::report_profile(int n_tokens) {
  rt_.finish();
  std::vector<std::pair<std::string, double>> sums;
  double total = 0;
  for (const auto& [label, ev] : events_) {
    const double us = event_device_us(ev);
    auto it =
        std::find_if(sums.begin(), sums.end(), [&](const auto& p) { return p.first == label; });
    if (it == sums.end()) {
      sums.emplace_back(label, us);
    } else {
      it->second += us;
    }
    total += us;
  }
  std::fprintf(stderr, "prefill profile, %d tokens, %zu launches, %.1f us device time:\n", n_tokens,
               events_.size(), total);
  for (const auto& [label, us] : sums)
    std::fprintf(stderr, "  %-12s %9.1f us\n", label.c_str(), us);
  events_.clear();
}

void ClPrefill::run_logits(int n_tokens, int pos, int first_out, std::vector<float>& out) {
  const ModelConfig& c = config_;
  if (first_out < 0 || first_out >= n_tokens) {
    throw std::out_of_range("prefill_logits: first output " + std::to_string(first_out) +
                            " outside 0.." + std::to_string(n_tokens - 1));
  }
  if (!logits_) {
    // At most 128 MiB of logits at a time (Gemma's 262,144-token vocabulary
    // would take 512 MiB for a chunk of 512): the lm_head runs on the
    // wanted rows in groups of head_rows_.
    const size_t row_bytes = size_t(c.n_vocab) * 4;
    const size_t cap = std::min<size_t>(128u << 20, rt_.device().max_alloc_bytes);
    head_rows_ = int(std::clamp<size_t>(cap / row_bytes, 1, size_t(chunk_)));
    logits_ = rt_.alloc(size_t(head_rows_) * row_bytes);
    // (its tiles chosen for the rows it launches at most)
    plan_tokens_ = head_rows_;
    add_matmul(head_steps_, w_.head(), xn_, c.n_embd, logits_, c.n_vocab, 0, false, "lm_head");
    plan_tokens_ = chunk_;
  }
  const size_t row_floats = size_t(c.n_vocab);
  out.resize(size_t(n_tokens - first_out) * row_floats);
  int n_chunk = 0;
  for (int done = 0; done < n_tokens; done += n_chunk) {
    n_chunk = std::min(chunk_, n_tokens - done);
    enqueue_chunk(done, n_chunk, pos + done, nullptr);
    // rows of this chunk that are wanted: [row0, n_chunk)
    for (int row0 = std::max(0, first_out - done); row0 < n_chunk; row0 += head_rows_) {
      const int n_rows = std::min(head_rows_, n_chunk - row0);
      // xn[0..n_rows) = norm(x[row0..]), then the lm_head
      for (Step& s : head_steps_) enqueue(s, n_rows, 0, 0, row0);
      const size_t dst_row = size_t(done + row0 - first_out);
      cl_check(clEnqueueReadBuffer(rt_.queue(), logits_.get(), CL_TRUE, 0,
                                   size_t(n_rows) * row_floats * 4,
                                   out.data() + dst_row * row_floats, 0, nullptr, nullptr),
               "clEnqueueReadBuffer(prefill logits)");
    }
  }
}

}  // namespace clchat
