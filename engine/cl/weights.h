// Weights on the device. Matrices are uploaded once, read-only, in their GGUF
// storage type (Q5_0 as Q8_0 on CPU devices, Q4_K / Q5_K as Q4_1 / Q5_1:
// device_type, repack_for_device), in the block
// layout of engine/cl/block_layout.h: payloads (q) and scale records (s) of
// each 32 values in two arrays, so kernels can use aligned vector loads; F32,
// F16 and BF16 rows as they are. The same layout (rows x blocks, row-major)
// holds for q and s, so row-wise concatenation of matrices is concatenation
// of both arrays. DeviceWeights holds a model's matrices in that layout;
// WeightArena copies them into one buffer for the persistent decode kernels,
// whose compile-time weight types LayerTypes gathers.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/cl/runtime.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"

namespace clchat {

struct RepackedMatrix {
  GgmlType type = GgmlType::F32;
  int n_in = 0;  // values per row
  int rows = 0;
  std::vector<uint8_t> q;  // payloads (or plain values for F32/F16)
  std::vector<uint8_t> s;  // scales (empty for F32/F16)
};

// GGUF row-major blocks -> the device layout above. `data` holds rows rows of
// ggml_row_bytes(type, n_in) bytes.
RepackedMatrix repack_matrix(GgmlType type, const uint8_t* data, int n_in, int rows);
// `rows` rows of a file's type as its device_type (block_layout.h): Q5_0 as
// Q8_0 on CPU devices, Q4_K / Q5_K as Q4_1 / Q5_1 where every scale fits
// fp16 (else in their own layout; so Q, K and V may differ in type where
// their file types agree).
RepackedMatrix repack_for_device(GgmlType file_type, const uint8_t* data, int n_in, int rows,
                                 bool cpu_device);
// t's bytes, copied from `file` (GgufFile::tensor_bytes: a file that shrank
// since it was opened is a GgufError, not SIGBUS), repacked as its
// device_type (block_layout.h) on a CPU device or another.
RepackedMatrix repack_tensor(const GgufFile& file, const GgufTensor& t, bool cpu_device);
// Whether a layer's Q, K and V are uploaded as one stacked matrix: all three
// there and of one device_type (block_layout.h). DeviceWeights uploads by it
// (unless one of them kept its exact K-quant layout: repack_for_device) and
// weight_footprint (device_fit.h) sizes by it.
bool qkv_stacked(const LayerTensors& l, bool cpu_device);
// Stacks matrices of equal type and n_in row-wise (e.g. [Wq; Wk; Wv]).
RepackedMatrix stack_rows(const std::vector<RepackedMatrix>& parts);

struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  int n_in = 0;
  int rows = 0;
  ClMem q;
  ClMem s;
  uint64_t n_bytes = 0;
};

DeviceMatrix upload_matrix(const ClRuntime& rt, const RepackedMatrix& m);
DeviceMatrix upload_floats(const ClRuntime& rt, const float* data, int n);  // 1-row F32

// The model's weights on the device, read-only once uploaded, and the RoPE
// table; shapes (rows, values per row), in their device types
// (repack_for_device) unless F32.
struct DeviceWeights {
  struct Layer {
    DeviceMatrix attn_norm;  // (1, n_embd) F32
    std::vector<DeviceMatrix>
        qkv;                // [Wq; Wk; Wv] stacked (n_embd_q + 2 n_embd_kv, n_embd) when
                            // one type, else Wq (n_embd_q, n_embd), Wk, Wv (n_embd_kv, n_embd)
    DeviceMatrix wo;        // (n_embd, n_embd_q)
    DeviceMatrix ffn_norm;  // (1, n_embd) F32
    DeviceMatrix ffn_gate, ffn_up;  // (n_ff, n_embd), one type
    DeviceMatrix ffn_down;          // (n_embd, n_ff)
    // F32, empty unless the config asks for them (ModelConfig's options):
    DeviceMatrix qkv_bias;                       // [bq; bk; bv] (1, n_embd_q + 2 n_embd_kv)
    DeviceMatrix q_norm, k_norm;                 // (1, head_dim)
    DeviceMatrix post_attn_norm, post_ffn_norm;  // (1, n_embd)
    // The bytes of its matrices (Q/K/V, Wo, gate, up, down; not the vectors).
    uint64_t matrix_bytes() const;
  };
  DeviceMatrix token_embd;   // (n_vocab, n_embd)
  DeviceMatrix output;       // (n_vocab, n_embd); empty when tied (the head is token_embd)
  DeviceMatrix output_norm;  // (1, n_embd) F32
  std::vector<Layer> layers;
  // (n_ctx, n_rot / 2) float2: cos, sin of pair i's angle at each position
  // (cpu::rope_angle: base, position scale and frequency factors included);
  // rope_cs_swa the same for the sliding-window layers when their base or
  // scale differs (else empty). rope_table(il) picks layer il's.
  ClMem rope_cs, rope_cs_swa;
  uint64_t n_bytes = 0;  // the matrices' bytes (not the RoPE tables)

