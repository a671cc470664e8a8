// Batched prompt prefill on OpenCL: the tokens of a prompt go through the
// model a chunk at a time (ClForwardOptions::prefill_chunk, default 512), the
// projections and the FFN as matrix-matrix products (kernels/matmul.cl), the
// attention of the chunk against the KV cache in one launch per layer
// (kernels/attention_prefill.cl). Per chunk, in model order:
//   embed_rows -> per layer: rmsnorm_rows -> matmul [Wq;Wk;Wv] -> rope_kv_rows
//   (q out, k and v appended to the cache) -> attention_prefill ->
//   matmul Wo (+= residual) -> rmsnorm_rows -> matmul Wg, matmul Wu ->
//   silu_mul -> matmul Wd (+= residual)
// That is 9 launches per layer (11 when Wq, Wk, Wv differ in type) + 1.
// Other architectures (ModelConfig::plain_llama() false) take the general
// steps (a few more launches per layer): scale_rows after the embedding, head_rows (biases, q/k
// head norms, NeoX or adjacent RoPE, the layer's RoPE table) for rope_kv_rows, the layer's window
// in attention_prefill, gelu_mul for silu_mul, and Wo and Wd into scratch followed by a post-norm
// added to the residual. ClForward runs their decode steps here too, one token at a time.
//
// It reads the weights (DeviceWeights) and the token ids and fills the KV
// cache of the decode state (DecodeState), both ClForward's, which must
// outlive it; ClPrefill owns only its kernels and its chunk-sized scratch. It
// shares ClForward's in-order queue and never waits, except to read logits
// back.
//
// After run(), the last position's hidden state (before the final norm) is in
// the caller's buffer, so ClForward's own lm_head + argmax launches can follow:
// only that one position goes through the lm_head. run_logits() instead
// computes the logits of every position from `first_out` on (perplexity).
//
// Tunables (kernels/matmul.cl, attention_prefill.cl): PrefillTuning
// (engine/cl/tuning.h), defaults per device type.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/cl/decode_state.h"
#include "engine/cl/programs.h"
#include "engine/cl/runtime.h"
#include "engine/cl/tuning.h"
#include "engine/cl/weights.h"
#include "engine/forward_reports.h"
#include "engine/model/model.h"

namespace clchat {

class ClPrefill {
 public:
  // `rt`, `w` and `s` must outlive this object. `build_options` are the
  // engine's common ones (-cl-std=..., fast math). With `decode_programs`
  // (which must outlive it too), one-token runs take decode steps built
  // from its matrix-vector kernels (other architectures' decode).
  ClPrefill(const ModelConfig& config, ClRuntime& rt, const DeviceWeights& w, DecodeState& s,
            int chunk, const std::string& build_options, const PrefillTuning& tuning,
            ClPrograms* decode_programs = nullptr);

  int chunk() const { return chunk_; }
  // Device time of each decode step (one-token runs) per kernel label and
  // per layer, collected while on (needs a profiling queue);
  // add_decode_profile() adds what the runs since the last call took.
  void set_decode_profiling(bool on) {
    decode_profiling_ = on && rt_.profiling();
    if (!decode_profiling_) decode_events_.clear();
  }
  void add_decode_profile(ProfileReport& into);
  // Launches of a one-token run.
  int launches_per_token() const {
    return int(decode_steps_.empty() ? steps_.size() : decode_steps_.size());
  }
  const PrefillTuning& tuning() const { return tuning_; }
  // A full chunk's matrix products (steps_; not the shorter plans') by
  // kernel: matmul_mma_deq on tensor cores, matmul_x16 with 16-bit
  // activations, or the portable matmul.
  enum class Product { none, tensor_cores, x16, portable };
  int matrix_products(Product kind) const;
  // Of those on tensor cores, the ones split over K (each followed by an
  // mma_split_sum).
  int split_products() const;
  // Of those on tensor cores, the ones on the large tile (mma_large).
  int large_tile_products() const;
  // The token counts of the shorter plans (chunks of at most that many run
  // on steps chosen for them), longest first; none where every plan would
  // launch as the full chunk's does.
  std::vector<int> short_plan_tokens() const;

  // Runs the token ids ids[0..n_tokens) at positions pos.. (the caller wrote
  // them and checked the range), filling the KV cache; then copies the last
  // position's hidden state into `last_x` (n_embd floats) and returns true.
  // With `stop`, batched runs call it after each layer, keeping the next
  // layer queued, and return false once it says true (the queue drained;
  // positions pos.. of the cache partly written).
  bool run(int n_tokens, int pos, const ClMem& last_x, const std::function<bool()>& stop = nullptr);
  // Same, and the logits of positions pos + first_out .. pos + n_tokens - 1 into
  // `out` ((n_tokens - first_out) x n_vocab, row-major). Blocks.
  void run_logits(int n_tokens, int pos, int first_out, std::vector<float>& out);

