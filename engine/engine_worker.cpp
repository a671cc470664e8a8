// Worker: loading, one handler per command, and the hooks that turn a running
// turn into TokenText, live Stats, LayerTimings and DebugStats events.
#include "engine/engine_worker.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "common/utf8.h"
#include "engine/chat/model_sampling.h"
#include "engine/cl/device_fit.h"
#include "engine/cl/forward.h"

namespace clchat {

namespace {

// Profiling adds an event per kernel launch: sample 1 decode step in 16 so
// it costs a small fraction of decode speed.
constexpr int k_profile_every = 16;
// Live statistics while decoding, every this many tokens.
constexpr int k_live_stats_every = 8;
// The reference backend keeps its cache in host memory with no limit of its
// own: a model's training context (up to 2^24) would not fit, so "the
// model's context" means at most this many positions there.
constexpr int k_reference_max_ctx = 8192;

// A candidate token as the reply would show it: its bytes (" the", not the
// vocabulary's "Ġthe"), each byte that is not UTF-8 on its own as \xNN (a
// piece of a character); a control token by its name ("<|im_end|>").
std::string display_token(const Tokenizer& t, int32_t id) {
  if (t.is_control(id)) return t.token_text(id);
  const std::string bytes = t.token_to_bytes(id);
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Char c = decode_utf8_char(bytes, i);
    if (c.length > 0) {
      out.append(bytes, i, size_t(c.length));
      i += size_t(c.length);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(uint8_t(bytes[i])));
      out += hex;
      ++i;
    }
  }
  return out;
}

Model load_model_said(const std::string& path, EventSink& sink) {
  sink.emit(ev::Loading{"reading the model file"});
  return load_model(path);
}

}  // namespace

Worker::Worker(const EngineOptions& options, EventSink& sink,
               const std::atomic<uint64_t>& cancelled_upto)
    : options_(options),
      sink_(sink),
      cancelled_upto_(cancelled_upto),
      model_(load_model_said(options.model_path, sink)) {
  tokenizer_ = Tokenizer::from_gguf(*model_.file);
  std::string note;
  ChatTemplate chat_template = ChatTemplate::from_gguf(*model_.file, options.chat_template, &note);
  chat_template.set_tokens(template_tokens(*tokenizer_));
  if (!note.empty()) sink_.emit(ev::Notice{note});

  const int n_ctx_wanted = options.n_ctx > 0 ? options.n_ctx : model_.config.n_ctx_train;
  std::string device_name = "CPU (reference)";
  int prefill_chunk = 1;
  if (options.backend == "reference") {
    int n_ctx = n_ctx_wanted;
    if (options.n_ctx <= 0 && n_ctx > k_reference_max_ctx) {
      n_ctx = k_reference_max_ctx;
      sink_.emit(ev::Notice{"context limited to " + std::to_string(n_ctx) + " of the model's " +
                            std::to_string(n_ctx_wanted) +
                            " tokens on the reference backend (-c sets it)"});
    }
    backend_ = make_reference_backend(model_, n_ctx);
  } else if (options.backend == "opencl") {
    const DeviceInfo device = select_device(options.device);
    device_name = device.name;
    try {
      check_model_fits(model_, device);
      sink_.emit(ev::Loading{"opening " + device.name});
      runtime_ =
          std::make_unique<ClRuntime>(device, options.profiling, options.switches.kernel_cache);
      // Compiling takes seconds on a first start (PoCL: 9-15 s); each program
      // is said as it begins, self-tests run between them.
      runtime_->on_build = [this, n = 0](const std::string& name, bool cached) mutable {
        ++n;
        sink_.emit(ev::Loading{(cached ? "loading compiled kernels " : "compiling kernels ") +
                               std::to_string(n) + ": " + name +
                               (cached ? "" : " (kept for the next start)")});
      };
      // ClForward caps the cache at what the device memory allows.
      auto forward = std::make_unique<ClForward>(
          model_, *runtime_,
          ClForwardOptions{n_ctx_wanted, std::max(options.prefill_chunk, 1),
                           Tuning::for_device(device, options.switches)});
      prefill_chunk = forward->prefill_chunk();
      runtime_->on_build = nullptr;
      backend_ = std::move(forward);
    } catch (...) {
      rethrow_with_device_hint(device);
    }
    backend_->set_profiling(false);  // switched on for sampled steps only
  } else {
    throw std::invalid_argument("unknown backend '" + options.backend + "'");
  }
  profiling_ = options.profiling;
  if (options.backend != "reference" && backend_->n_ctx() < n_ctx_wanted) {
    sink_.emit(ev::Notice{context_reduced_note(n_ctx_wanted, backend_->n_ctx(), device_name)});
  }
  session_ = std::make_unique<ChatSession>(*backend_, *tokenizer_, std::move(chat_template),
                                           options.system_prompt);
  SamplingParams sampling = options.sampling;
  const SamplingFields from_model =
      apply_model_sampling(*model_.file, options.model_sampling, sampling);
  session_->set_sampling(sampling);
  session_->set_prefill_chunk(options.prefill_chunk);

  ev::Ready ready;
  ready.model_name = model_.config.name;
  ready.quant = describe_weight_type(model_);
  ready.device_name = device_name;
  ready.n_layer = model_.config.n_layer;
  ready.n_ctx = backend_->n_ctx();
  ready.prefill_chunk = prefill_chunk;
  ready.backend = backend_->name();
  ready.chat_template = std::string(session_->chat_template().name());
  ready.system_prompt = session_->system_prompt();
  describe_model(ready);
  ready.sampling = sampling;
  ready.from_model = from_model;
  sink_.emit(std::move(ready));
}

