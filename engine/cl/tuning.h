// The OpenCL engine's tunables, typed: the multi-kernel decode plan
// (KernelTuning), the persistent decode kernel and lookahead (DecodeTuning),
// the batched prefill (PrefillTuning); Tuning holds the last two.
//
// for_device() gives a device's defaults (what measured best there); callers
// change fields after that (tests; `clchat bench --tune KEY=VALUE`, through
// tuning_keys()) and check() validates the result against the device, so a
// bad value is an error naming it, never a silent default. Nothing here reads
// the environment: the user's switches arrive as EngineSwitches
// (engine/messages.h: the [engine] table of the config file and the --no-*
// flags).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cl/runtime.h"
#include "engine/messages.h"

namespace clchat {

// The multi-kernel decode plan's programs (engine/cl/programs.h).
struct KernelTuning {
  int tpr = 8;          // work-items per matrix row (power of two)
  int rows = 4;         // rows per work-group (even)
  int att_wg = 128;     // attention work-group size (power of two)
  int argmax_wg = 256;  // argmax work-group size (power of two)
  // Sampling chain (kernels/sample.cl) work-group size (power of two); 1 on
  // CPU devices, where a work-group runs serially and 1 needs no atomics.
  int sample_wg = 256;
  std::string build_options = "-cl-std=CL1.2 -cl-mad-enable -cl-fast-relaxed-math";
  // NVIDIA only: warp-shuffle reductions through inline PTX (no extension
  // needed); kept only if the start-up self-test passes and a matvec
  // work-group is whole warps (ClPrograms). false: the portable path.
  bool nv_shfl = false;
  // CPU devices: kernels/matvec_cpu.cl (whole rows per work-item, wide
  // vectors, no barriers in the row loops) instead of matvec.cl when
  // tpr == 1, attention_cpu.cl and argmax_cpu.cl (serial per work-group);
  // each active matvec work-item computes cpu_nr rows (even; set to 2 when
  // it does not divide rows).
  bool cpu_kernels = false;
  int cpu_nr = 2;
  // CPU kernels: the attention folded into qkv_rope and the argmax into the
  // lm_head (32 launches fewer per SmolLM2 token). false: apart.
  bool cpu_fuse = true;
  // Tests: matvec_cpu.cl without its x86 builtin (F16C).
  bool cpu_portable = false;

  int matvec_wg() const { return tpr * rows; }
  // GPUs: several work-items per row, coalesced block loads. CPUs (PoCL): one
  // work-item per row, which PoCL vectorizes across rows.
  static KernelTuning for_device(const DeviceInfo& device);
  // Throws std::invalid_argument naming the values the device cannot take;
  // fits cpu_nr to rows.
  void check(const DeviceInfo& device);
};

// A decode step: the plan's kernels, and the persistent kernel
// (engine/cl/persistent_decode.h) that runs a whole token as one launch.
struct DecodeTuning {
  KernelTuning plan;
  // One launch per token where eligible (NVIDIA, x86-64 CPU devices; after
  // self-tests). false: always the multi-kernel plan.
  bool persistent = true;
  // Greedy decoding on the persistent path enqueues the next steps before
  // the host asks for them (ClForward::k_lookahead). false: one at a time.
  bool lookahead = true;
  // NVIDIA: work-items per persistent work-group, 256 or 512; 0: 512 first,
  // then 256 (the kernel's registers decide). CPU devices: 2, ignored.
  int persist_wg_size = 0;
  // Persistent work-groups per compute unit; 0: the shape's own (NVIDIA 1
  // of 512, else 2 then 1 of 256; CPU 1 per core).
  int persist_wgs_per_cu = 0;
  // Persistent work-groups in all (tests use a few, so that every stage
  // gives a warp several rows); 0: per compute unit. Wins over the above.
  int persist_groups = 0;
  // Positions per attention split of the persistent kernels; 0: the
  // kernel's default (NVIDIA 128, CPU devices 64).
  int att_split_pos = 0;
  // The persistent kernel's clock after every barrier on every token; the
  // per-stage sums are logged when the decoder is destroyed.
  bool trace = false;
  // Extra build options of the persistent kernel, for A/B runs of kernel
  // variants in one build (e.g. "-DATT_SPLIT_POS=64 -cl-nv-verbose"); logged.
  std::string persist_defines;

