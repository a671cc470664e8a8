// Line-mode chat over the engine thread, and the choice of front end. Line
// mode posts each non-empty stdin line as a user turn, streams the reply to
// stdout (leading white space dropped, a newline after it) and waits for
// TurnFinished before reading the next line. Ctrl-C during a reply cancels
// it (the partial reply stays in the conversation); at the prompt it quits.
#include "app/cmd_chat.h"

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include "app/commands.h"
#include "engine/chat/template.h"
#include "engine/cl/build_error.h"
#include "engine/cl/object_counts.h"
#include "engine/engine.h"

namespace clchat::app {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

// SIGINT cancels the reply while this lives; the default (quit) otherwise.
class CancelOnSigint {
 public:
  CancelOnSigint() {
    g_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~CancelOnSigint() { sigaction(SIGINT, &old_, nullptr); }
  CancelOnSigint(const CancelOnSigint&) = delete;
  CancelOnSigint& operator=(const CancelOnSigint&) = delete;

 private:
  struct sigaction old_ {};
};

// Waits for Ready; prints notices. Throws the message when loading failed:
// UsageError for a malformed model file, std::runtime_error otherwise.
void wait_ready(Engine& engine, std::FILE* err, bool verbose) {
  Event e;
  for (;;) {
    if (!engine.wait(e, std::chrono::milliseconds(200))) continue;
    if (auto* r = std::get_if<ev::Ready>(&e)) {
      if (verbose) {
        std::fprintf(err, "[%s %s | %s | %s | ctx %d | template %s]\n", r->model_name.c_str(),
                     r->quant.c_str(), r->backend.c_str(), r->device_name.c_str(), r->n_ctx,
                     r->chat_template.c_str());
      }
      return;
    }
    if (auto* f = std::get_if<ev::LoadFailed>(&e)) {
      // A malformed model file is bad input (exit 2), like a missing one.
      if (f->bad_file) throw UsageError(f->message);
      // main() puts the compiler's log in the log file.
      if (!f->build_log.empty()) {
        throw ClBuildError(f->message, CL_BUILD_PROGRAM_FAILURE, f->build_log);
      }
      throw std::runtime_error(f->message);
    }
    if (auto* n = std::get_if<ev::Notice>(&e))
      std::fprintf(err, "clchat: %s\n", n->message.c_str());
  }
}

// "[cl objects <when>live buffers N ... | created N released N]" on `err`.
void print_cl_object_counts(std::FILE* err, const char* when) {
  std::fprintf(err, "[cl objects %s%s]\n", when,
               format_cl_object_counts(cl_object_counts()).c_str());
}

// Streams one reply until TurnFinished. Returns false when the turn failed
// (its error is printed).
bool print_reply(Engine& engine, std::FILE* out, std::FILE* err, bool verbose) {
  CancelOnSigint sigint;
  bool started = false;  // a non-space character has been printed
  bool failed = false;
  ev::Stats stats;
  Event e;
  for (;;) {
    if (g_interrupted.exchange(false)) engine.cancel();
    if (!engine.wait(e, std::chrono::milliseconds(100))) continue;
    if (auto* t = std::get_if<ev::TokenText>(&e)) {
      std::string_view piece = t->piece;
      if (!started) {
        const size_t at = piece.find_first_not_of(" \t\r\n");
        piece = at == std::string_view::npos ? std::string_view() : piece.substr(at);
        started = !piece.empty();
      }
      // (An empty view's data() may be null, which fwrite must not get.)
      if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), out);
      std::fflush(out);
    } else if (auto* s = std::get_if<ev::Stats>(&e)) {
      if (!s->live) stats = *s;
    } else if (auto* x = std::get_if<ev::Error>(&e)) {
      std::fprintf(err, "clchat: %s\n", x->message.c_str());
      failed = true;
    } else if (auto* n = std::get_if<ev::Notice>(&e)) {
      std::fprintf(err, "clchat: %s\n", n->message.c_str());
    } else if (auto* c = std::get_if<ev::ContextTrimmed>(&e)) {
      std::fprintf(err, "clchat: context full: dropped the %d oldest turns (%d tokens)\n",
                   c->turns_dropped, c->tokens_dropped);
    } else if (std::holds_alternative<ev::TurnFinished>(e)) {
      std::fputs("\n", out);
      std::fflush(out);
      if (verbose) std::fprintf(err, "%s\n", format_stats_line(stats).c_str());
      return !failed;
    }
  }
}

}  // namespace

