// Line-mode chat over the engine thread, and the choice of front end. Line
// mode reads stdin line by line (app/line_commands.h): a message is posted as
// a user turn, its reply streamed to stdout (leading white space dropped, a
// newline after it) before the next line is read; a /command is run as on
// the chat screen. Ctrl-C during a reply cancels it (the partial reply stays
// in the conversation); at the prompt it quits.
#include "app/cmd_chat.h"

#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include "app/commands.h"
#include "app/line_commands.h"
#include "engine/chat/template.h"
#include "engine/cl/build_error.h"
#include "engine/cl/object_counts.h"
#include "engine/engine.h"

namespace clchat::app {

namespace {

// Waits for Ready; prints notices. Throws the message when loading failed:
// UsageError for a malformed model file, std::runtime_error otherwise.
ev::Ready wait_ready(Engine& engine, std::FILE* err, bool verbose) {
  Event e;
  for (;;) {
    if (!engine.wait(e, std::chrono::milliseconds(200))) continue;
    if (auto* r = std::get_if<ev::Ready>(&e)) {
      if (verbose) {
        // Backend::name() names the device too ("opencl (pthread-...)"): once is enough.
        const std::string backend = r->backend.substr(0, r->backend.find(" ("));
        std::fprintf(err, "[%s %s | %s | %s | ctx %d | template %s]\n", r->model_name.c_str(),
                     r->quant.c_str(), backend.c_str(), r->device_name.c_str(), r->n_ctx,
                     r->chat_template.c_str());
      }
      return *r;
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
  // A sampling flag, checked by its config key's rule; given, it wins over
  // the model's recommendation (`from_model`).
  const auto number = [&app](const char* flag, auto& value, const char* help,
                             const config::NumberRule& rule, bool* from_model) {
    auto* o = app.add_option(flag, value, help)->capture_default_str()->check(rule_validator(rule));
    if (from_model) o->each([from_model](const std::string&) { *from_model = false; });
  };
  SamplingFields& m = e.model_sampling;
  namespace rules = config::rules;
  number("--temp", s.temperature,
         "Temperature; 0 = greedy on the device (default: the model's recommendation, else 0.8)",
         rules::temperature, &m.temperature);
  number("--top-k", s.top_k, "Top-k (0: off)", rules::top_k, &m.top_k);
  number("--top-p", s.top_p, "Top-p (1: off)", rules::top_p, &m.top_p);
  number("--min-p", s.min_p, "Min-p (0: off)", rules::min_p, &m.min_p);
  number("--repeat-penalty", s.repeat_penalty, "Repeat penalty (1: off)", rules::repeat_penalty,
         &m.repeat_penalty);
  number("--repeat-last-n", s.repeat_last_n, "Tokens the penalties look back over",
         rules::repeat_last_n, &m.repeat_last_n);
  number("--frequency-penalty", s.frequency_penalty, "Frequency penalty (0: off)",
         rules::frequency_penalty, nullptr);
  number("--presence-penalty", s.presence_penalty, "Presence penalty (0: off)",
         rules::presence_penalty, nullptr);
  add_seed_option(app, s.seed, "Sampling seed (default: a new one each session)");
  number("-n,--max-tokens", s.max_tokens, "Reply length limit", rules::max_tokens, nullptr);
  app.add_option("--backend", e.backend, "reference (CPU) or opencl")
      ->capture_default_str()
      ->check(CLI::IsMember({"reference", "opencl"}));
  add_engine_flags(app, e.switches);
  app.add_flag("--verbose", o.verbose, "A statistics line on stderr after every reply");
  app.footer(
      "Line mode (stdin or stdout not a terminal): each line is a message, its reply one line on "
      "stdout. Lines starting with / are the chat screen's commands (/help, /set KEY VALUE, "
      "/set greedy, /show, /stats, /system, /clear, /regen, /save, /load, /quit); what they show "
      "and any error go to stderr. Start a line with // to send a message beginning with /.");
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
    const ev::Ready ready = wait_ready(engine, err, options.verbose);
    LineChat chat{engine,
                  out,
                  err,
                  options.verbose,
                  ready,
                  ready.sampling,
                  ready.from_model,
                  {ready.model_name, ready.system_prompt, {}},
                  {},
                  false};
    std::string line;
    while (!chat.quit && std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (!handle_line(chat, line)) turns_failed = true;
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