  static DecodeTuning for_device(const DeviceInfo& device);
  void check(const DeviceInfo& device);
};

// The batched prefill (engine/cl/prefill.h): kernels/matmul.cl,
// matmul_mma_deq.cl, attention_prefill.cl, prefill_ops.cl.
struct PrefillTuning {
  int mm_vr = 4;    // matmul rows per work-item, as one vector (1, 2, 4, 8, 16)
  int mm_nr = 16;   // matmul work-items along rows
  int mm_wt = 4;    // matmul tokens per work-item
  int mm_nt = 16;   // matmul work-items along tokens
  int att_tq = 16;  // attention queries per work-group
  int att_tk = 32;  // attention keys per local-memory tile
  int att_ks = 8;   // attention work-items per query (key lanes; att_tk a multiple)
  // attention work-items per (query, key lane), each with head_dim / att_ds
  // of q and o (dim lanes); 0: as ClPrefill::attention_tuning chooses (it
  // then also shortens att_tk for heads of 256 on GPUs)
  int att_ds = 0;
  int norm_wg = 64;  // rmsnorm_rows work-group (power of two)
  // attention without local memory or barriers, att_tq queries per
  // work-item walking the keys in tiles of att_tk (attention_prefill.cl, CPU
  // variant; att_ks and att_ds then 1)
  bool att_direct = false;
  // matmul without local memory, vectorized along k (matmul.cl, CPU variant);
  // then mm_vr may be any row count.
  bool mm_direct = false;
  // Matmuls of Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights (Q5_0 is Q8_0 on CPU
  // devices) through kernels/matmul_x16.cl: the activations quantized to
  // 16-bit integers per 32 values first, then integer dot products;
  // x16_vr rows x x16_tg groups of 8 tokens per work-item. CPU devices (x86
  // with AVX2 runs it as vpmaddwd).
  bool mm_x16 = false;
  int x16_vr = 1, x16_tg = 4;
  // NVIDIA only: quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
  // Q5_K, Q6_K) through kernels/matmul_mma_deq.cl (tensor-core mma.sync by
  // inline PTX: the weights dequantized to fp16 in registers, x as fp16
  // scaled per token, fp32 sums), after ClPrefill's self-test per weight
  // type; false or a failed self-test: the portable kernel. Tile: mma_wr x
  // mma_wn warps, each mma_mi x 16 rows by mma_nj x 8 tokens; mma_kb quant
  // blocks per stage, copied by cp.async mma_stages - 1 stages ahead into a
  // ring of mma_stages buffers; mma_fit: fewer warps along rows for matrices
  // whose grid would not cover the device (measured slower on the H200 at
  // pp512: off); mma_widen: twice mma_nj for matrices whose grid then still
  // has 1.4 work-groups per compute unit. Defaults: the best measured on
  // the H200 at pp512, Llama-3.2-1B shape Q4_0 (2026-11-29): 51.2k tok/s;
  // 8 warps of 1 x 16 rows 48.6k, 2 warps of 4 x 16 rows 40.9k (with the
  // integer kernel before it), 2 warps along tokens 49.6k, mma_kb 2 48.4k,
  // mma_stages 2 / 4 50.9k / 46.4k, not widened 47.5k.
  bool tensor_cores = false;
  // NVIDIA, with tensor_cores: the chunk's attention through
  // kernels/attention_mma.cl (heads of 64 or 128, after its self-test).
  bool att_mma = true;
  int mma_mi = 2, mma_nj = 4, mma_wr = 4, mma_wn = 1, mma_kb = 4;
  int mma_stages = 3;  // buffers of the copy ring (2-4; one fewer in flight)
  bool mma_fit = false;
  bool mma_widen = true;
  // Split-K for matrices that mma_widen leaves narrow (their widened grid
  // would have under 1.4 work-groups per compute unit): the widened tile
  // with each row tile's stages over up to mma_split work-groups (1-4; 1:
  // off), as few as bring the grid to 1.4 per unit, each split at least
  // 4 stages long, the shares added by mma_split_sum. H200 pp512
  // (2026-11-30), mma_split 1 / 2 / 3 / 4: Llama-3.2-1B shape Q4_0 67.1k /
  // 72.0-72.5k / 72.1-72.5k / 72.5-72.8k, SmolLM2-1.7B 44.7k / 48.4-48.6k /
  // 48.6-48.8k / 48.8k, SmolLM2-360M (split from 3) 90.6-91.6k / 91.1-91.3k
  // / 90.7-91.4k / 88.4-88.6k, 135M (never split) unchanged.
  int mma_split = 2;
  // The large tile (4 x 2 warps, each 64 rows x 64 tokens: 256 x 128, twice
  // the default warp's reuse of each fragment it loads; or of 48 rows: 192 x
  // 128; large_tile) for matrices whose grid, split over K into up to
  // mma_large work-groups, fills its waves of compute units to 95% (0:
  // never); it sets its own mma_mi, mma_nj, mma_wr, mma_wn (and, unsplit,
  // mma_kb and mma_stages). H200 pp512, mma_large 1 /
  // 2 / 4 (before large_tile's unsplit stages): 1B 77.8-78.2k /
  // 77.7-78.2k / 78.0-78.4k, 1.7B 52.1k / 52.2-52.4k / 52.7-53.1k.
  int mma_large = 4;
  // NVIDIA, with tensor_cores: chunks of at most chunk / 2, chunk / 4 .. 32
  // tokens run on tiles chosen for that many (ClPrefill::build_steps).
  bool short_plans = true;
  // Device time per prefill step, summed over each prefill, to stderr (needs
  // a profiling queue: clchat bench --profile).
  bool profile = false;

