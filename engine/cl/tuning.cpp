// Per-device defaults of the tunables, their validation, and the table that
// names every field (tuning.h).
#include "engine/cl/tuning.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <type_traits>

namespace clchat {

namespace {

bool is_nvidia(const DeviceInfo& device) {
  return device.platform_name.find("NVIDIA") != std::string::npos;
}

bool pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

KernelTuning KernelTuning::for_device(const DeviceInfo& device) {
  KernelTuning t;
  if (device.is_cpu) {
    t.tpr = 1;
    // matvec_cpu.cl: a work-group quantizes x once for its rows (16-bit
    // activations); 128 rows against 32: Gemma 3 270M tg32 57-61 against
    // 44-50, the SmolLM2 plan 113-114 against 83-89 (2-core VM, 2026-11-27).
    t.rows = 128;
    t.att_wg = 64;
    t.argmax_wg = 64;
    t.sample_wg = 1;
    t.cpu_kernels = true;
    t.cpu_nr = 4;  // 4 rows per item beat 2 (gate_up 213 -> 179 us)
  }
  if (size_t(t.argmax_wg) > device.max_work_group_size) t.argmax_wg = 64;
  if (size_t(t.sample_wg) > device.max_work_group_size) t.sample_wg = 64;
  t.nv_shfl = is_nvidia(device);
  return t;
}

void KernelTuning::check(const DeviceInfo& device) {
  if (!pow2(tpr) || rows < 2 || rows % 2 != 0 || !pow2(att_wg) ||
      size_t(matvec_wg()) > device.max_work_group_size ||
      size_t(att_wg) > device.max_work_group_size) {
    throw std::invalid_argument("invalid kernel tuning (tpr " + std::to_string(tpr) + ", rows " +
                                std::to_string(rows) + ", att_wg " + std::to_string(att_wg) +
                                ") for " + device.name);
  }
  if (!pow2(argmax_wg) || size_t(argmax_wg) > device.max_work_group_size) {
    throw std::invalid_argument("invalid argmax work-group " + std::to_string(argmax_wg) + " for " +
                                device.name);
  }
  if (!pow2(sample_wg) || size_t(sample_wg) > device.max_work_group_size) {
    throw std::invalid_argument("invalid sampling work-group " + std::to_string(sample_wg) +
                                " for " + device.name);
  }
  if (cpu_kernels && (cpu_nr < 2 || cpu_nr % 2 != 0)) {
    throw std::invalid_argument("invalid CPU kernel tuning (cpu_nr " + std::to_string(cpu_nr) +
                                ")");
  }
  if (rows % cpu_nr != 0) cpu_nr = 2;  // rows is even
  if (tpr > 32) nv_shfl = false;       // a row's work-items must fit one warp
}

DecodeTuning DecodeTuning::for_device(const DeviceInfo& device) {
  DecodeTuning t;
  t.plan = KernelTuning::for_device(device);
  return t;
}

void DecodeTuning::check(const DeviceInfo& device) {
  plan.check(device);
  if (persist_wg_size != 0 && persist_wg_size != 256 && persist_wg_size != 512) {
    throw std::invalid_argument("invalid persistent work-group size " +
                                std::to_string(persist_wg_size) + " (256, 512, or 0: both)");
  }
  if (persist_wgs_per_cu < 0 || persist_groups < 0 || att_split_pos < 0) {
    throw std::invalid_argument("invalid persistent kernel tuning (persist_wgs_per_cu " +
                                std::to_string(persist_wgs_per_cu) + ", persist_groups " +
                                std::to_string(persist_groups) + ", att_split_pos " +
                                std::to_string(att_split_pos) + "): 0 or more");
  }
}

PrefillTuning PrefillTuning::for_device(const DeviceInfo& device) {
  PrefillTuning t;
  if (device.is_cpu) {
    // 1 row x 12 tokens = 12 float8 accumulators + the weights + x (AVX2 has
    // 16 registers); measured best of 1x8, 1x12, 2x4, 2x6, 3x4, 4x3 on PoCL.
    t.mm_direct = true;
    t.mm_vr = 1;
    t.mm_nr = 16;
    t.mm_wt = 12;
    t.mm_nt = 1;
    t.mm_x16 = true;
    t.att_tq = 16;
    t.att_tk = 32;
    t.att_ks = 1;  // PoCL: one work-item per query already fills the cores
    t.att_direct = true;
    t.norm_wg = 16;
  }
  // Tensor cores through inline PTX: NVIDIA's OpenCL only (still subject to
  // the per-type self-test in ClPrefill::mma_ok).
  t.tensor_cores = is_nvidia(device);
  while (size_t(t.norm_wg) > device.max_work_group_size) t.norm_wg /= 2;
  return t;
}

void PrefillTuning::check(const DeviceInfo& device) const {
  if (mma_mi < 1 || mma_nj < 1 || mma_wr < 1 || mma_wn < 1 || mma_kb < 1 || mma_stages < 2 ||
      mma_stages > 4 || mma_split < 1 || mma_split > 4 || mma_large < 0 || mma_large > 4 ||
      size_t(mma_threads()) > device.max_work_group_size) {
    throw std::invalid_argument(
        "invalid MMA prefill tuning (mma_mi " + std::to_string(mma_mi) + ", mma_nj " +
        std::to_string(mma_nj) + ", mma_wr " + std::to_string(mma_wr) + ", mma_wn " +
        std::to_string(mma_wn) + ", mma_kb " + std::to_string(mma_kb) + ", mma_stages " +
        std::to_string(mma_stages) + ", mma_split " + std::to_string(mma_split) + ", mma_large " +
        std::to_string(mma_large) + ")");
  }
  const bool vr_ok = (mm_direct && mm_vr >= 1 && mm_vr <= 16) || mm_vr == 1 || mm_vr == 2 ||
                     mm_vr == 4 || mm_vr == 8 || mm_vr == 16;
  const size_t max_wg = device.max_work_group_size;
  if (!vr_ok || mm_nr < 1 || mm_wt < 1 || mm_nt < 1 || att_tq < 1 || att_tk < 1 ||
      size_t(mm_nr) * size_t(mm_nt) > max_wg || att_ks < 1 || att_tk % att_ks != 0 || att_ds < 0 ||
      size_t(att_tq) * size_t(att_ks) * size_t(std::max(att_ds, 1)) > max_wg) {
    throw std::invalid_argument("invalid prefill tuning (mm_vr " + std::to_string(mm_vr) +
                                ", mm_nr " + std::to_string(mm_nr) + ", mm_wt " +
                                std::to_string(mm_wt) + ", mm_nt " + std::to_string(mm_nt) +
                                ", att_tq " + std::to_string(att_tq) + ", att_tk " +
                                std::to_string(att_tk) + ", att_ks " + std::to_string(att_ks) +
                                ", att_ds " + std::to_string(att_ds) + ") for " + device.name);
  }
  // The CPU attention kernel keeps att_tq queries and a tile of att_tk keys
  // in private arrays (a work-item's stack on PoCL): 64 x 256 at most.
  if (att_direct && (att_tq > 64 || att_tk > 256)) {
    throw std::invalid_argument("invalid prefill attention tuning (att_tq " +
                                std::to_string(att_tq) + ", att_tk " + std::to_string(att_tk) +
                                "): with att_direct at most 64 queries and 256 keys");
  }
  if (x16_vr < 1 || x16_vr > 8 || x16_tg < 1 || x16_tg > 8) {
    throw std::invalid_argument("invalid 16-bit prefill tuning (x16_vr " + std::to_string(x16_vr) +
                                ", x16_tg " + std::to_string(x16_tg) + "): 1 to 8 each");
  }
  if (!pow2(norm_wg) || size_t(norm_wg) > max_wg) {
    throw std::invalid_argument("invalid prefill norm work-group " + std::to_string(norm_wg) +
                                " for " + device.name);
  }
}

Tuning Tuning::for_device(const DeviceInfo& device, const EngineSwitches& switches) {
  Tuning t{DecodeTuning::for_device(device), PrefillTuning::for_device(device)};
  t.decode.persistent = switches.persistent_decode;
  t.decode.lookahead = switches.lookahead;
  t.prefill.tensor_cores = t.prefill.tensor_cores && switches.tensor_cores;
  return t;
}

void Tuning::check(const DeviceInfo& device) {
  decode.check(device);
  prefill.check(device);
}

// ---- the table of keys ------------------------------------------------------

namespace {

[[noreturn]] void bad_value(std::string_view key, std::string_view value, const char* want) {
  throw std::invalid_argument("--tune " + std::string(key) + ": '" + std::string(value) +
                              "' is not " + want);
}

void parse_value(std::string_view key, std::string_view v, int& out) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) bad_value(key, v, "an integer");
  out = x;
}
void parse_value(std::string_view key, std::string_view v, bool& out) {
  if (v == "1" || v == "true") {
    out = true;
  } else if (v == "0" || v == "false") {
    out = false;
  } else {
    bad_value(key, v, "a boolean (0, 1, false, true)");
  }
}
void parse_value(std::string_view, std::string_view v, std::string& out) { out = std::string(v); }

std::string format_value(int v) { return std::to_string(v); }
std::string format_value(bool v) { return v ? "1" : "0"; }
std::string format_value(const std::string& v) { return v; }

template <typename V>
constexpr std::string_view type_name() {
  if constexpr (std::is_same_v<V, int>) return "int";
  if constexpr (std::is_same_v<V, bool>) return "bool";
  return "string";
}

// A key whose field is `field(tuning)`.
template <typename V>
TuningKey key(std::string_view name, std::string_view help, V& (*field)(Tuning&)) {
  return {name, type_name<V>(), help,
          [name, field](Tuning& t, std::string_view v) { parse_value(name, v, field(t)); },
          [field](const Tuning& t) { return format_value(field(const_cast<Tuning&>(t))); }};
}

using T = Tuning;

}  // namespace