Worker::~Worker() = default;

void Worker::describe_model(ev::Ready& r) const {
  const ModelConfig& c = model_.config;
  r.architecture = c.arch;
  r.file_bytes = model_.file->file_size();
  for (const GgufTensor& t : model_.file->tensors()) r.n_params += t.n_elements;
  r.n_ctx_train = c.n_ctx_train;
  r.n_embd = c.n_embd;
  r.n_head = c.n_head;
  r.n_head_kv = c.n_head_kv;
  r.n_vocab = c.n_vocab;
  for (const auto& [type, count] : layer_weight_types(model_)) {
    r.weight_types += (r.weight_types.empty() ? "" : ", ") + std::string(ggml_type_name(type)) +
                      " ×" + std::to_string(count);
  }
}

void Worker::handle(const Command& command, uint64_t turn) {
  std::visit(
      [&](const auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, cmd::SubmitTurn>) {
          run_turn(false, c.text, turn);
        } else if constexpr (std::is_same_v<T, cmd::Regenerate>) {
          run_turn(true, "", turn);
        } else if constexpr (std::is_same_v<T, cmd::Clear>) {
          session_->clear();
        } else if constexpr (std::is_same_v<T, cmd::SetSystemPrompt>) {
          session_->set_system_prompt(c.text);
        } else if constexpr (std::is_same_v<T, cmd::SetSampling>) {
          session_->set_sampling(c.params);
        } else if constexpr (std::is_same_v<T, cmd::SetDebug>) {
          debug_ = c.on;
          backend_->set_debug(c.on);
        } else if constexpr (std::is_same_v<T, cmd::SetProfiling>) {
          if (c.on && runtime_ && !runtime_->profiling()) {
            sink_.emit(ev::Notice{"profiling needs the engine started with profiling on"});
          }
          profiling_ = c.on;
        } else if constexpr (std::is_same_v<T, cmd::LoadConversation>) {
          session_->load(c.system, c.turns);
        } else if constexpr (std::is_same_v<T, cmd::QueryStats>) {
          sink_.emit(stats(last_, false));
        } else if constexpr (std::is_same_v<T, cmd::Shutdown>) {
          // Handled by the thread loop.
        }
      },
      command);
}

ev::Stats Worker::stats(const TurnResult& r, bool live) const {
  ev::Stats s;
  s.prefill_tokens = r.prefill_tokens;
  s.prefill_tok_s = r.t_prefill_s > 0 ? r.prefill_tokens / r.t_prefill_s : 0;
  s.decode_tokens = r.decode_tokens;
  s.decode_tok_s = r.t_decode_s > 0 ? r.decode_tokens / r.t_decode_s : 0;
  s.ttft_ms = r.ttft_ms;
  s.cache_used = session_->n_past();
  s.cache_capacity = session_->capacity();
  s.live = live;
  return s;
}

void Worker::emit_layer_timings() {
  const ProfileReport* p = backend_->profile_report();
  if (!p || p->layer_us.empty()) return;
  ev::LayerTimings t;
  t.pos = session_->n_past() - 1;
  for (double us : p->layer_us) t.layer_ms.push_back(us / 1e3);
  t.total_ms = p->total_us / 1e3;
  t.n_launches = p->n_launches;
  sink_.emit(std::move(t));
}

void Worker::emit_debug() {
  const DebugReport* r = backend_->debug_report();
  if (!r) return;
  ev::DebugStats d;
  d.report = *r;
  for (const auto& [id, p] : r->top) d.top.emplace_back(display_token(*tokenizer_, id), p);
  sink_.emit(std::move(d));
}

TurnHooks Worker::hooks(uint64_t turn) {
  TurnHooks h;
  h.cancelled = [this, turn] { return turn <= cancelled_upto_.load(); };
  h.on_text = [this](std::string_view piece) { sink_.emit(ev::TokenText{std::string(piece)}); };
  h.on_trim = [this](int turns, int tokens) { sink_.emit(ev::ContextTrimmed{turns, tokens}); };
  h.on_prefill = [this](int done, int total) { sink_.emit(ev::PrefillProgress{done, total}); };
  h.before_step = [this](int step) {
    if (profiling_ && step % k_profile_every == 0) backend_->set_profiling(true);
  };
  h.after_step = [this](int step, const TurnResult& so_far) {
    if (profiling_ && step % k_profile_every == 0) {
      emit_layer_timings();
      backend_->set_profiling(false);
    }
    if (debug_) emit_debug();
    if ((step + 1) % k_live_stats_every == 0) sink_.emit(stats(so_far, true));
  };
  return h;
}

void Worker::run_turn(bool regenerate, const std::string& text, uint64_t turn) {
  const TurnHooks h = hooks(turn);
  TurnResult r = regenerate ? session_->regenerate(h) : session_->submit(text, h);
  if (!r.error.empty()) sink_.emit(ev::Error{r.error});
  last_ = r;
  sink_.emit(stats(r, false));
  sink_.emit(ev::TurnFinished{r.reason, r.reply});
}

}  // namespace clchat