  // Uploads `model`'s tensors (repacked) and a RoPE table of n_ctx positions.
  DeviceWeights(const Model& model, const ClRuntime& rt, int n_ctx);
  // The lm_head: output, or token_embd when the embeddings are tied.
  const DeviceMatrix& head() const { return output.q ? output : token_embd; }
  const ClMem& rope_table(int il) const {
    return is_swa(il) && rope_cs_swa ? rope_cs_swa : rope_cs;
  }
  const ClMem& rope_table_swa() const { return rope_cs_swa ? rope_cs_swa : rope_cs; }
  bool is_swa(int il) const { return !swa_layer_.empty() && swa_layer_[size_t(il)]; }

 private:
  std::vector<bool> swa_layer_;
};

// A model's layer weight types as the persistent decode kernels take them
// (compile-time, per role): for each role (Q, K, V, Wo, gate and up, down)
// at most two types over the layers, `type` (the more common; the first
// layer's on a tie) and `alt` (== type when every layer shares it). Real
// files mix types per layer: llama-quantize's Q4_K_M of SmolLM2-135M has V
// in Q8_0 and down in Q6_K in 14 of 30 layers, Q5_0 and Q4_K (on the device
// Q4_1) in the others.
struct LayerTypes {
  enum Role { q, k, v, wo, ffn, down, n_roles };  // ALT_* bit 1 << role in the kernels
  static constexpr const char* k_role_names[n_roles] = {"attn_q",      "attn_k",      "attn_v",
                                                        "attn_output", "ffn_gate/up", "ffn_down"};
  GgmlType type[n_roles] = {};
  GgmlType alt[n_roles] = {};

  // w's types; nullopt when a role has more than two types or a layer's gate
  // and up differ in type, with the reason in *why (when given).
  static std::optional<LayerTypes> of(const DeviceWeights& w, std::string* why = nullptr);
  // Layer l's matrices' types by role (ffn: gate's).
  static std::array<GgmlType, n_roles> of_layer(const DeviceWeights::Layer& l);
  // Layer l's ALT word (LO_ALT): bit r set where role r uses alt[r].
  uint64_t alt_word(const DeviceWeights::Layer& l) const;
  // Q, K and V of one type in every layer (the kernels' QKV_STACKED).
  bool qkv_stacked() const;
  // "attn_q Q5_0, ..., attn_v Q5_0 (Q8_0 in 14 layers), ..." for the log.
  std::string describe(const DeviceWeights& w) const;
};

// Every weight buffer copied once into one allocation, at 256-byte aligned
// byte offsets, so that one kernel can address every layer (OpenCL 1.2 has
// no device pointers): the persistent decode kernel's view of DeviceWeights.
struct WeightArena {
  // Per layer, the words of layer_off (LO_* in kernels/persistent_layout.cl):
  // byte offsets of Q's payloads and scales (a layer whose Q, K and V share
  // a type: the stacked [Q; K; V]'s, and K's and V's offsets point into it),
  // Wo's, gate's, up's, down's, attn_norm, ffn_norm, K's, V's; then the
  // layer's ALT word (LayerTypes::alt_word, with k_swa_bit on sliding-window
  // layers) and the optional vectors.
  enum Slot : size_t {
    q_q,
    q_s,
    wo_q,
    wo_s,
    gate_q,
    gate_s,
    up_q,
    up_s,
    down_q,
    down_s,
    attn_norm,
    ffn_norm,
    k_q,
    k_s,
    v_q,
    v_s,
    alt_word,
    qkv_bias,  // the optional F32 vectors: 0 where the model has none
    q_norm,
    k_norm,
    post_attn_norm,
    post_ffn_norm,
    k_layer_offsets
  };
  static constexpr uint64_t k_swa_bit = 256;  // LAYER_SWA in the kernels
  ClMem arena;
  ClMem layer_off;  // (n_layer, k_layer_offsets) ulong
  uint64_t embd_q = 0, embd_s = 0, head_q = 0, head_s = 0, out_norm = 0;

  // Empty (no arena) when the arena exceeds the device's largest allocation.
  static std::optional<WeightArena> build(const DeviceWeights& w, const LayerTypes& types,
                                          const ClRuntime& rt);
};

}  // namespace clchat