  int tile_rows() const { return mm_vr * mm_nr; }
  int tile_tokens() const { return mm_wt * mm_nt; }
  int mma_tile_rows() const { return mma_wr * mma_mi * 16; }
  int mma_tile_tokens() const { return mma_wn * mma_nj * 8; }
  int mma_threads() const { return mma_wr * mma_wn * 32; }
  // This tuning with mma_large's tile, for a product split over K into
  // `split` work-groups: unsplit, stages of 2 blocks in a ring of 4 (H200,
  // 1B gate and up: 1,163 / 1,138 us a chunk against 1,254 / 1,187 with
  // this tuning's 4 in a ring of 3; a ring of 3: pp512 1B 80.6k / 80.6k
  // against 81.4k / 80.4k, 1.7B 54.3k / 54.2k against 54.4k / 54.4k);
  // split, this tuning's stages.
  // warp_m16: m16 tiles a warp along rows (4: 256 rows; 3: 192, for
  // matrices whose row count fills the device with it and not with 256).
  PrefillTuning large_tile(int split, int warp_m16 = 4) const {
    PrefillTuning t = *this;
    t.mma_mi = warp_m16;
    t.mma_nj = 8;
    t.mma_wr = 4;
    t.mma_wn = 2;
    if (split == 1) {
      t.mma_kb = 2;
      t.mma_stages = 4;
    }
    return t;
  }
  // GPUs: 16 x 16 work-items with 4 x 4 register tiles (64 x 64 outputs per
  // work-group). CPUs: the direct variant, 1 row x 12 tokens per work-item.
  static PrefillTuning for_device(const DeviceInfo& device);
  void check(const DeviceInfo& device) const;
};

struct Tuning {
  DecodeTuning decode;
  PrefillTuning prefill;

  // The device's defaults with the user's switches applied.
  static Tuning for_device(const DeviceInfo& device, const EngineSwitches& switches = {});
  void check(const DeviceInfo& device);
};

// One tuning field by name, for `clchat bench --tune KEY=VALUE` and the
// tests: set() parses VALUE (throws std::invalid_argument saying what is
// wrong), get() prints the field as set() reads it back.
struct TuningKey {
  std::string_view name;
  std::string_view type;  // "int", "bool" (0/1, true/false) or "string"
  std::string_view help;
  std::function<void(Tuning&, std::string_view)> set;
  std::function<std::string(const Tuning&)> get;
};

// Every field of DecodeTuning (its plan's included) and PrefillTuning.
const std::vector<TuningKey>& tuning_keys();
// "KEY=VALUE" -> the field; throws std::invalid_argument for an unknown key,
// a missing '=' or a value of the wrong type.
void set_tuning(Tuning& tuning, std::string_view key_value);

}  // namespace clchat