 private:
  // A launch with tokens on dimension 1; its token-dependent arguments are
  // set per chunk.
  struct Step {
    ClKernel kernel;
    size_t global0 = 0;
    // Always set: left to the runtime, PoCL picks a local size from the
    // global one, so every new chunk length compiled a new kernel variant
    // mid-chat (a stall, and +17 MB of LLVM in RSS).
    size_t local0 = 0, local1 = 0;
    int tokens_per_group = 1;  // global1 = ceil(n / tokens_per_group) * local1
    // Indices of the per-chunk arguments the kernel has (-1: none).
    int arg_n_tok = -1, arg_pos0 = -1, arg_id_off = -1, arg_row0 = -1;
    // Decode attention (attention_decode over one position's window): the
    // cache offset and position count set per step from the layer's base
    // offset and window (0: none).
    int arg_att_off = -1, arg_att_n = -1, arg_att_wrap = -1;
    cl_ulong att_base = 0;
    int att_window = 0;
    int att_ring = 0;  // the layer's K / V rows (DecodeState::kv)
    int layer = -1;    // decode steps: the layer it belongs to (profile), -1: none
    const char* label = "";
    // matmul_x16 and tensor-core steps, and the steps that write xp_
    // themselves (rmsnorm_pack_f16, glu_pack_f16): the activations they read
    // quantized (xq_) or packed (xp_), so a following matmul of the same
    // input skips quantize_x16 / the pack.
    const ClMem* x16_input = nullptr;
    const ClMem* mma_input = nullptr;
    Product product = Product::none;  // a matrix product: its kernel
    bool split_sum = false;           // mma_split_sum (after a split product)
    bool large_tile = false;          // matmul_mma_deq in PrefillTuning::large_tile
    std::string tile_defines;         // tensor-core steps: their program's defines (the tiling)
  };

  // head_steps_' norm, steps_ and the short plans (build_plan for each
  // token count).
  void build_steps();
  // steps_ and layer_ends_ for plan_tokens_.
  void build_plan();
  // Whether two plans launch the same kernels over the same grids.
  static bool same_launches(const std::vector<Step>& a, const std::vector<Step>& b);
  void add_layer_steps(int il, const PrefillTuning& att_tuning);
  PrefillTuning attention_tuning() const;
  Step embed_step();
  Step matmul_step(const DeviceMatrix& w, const ClMem& x, int ld_x, const ClMem& out, int ld_out,
                   int out_off, bool accumulate, const char* label);
  // out (+)= W x for the chunk, appended to `into`: on tensor cores
  // (mma_weights) pack_x_f16 (unless the step before packed the same x) and
  // matmul_mma_deq; with 16-bit
  // activations (x16_weights) quantize_x16 (the same way) and matmul_x16;
  // else matmul_step.
  void add_matmul(std::vector<Step>& into, const DeviceMatrix& w, const ClMem& x, int ld_x,
                  const ClMem& out, int ld_out, int out_off, bool accumulate, const char* label);
  bool x16_weights(const DeviceMatrix& w) const;
  // Whether w's products run on tensor cores: the type's program passes its
  // self-test.
  bool mma_weights(const DeviceMatrix& w);
  Step packing_step(const char* name, GgmlType type, const char* label, const ClMem* input,
                    const KernelArgs& args);
  Step pack_step(const ClMem& x, int ld_x, int n_in, GgmlType type);
  // The packs that also compute their input: rmsnorm(x_) * g as xn_'s
  // packed form, act(g_) * u_ as g_'s (for matrices of `type`).
  Step norm_pack_step(const ClMem& g, GgmlType type, const char* label);
  Step glu_pack_step(GgmlType type);
  // matmul_mma_deq for w (its tile chosen by the grid it makes), appended
  // to `into`, and where it splits over K, mma_split_sum after it.
  void add_mma_steps(std::vector<Step>& into, const DeviceMatrix& w, const ClMem& x,
                     const ClMem& out, int ld_out, int out_off, bool accumulate, const char* label);
  Step quantize_step(const ClMem& x, int ld_x, int n_in, GgmlType type);
  Step matmul_x16_step(const DeviceMatrix& w, const ClMem& x, const ClMem& out, int ld_out,
                       int out_off, bool accumulate, const char* label);
  Step norm_step(const ClMem& x, const ClMem& g, const ClMem& out, const char* label,
                 bool accumulate = false);
  // Where head_rows finds q, k and v: rows of ld floats, q at 0.
  struct QkvLayout {
    const ClMem* buffer;
    int ld, k_at, v_at;
  };
  Step elementwise_step(const char* name, size_t n, const char* label);
  Step embed_scale_step();
  Step activation_step();
  Step rope_step(int il, cl_ulong layer_off);
  Step head_step(int il, cl_ulong layer_off, const QkvLayout& in);
  Step attention_step(int il, cl_ulong layer_off, const PrefillTuning& att_tuning);
  Step decode_attention_step(int il, cl_ulong layer_off);
  Step matvec_step(const DeviceMatrix& w, const ClMem& x, const ClMem* norm_w, bool accumulate,
                   const ClMem& out, const char* label);
  void add_decode_residual_steps(const DeviceMatrix& w, const ClMem& in,
                                 const DeviceMatrix& post_norm, const char* label,
                                 const char* norm_label);
  void build_decode_qkv();
  void build_decode_steps();
  void add_residual_steps(const DeviceMatrix& w, const ClMem& in, int ld_in,
                          const DeviceMatrix& post_norm, const char* label, const char* norm_label);
  ClKernel weight_kernel(GgmlType type, const char* name);