std::string format_stats_line(const ev::Stats& s) {
  char line[256];
  std::snprintf(line, sizeof line,
                "[prefill %d tok %.1f tok/s | decode %d tok %.1f tok/s | ttft %.1f ms | cache "
                "%d/%d]",
                s.prefill_tokens, s.prefill_tok_s, s.decode_tokens, s.decode_tok_s, s.ttft_ms,
                s.cache_used, s.cache_capacity);
  return line;
}

void add_chat_options(CLI::App& app, ChatOptions& o) {
  EngineOptions& e = o.engine;
  SamplingParams& s = e.sampling;
  app.add_option("-m,--model", e.model_path, "GGUF model file (default: the SmolLM2 model)");
  app.add_option("--device", e.device, "OpenCL device: cpu, gpu, INDEX or NAME substring");
  app.add_option("-c,--ctx", e.n_ctx, "KV cache size (default: the model's, capped by memory)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--system", e.system_prompt, "System prompt (default: the template's)");
  add_chat_template_option(app, e.chat_template);
  // A sampling flag, checked by its config key's rule.
  const auto number = [&app](const char* flag, auto& value, const char* help,
                             const config::NumberRule& rule) {
    app.add_option(flag, value, help)->capture_default_str()->check(rule_validator(rule));
  };
  number("--temp", s.temperature, "Temperature; 0 = greedy on the device",
         config::rules::temperature);
  number("--top-k", s.top_k, "Top-k (0: off)", config::rules::top_k);
  number("--top-p", s.top_p, "Top-p (1: off)", config::rules::top_p);
  number("--min-p", s.min_p, "Min-p (0: off)", config::rules::min_p);
  number("--repeat-penalty", s.repeat_penalty, "Repeat penalty (1: off)",
         config::rules::repeat_penalty);
  add_seed_option(app, s.seed, "Sampling seed");
  number("-n,--max-tokens", s.max_tokens, "Reply length limit", config::rules::max_tokens);
  app.add_option("--backend", e.backend, "reference (CPU) or opencl")
      ->capture_default_str()
      ->check(CLI::IsMember({"reference", "opencl"}));
  add_engine_flags(app, e.switches);
  app.add_flag("--verbose", o.verbose, "A statistics line on stderr after every reply");
  app.add_flag("--cl-object-counts", o.cl_object_counts,
               "Line mode: live OpenCL objects by kind on stderr after every reply and at exit");
}

int run_line_chat(const ChatOptions& options, std::istream& in, std::FILE* out, std::FILE* err) {
  EngineOptions engine_options = options.engine;
  if (engine_options.model_path.empty()) engine_options.model_path = default_model_path();
  if (!std::filesystem::exists(engine_options.model_path)) {
    throw UsageError("no model file '" + engine_options.model_path + "'");
  }
  bool turns_failed = false;  // exit status 1, after the remaining lines
  {
    Engine engine(engine_options);
    wait_ready(engine, err, options.verbose);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      engine.post(cmd::SubmitTurn{line});
      if (!print_reply(engine, out, err, options.verbose)) turns_failed = true;
      // After TurnFinished the engine thread is idle until the next turn.
      if (options.cl_object_counts) print_cl_object_counts(err, "");
    }
  }  // the engine thread has stopped and released its OpenCL objects
  if (options.cl_object_counts) print_cl_object_counts(err, "at exit ");
  return turns_failed ? 1 : 0;
}

int run_chat(const ChatOptions& options) {
  // Line mode only: the chat screen for terminals is run_interactive()
  // (app/chat_screen.cpp), which main() calls and which falls back to this
  // when stdin or stdout is not a terminal.
  return run_line_chat(options, std::cin, stdout, stderr);
}

}  // namespace clchat::app