const std::vector<TuningKey>& tuning_keys() {
  static const std::vector<TuningKey> keys = {
      // the multi-kernel decode plan
      key<int>("tpr", "plan: work-items per matrix row (power of two)",
               [](T& t) -> int& { return t.decode.plan.tpr; }),
      key<int>("rows", "plan: matrix rows per work-group (even)",
               [](T& t) -> int& { return t.decode.plan.rows; }),
      key<int>("att_wg", "plan: attention work-group size (power of two)",
               [](T& t) -> int& { return t.decode.plan.att_wg; }),
      key<int>("argmax_wg", "plan: argmax work-group size (power of two)",
               [](T& t) -> int& { return t.decode.plan.argmax_wg; }),
      key<int>("sample_wg", "sampling chain work-group size (power of two)",
               [](T& t) -> int& { return t.decode.plan.sample_wg; }),
      key<std::string>("build_options", "plan and persistent kernel: OpenCL build options",
                       [](T& t) -> std::string& { return t.decode.plan.build_options; }),
      key<bool>("nv_shfl", "plan: NVIDIA warp-shuffle reductions (after a self-test)",
                [](T& t) -> bool& { return t.decode.plan.nv_shfl; }),
      key<bool>("cpu_kernels", "plan: the CPU devices' kernels (matvec_cpu.cl, ...)",
                [](T& t) -> bool& { return t.decode.plan.cpu_kernels; }),
      key<int>("cpu_nr", "plan: CPU kernels' rows per work-item (even)",
               [](T& t) -> int& { return t.decode.plan.cpu_nr; }),
      key<bool>("cpu_fuse", "plan: CPU kernels fold attention and argmax into matvecs",
                [](T& t) -> bool& { return t.decode.plan.cpu_fuse; }),
      key<bool>("cpu_portable", "plan: CPU kernels without x86 builtins",
                [](T& t) -> bool& { return t.decode.plan.cpu_portable; }),
      // the persistent decode kernel
      key<bool>("persistent", "one persistent-kernel launch per decode step where eligible",
                [](T& t) -> bool& { return t.decode.persistent; }),
      key<bool>("lookahead", "greedy steps enqueued ahead on the persistent path",
                [](T& t) -> bool& { return t.decode.lookahead; }),
      key<int>("persist_wg_size", "persistent work-group size on NVIDIA: 256, 512; 0: both",
               [](T& t) -> int& { return t.decode.persist_wg_size; }),
      key<int>("persist_wgs_per_cu", "persistent work-groups per compute unit; 0: the shape's",
               [](T& t) -> int& { return t.decode.persist_wgs_per_cu; }),
      key<int>("persist_groups", "persistent work-groups in all; 0: per compute unit",
               [](T& t) -> int& { return t.decode.persist_groups; }),
      key<int>("att_split_pos", "persistent attention: positions per split; 0: the kernel's",
               [](T& t) -> int& { return t.decode.att_split_pos; }),
      key<bool>("trace", "persistent kernel: per-stage times of every token, logged at exit",
                [](T& t) -> bool& { return t.decode.trace; }),
      key<std::string>("persist_defines", "persistent kernel: extra build options (logged)",
                       [](T& t) -> std::string& { return t.decode.persist_defines; }),
      // the batched prefill
      key<int>("mm_vr", "prefill matmul: rows per work-item (1, 2, 4, 8, 16)",
               [](T& t) -> int& { return t.prefill.mm_vr; }),
      key<int>("mm_nr", "prefill matmul: work-items along rows",
               [](T& t) -> int& { return t.prefill.mm_nr; }),
      key<int>("mm_wt", "prefill matmul: tokens per work-item",
               [](T& t) -> int& { return t.prefill.mm_wt; }),
      key<int>("mm_nt", "prefill matmul: work-items along tokens",
               [](T& t) -> int& { return t.prefill.mm_nt; }),
      key<bool>("mm_direct", "prefill matmul: no local memory, vectorized along k",
                [](T& t) -> bool& { return t.prefill.mm_direct; }),
      key<bool>("mm_x16",
                "prefill matmul: 16-bit integer activations (Q4-Q8 and K-quants but Q2_K, Q3_K)",
                [](T& t) -> bool& { return t.prefill.mm_x16; }),
      key<int>("x16_vr", "16-bit prefill matmul: rows per work-item (1..8)",
               [](T& t) -> int& { return t.prefill.x16_vr; }),
      key<int>("x16_tg", "16-bit prefill matmul: groups of 8 tokens per work-item (1..8)",
               [](T& t) -> int& { return t.prefill.x16_tg; }),
      key<int>("att_tq", "prefill attention: queries per work-group",
               [](T& t) -> int& { return t.prefill.att_tq; }),
      key<int>("att_tk", "prefill attention: keys per local-memory tile",
               [](T& t) -> int& { return t.prefill.att_tk; }),
      key<int>("att_ks", "prefill attention: work-items per query (divides att_tk)",
               [](T& t) -> int& { return t.prefill.att_ks; }),
      key<int>("att_ds", "prefill attention: dim lanes per query and key lane (0: by head size)",
               [](T& t) -> int& { return t.prefill.att_ds; }),
      key<bool>("att_direct", "prefill attention: no local memory, att_tq queries per work-item",
                [](T& t) -> bool& { return t.prefill.att_direct; }),
      key<int>("norm_wg", "prefill rmsnorm work-group (power of two)",
               [](T& t) -> int& { return t.prefill.norm_wg; }),
      key<bool>("tensor_cores", "prefill: NVIDIA tensor-core matmul (after a self-test)",
                [](T& t) -> bool& { return t.prefill.tensor_cores; }),
      key<bool>("att_mma", "prefill attention on tensor cores (NVIDIA; heads of 64, 128)",
                [](T& t) -> bool& { return t.prefill.att_mma; }),
      key<int>("mma_mi", "tensor-core tile: 16-row blocks per warp (not the large tile's)",
               [](T& t) -> int& { return t.prefill.mma_mi; }),
      key<int>("mma_nj", "tensor-core tile: 8-token blocks per warp (not the large tile's)",
               [](T& t) -> int& { return t.prefill.mma_nj; }),
      key<int>("mma_wr", "tensor-core tile: warps along rows (not the large tile's)",
               [](T& t) -> int& { return t.prefill.mma_wr; }),
      key<int>("mma_wn", "tensor-core tile: warps along tokens (not the large tile's)",
               [](T& t) -> int& { return t.prefill.mma_wn; }),
      key<int>("mma_kb", "tensor-core tile: quant blocks per stage (split large tile too)",
               [](T& t) -> int& { return t.prefill.mma_kb; }),
      key<int>("mma_stages", "tensor cores: buffers of the copy ring (2-4; split large tile too)",
               [](T& t) -> int& { return t.prefill.mma_stages; }),
      key<bool>("mma_fit", "tensor cores: fewer row warps until the grid covers the device",
                [](T& t) -> bool& { return t.prefill.mma_fit; }),
      key<bool>("mma_widen", "tensor cores: twice mma_nj where the grid keeps 1.4 groups per unit",
                [](T& t) -> bool& { return t.prefill.mma_widen; }),
      key<int>("mma_split", "tensor cores: most work-groups a row tile's stages split over (1-4)",
               [](T& t) -> int& { return t.prefill.mma_split; }),
      key<int>("mma_large",
               "tensor cores: 256 or 192 x 128 tiles where split-K up to this fills whole waves "
               "(0-4; 0: off)",
               [](T& t) -> int& { return t.prefill.mma_large; }),
      key<bool>("short_plans", "tensor cores: tiles chosen for a short chunk's length",
                [](T& t) -> bool& { return t.prefill.short_plans; }),
      key<bool>("profile", "prefill: per-step device times to stderr (needs --profile)",
                [](T& t) -> bool& { return t.prefill.profile; }),
  };
  return keys;
}

void set_tuning(Tuning& tuning, std::string_view key_value) {
  const size_t eq = key_value.find('=');
  if (eq == std::string_view::npos) {
    throw std::invalid_argument("--tune " + std::string(key_value) + ": expected KEY=VALUE");
  }
  const std::string_view name = key_value.substr(0, eq);
  for (const TuningKey& k : tuning_keys()) {
    if (k.name == name) {
      k.set(tuning, key_value.substr(eq + 1));
      return;
    }
  }
  throw std::invalid_argument("--tune: unknown key '" + std::string(name) +
                              "' (--tune help lists the keys)");
}

}  // namespace clchat
