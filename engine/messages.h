// What flows between a caller (the UI, line mode, tests) and the engine
// thread: the options it starts with, the commands posted to it and the events
// it answers with. Plain data only, no OpenCL: ui/ includes this header.
//
// Commands and events are std::variant of small structs, so a caller handles
// them with std::visit or std::get_if and the compiler lists what is missing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/forward_reports.h"

namespace clchat {

// How the next token is chosen. temperature 0 with no penalty keeps the
// greedy argmax on the device (the fast path: 4 bytes read back per token);
// anything else reads the logits back and picks on the host (sampler.h).
// These defaults are greedy so that `run`, `bench` and the tests are
// reproducible; the chat's own defaults are config/default.toml's [sampling].
struct SamplingParams {
  float temperature = 0.0f;     // 0 = greedy on the device
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1 = off
  int repeat_last_n = 64;       // tokens the penalties look back over
  float frequency_penalty = 0;  // minus this times a recent token's count; 0 = off
  float presence_penalty = 0;   // minus this once for a recent token; 0 = off
  uint64_t seed = 0;            // the random stream's seed: same seed, same output
  int max_tokens = 512;         // reply length limit

  bool greedy() const { return temperature <= 0.0f; }
  bool operator==(const SamplingParams&) const = default;
  // Any penalty on: the logits change before the choice, even a greedy one.
  bool penalized() const {
    return repeat_last_n != 0 && ((repeat_penalty != 1.0f && repeat_penalty > 0.0f) ||
                                  frequency_penalty != 0.0f || presence_penalty != 0.0f);
  }
};

// Which sampling fields the model's own recommendation (its GGUF
// general.sampling.* keys) may set, or did set: a field the user chose (a
// flag, the config file) is never replaced.
struct SamplingFields {
  bool temperature = false, top_k = false, top_p = false, min_p = false, repeat_penalty = false,
       repeat_last_n = false;
};

// The OpenCL engine's switches for a user whose device misbehaves or who
// wants the compiled kernels elsewhere: the [engine] table of the config
// file and the --no-persistent, --no-tensor-cores, --no-lookahead and
// --kernel-cache flags. (Every tunable is in engine/cl/tuning.h.)
struct EngineSwitches {
  bool persistent_decode = true;  // one kernel launch per decode step where eligible
  bool tensor_cores = true;       // NVIDIA: prefill matmuls on tensor cores (after a self-test)
  bool lookahead = true;          // greedy steps enqueued before the host asks for them
  // Folder of compiled kernel binaries. Empty: $CLCHAT_KERNEL_CACHE, else
  // $XDG_CACHE_HOME/clchat/kernels (~/.cache/clchat/kernels).
  std::string kernel_cache;
};

struct EngineOptions {
  std::string model_path;
  std::string device;              // select_device() spec; "" = first GPU, else CPU
  std::string backend = "opencl";  // "opencl" or "reference" (CPU, slow, exact)
  int n_ctx = 0;                   // 0 = the model's, capped (device memory; 8192 reference)
  std::string chat_template;       // "" = from the model; else a style name
  std::string system_prompt;       // "" = the template's default, if it has one
  SamplingParams sampling;
  // The fields of `sampling` that the model's general.sampling.* keys
  // replace when it has them (the chat: the ones the user did not choose);
  // all false (run, bench, tests): the model's recommendation is not used.
  SamplingFields model_sampling;
  int prefill_chunk = 512;  // most tokens per prefill call (the chat sizes its chunks by time)
  bool profiling = false;   // LayerTimings events (needs a profiling queue)
  EngineSwitches switches;  // OpenCL backend only
};

enum class Role { System, User, Assistant };

struct Turn {
  Role role = Role::User;
  std::string text;
};

// ---- commands (caller -> engine), posted with Engine::post ----------------
namespace cmd {
struct SubmitTurn {
  std::string text;  // a user turn; the reply streams back as TokenText
};
struct Regenerate {};  // drop the last reply and generate it again
struct Clear {};       // new conversation (system prompt kept), cache reset
struct SetSystemPrompt {
  std::string text;  // takes effect at once; the cache is rebuilt lazily
};
struct SetSampling {
  SamplingParams params;
};
struct SetDebug {
  bool on = false;  // DebugStats after every generated token
};
struct SetProfiling {
  bool on = false;  // LayerTimings, sampled 1 token in 16
};
// Replaces the conversation (e.g. a saved chat); turns alternate user and
// assistant. The cache is rebuilt from this text on the next turn.
struct LoadConversation {
  std::string system;
  std::vector<Turn> turns;
};
struct QueryStats {};  // answered with a Stats event
struct Shutdown {};
}  // namespace cmd

using Command = std::variant<cmd::SubmitTurn, cmd::Regenerate, cmd::Clear, cmd::SetSystemPrompt,
                             cmd::SetSampling, cmd::SetDebug, cmd::SetProfiling,
                             cmd::LoadConversation, cmd::QueryStats, cmd::Shutdown>;

// ---- events (engine -> caller), read with Engine::poll / Engine::wait -----
namespace ev {
// The model is loaded and the engine takes commands.
struct Ready {
  std::string model_name;
  std::string quant;  // most common layer weight type, e.g. "Q4_1"
  std::string device_name;
  int n_layer = 0;
  int n_ctx = 0;              // KV cache positions actually allocated
  std::string backend;        // Backend::name()
  std::string chat_template;  // style name in use ("chatml", "plain", ...)
  std::string system_prompt;  // in use (may be the template's default)
  int prefill_chunk = 1;      // tokens per batched prefill on the device (1: none)
  // For /show.
  std::string architecture;  // general.architecture
  uint64_t n_params = 0;     // weights, all tensors
  uint64_t file_bytes = 0;
  int n_ctx_train = 0;
  int n_embd = 0, n_head = 0, n_head_kv = 0, n_vocab = 0;
  std::string weight_types;   // the layer matrices' types, most common first
  SamplingParams sampling;    // in use at the start
  SamplingFields from_model;  // which of them the model recommended
};
// Where a turn's prompt processing is: `done` of `total` tokens are in the
// cache (sent after each prefill chunk of a long prompt).
struct PrefillProgress {
  int done = 0;
  int total = 0;
};
// Loading failed; the engine thread has ended. Later commands are ignored.
struct LoadFailed {
  std::string message;
  bool bad_file = false;  // the model file is malformed (GgufError), not e.g. a device failure
  std::string build_log;  // an OpenCL program failed to build: the compiler's whole log
};
// While loading, what the engine is doing ("reading the model file",
// "compiling kernels 3: matvec_cpu"), for a first start that compiles.
struct Loading {
  std::string stage;
};
// A command failed; the engine keeps running.
struct Error {
  std::string message;
};
// Something worth telling the user that is not an error (e.g. n_ctx reduced).
struct Notice {
  std::string message;
};
// A piece of the reply: valid UTF-8, never special-token markup.
struct TokenText {
  std::string piece;
};
enum class FinishReason { Eos, MaxTokens, Cancelled, Error, ContextFull };
struct TurnFinished {
  FinishReason reason = FinishReason::Eos;
  std::string reply;  // the whole reply as kept in the conversation
};
// Prefill/decode statistics of the current (live = true, sent every 8 decoded
// tokens) or last finished turn.
struct Stats {
  int prefill_tokens = 0;
  double prefill_tok_s = 0;
  int decode_tokens = 0;
  double decode_tok_s = 0;
  double ttft_ms = 0;  // turn submitted -> first token ready
  int cache_used = 0;
  int cache_capacity = 0;
  bool live = false;
};
// Device time per layer of one sampled decode step (profiling on).
struct LayerTimings {
  int pos = 0;
  std::vector<double> layer_ms;
  double total_ms = 0;
  int n_launches = 0;
};
// Debug readback of the last step (debug on): per-layer hidden statistics and
// the top-5 candidates as (token text, probability).
struct DebugStats {
  DebugReport report;
  std::vector<std::pair<std::string, float>> top;
};
// Oldest whole turns were dropped so the new turn fits; the cache was rebuilt.
struct ContextTrimmed {
  int turns_dropped = 0;  // user and assistant turns counted separately
  int tokens_dropped = 0;
};
}  // namespace ev

using Event = std::variant<ev::Ready, ev::LoadFailed, ev::Error, ev::Notice, ev::TokenText,
                           ev::TurnFinished, ev::Stats, ev::LayerTimings, ev::DebugStats,
                           ev::ContextTrimmed, ev::PrefillProgress, ev::Loading>;

inline const char* finish_reason_name(ev::FinishReason reason) {
  switch (reason) {
    case ev::FinishReason::Eos:
      return "eos";
    case ev::FinishReason::MaxTokens:
      return "max_tokens";
    case ev::FinishReason::Cancelled:
      return "cancelled";
    case ev::FinishReason::Error:
      return "error";
    case ev::FinishReason::ContextFull:
      return "context_full";
  }
  return "unknown";
}

}  // namespace clchat