 public:
  // The -D options of kernels/matmul.cl for weights of `type` (also used by
  // the kernel tests).
  static std::string matmul_defines(GgmlType type, const PrefillTuning& t);
  // Of kernels/matmul_x16.cl (Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K).
  static std::string x16_defines(GgmlType type, const PrefillTuning& t);
  // Bytes of its quantized activations for n_tok tokens of n_in values, in
  // tiles of x16_tg groups of 8 tokens: per block of 32 values and group, a
  // record of the 16-bit values (512 bytes), 8 float scales and 8 float sums
  // (the kernel's X16_RECORD).
  static constexpr size_t k_x16_record_bytes = 512 + 2 * 32;
  static size_t x16_bytes(int n_tok, int n_in, int x16_tg) {
    const size_t tile_tokens = 8 * size_t(x16_tg);
    const size_t groups = (size_t(n_tok) + tile_tokens - 1) / tile_tokens * size_t(x16_tg);
    return groups * size_t(n_in / 32) * k_x16_record_bytes;
  }
  // (split: matmul_mma_deq's MMA_SPLIT, split-K over that many work-groups)
  static std::string mma_defines(GgmlType type, const PrefillTuning& t, int split = 1);
  // The tensor-core kernel (kernels/matmul_mma_deq.cl, NVIDIA only) and its
  // packed activations for n_tok tokens of n_in values (a multiple of 32):
  // fp16 values, and per token a float (its scale's inverse). pack_x_f16
  // runs a work-group of k_pack_group work-items per token.
  static constexpr const char* k_mma_program = "mma_f16+matmul_mma_deq";
  static constexpr const char* k_att_mma_program = "mma_f16+attention_mma";
  static constexpr int k_pack_group = 256;
  static constexpr int k_split_sum_group = 256;  // mma_split_sum's work-group
  // Global sizes along rows: matmul_mma_deq's (a work-group of `t`'s
  // threads per row tile and split) and mma_split_sum's (a work-item a row,
  // in work-groups of k_split_sum_group), for a matrix of `rows` rows.
  static size_t mma_rows_global(int rows, const PrefillTuning& t, int split);
  static size_t split_sum_rows_global(int rows);
  static size_t mma_packed_bytes(int n_tok, int n_in) { return size_t(n_tok) * size_t(n_in) * 2; }
  static size_t mma_scale_bytes(int n_tok) { return size_t(n_tok) * 4; }
  // matmul_mma_deq's local memory for a weight type and tile, as the kernel
  // declares it (its copy ring: codes, scale records, packed x), and the
  // most NVIDIA's compiler gives a work-group on sm_90 (ptxas: 0x38c00;
  // NVIDIA's OpenCL reports 48 KB for every GPU, so the device query cannot
  // say). A tile over it is not tried there; other GPUs' limits show as the
  // self-test's failed build.
  static size_t mma_local_bytes(GgmlType type, const PrefillTuning& t);
  static constexpr size_t k_mma_local_limit = 0x38c00;
  static std::string attention_defines(int head_dim, const PrefillTuning& t);
  static bool mma_type(GgmlType type) {
    switch (type) {
      case GgmlType::Q4_0:
      case GgmlType::Q4_1:
      case GgmlType::Q5_0:
      case GgmlType::Q5_1:
      case GgmlType::Q8_0:
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
      case GgmlType::Q6_K:
        return true;
      default:
        return false;
    }
  }
  // Whether the tensor-core program of `type` and `tile` builds and matches a host reference on a
  // small case (checked once per program; false on any error).
  bool mma_ok(GgmlType type, const PrefillTuning& tile, int split = 1);
  // Whether the tensor-core attention (kernels/attention_mma.cl) takes this
  // model's heads: tensor cores and att_mma on, a head of 64 or 128, and its program
  // builds and matches a float64 reference on a small causal case with a
  // window (checked once).
  bool attention_mma_ok();
  static constexpr int k_att_mma_queries = 64, k_att_mma_threads = 128;
  static std::string attention_mma_defines(int head_dim) {
    return " -DHEAD_DIM=" + std::to_string(head_dim) +
           " -DBQ=" + std::to_string(k_att_mma_queries) +
           " -DWG=" + std::to_string(k_att_mma_threads);
  }

 private:
  ClKernel kernel(const std::string& stem, const std::string& defines, const char* name);
  // Returns the launch's event (the caller's to release) when want_event.
  cl_event enqueue(Step& s, int n_tok, int pos0, int id_off, int row0, bool want_event = false);
  // false: `stop` said so after a layer (see run).
  bool enqueue_chunk(int id_off, int n_tok, int pos0, const std::function<bool()>& stop);

  const ModelConfig config_;
  ClRuntime& rt_;
  ClPrograms* decode_programs_;  // null: no decode steps
  const DeviceWeights& w_;
  DecodeState& s_;
  int chunk_;
  std::string build_options_;
  std::string ops_defines_;  // of kernels/prefill_ops.cl
  int glu_vec_ = 1;          // values per work-item of silu_mul / gelu_mul (GLU_VEC)
  PrefillTuning tuning_;
  std::vector<std::pair<std::string, ClProgram>> programs_;  // by stem + defines
  std::vector<std::pair<std::string, bool>> mma_checked_;    // self-tests by program and defines
  int attention_mma_checked_ = -1;                           // attention_mma_ok: -1 not yet
  bool profile_ = false;  // PrefillTuning::profile on a profiling queue
  bool decode_profiling_ = false;
  std::vector<std::pair<const Step*, ClEvent>> decode_events_;
  std::vector<std::pair<std::string, ClEvent>> events_;
  void report_profile(int n_tokens);

  // Scratch, token-major, chunk_ rows each.
  // (xn_ and g_'s h are not written where norm_pack_step / glu_pack_step
  // write their packed form instead.)
  ClMem x_;                 // residual stream (chunk, n_embd)
  ClMem xn_;                // normed input (chunk, n_embd)
  ClMem qkv_;               // (chunk, n_embd_q + 2 n_embd_kv)
  ClMem q_;                 // roped queries (chunk, n_embd_q)
  ClMem att_;               // attention output (chunk, n_embd_q)
  ClMem g_, u_;             // FFN gate / up, then h = act(g) * u in g_ (chunk, n_ff)
  ClMem xq_;                // 16-bit activations of the widest input (matmul_x16.cl), or none
  ClMem part_;              // split-K's partial sums (mma_split_sum), or none until a matrix splits
  size_t part_floats_ = 0;  // their capacity, allocated or not
  ClMem xp_, xps_;          // packed activations and their scales (matmul_mma_deq.cl), or none
  ClMem logits_;            // (head_rows_, n_vocab), allocated by the first run_logits
  int head_rows_ = 0;       // positions per lm_head launch in run_logits

  std::vector<Step> steps_;         // embed, then the layers in order
  std::vector<size_t> layer_ends_;  // one past each layer's last step in steps_
  // The tokens the matrix products' tiles are chosen for (add_mma_steps):
  // chunk_ for steps_, a shorter plan's own while it is built.
  int plan_tokens_ = 0;
  // Chunks of at most `tokens` (halving from chunk_ / 2 to
  // k_short_plan_tokens, in that order) run on steps chosen for that many
  // tokens, where the choice differs from the next longer plan's (the tile
  // chosen for a full chunk leaves most of the device idle on a short one:
  // a chat turn's few tokens, a long prompt's last chunk).
  struct ShortPlan {
    int tokens = 0;
    std::vector<Step> steps;
    std::vector<size_t> layer_ends;
  };
  std::vector<ShortPlan> short_plans_;
  static constexpr int k_short_plan_tokens = 32;
  std::vector<Step> decode_steps_;       // steps_' work for one token, matrix-vector kernels
  ClMem qkv1_;                           // one token's q, k, v (decode steps)
  std::array<ClMem, 3> qkv1_parts_;      // sub-buffers of qkv1_ for separate Wq, Wk, Wv
  int split_k_at_ = 0, split_v_at_ = 0;  // their offsets in qkv1_ (floats)
  std::vector<Step> head_steps_;         // final norm + lm_head for run_logits
};

}  // namespace clchat
