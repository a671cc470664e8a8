// `clchat run`: one prompt, one greedy continuation, printed as it is made.
// stdout gets only the continuation (or its ids with --ids); statistics go to
// stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "app/cmd_chat.h"
#include "app/commands.h"
#include "engine/cl/device_fit.h"
#include "engine/cl/forward.h"
#include "engine/model/backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat::app {

namespace {

struct RunOptions {
  std::string model_path;
  std::string prompt;
  int n_predict = 128;
  std::string backend = "opencl";
  std::string device;
  bool debug = false;
  bool profile = false;
  bool ids = false;
  bool no_special = false;
  bool no_bos = false;
  bool ignore_eos = false;
  int n_ctx = 0;
  uint64_t seed = 0;
  bool chat = false;
  bool verbose = false;
  EngineSwitches switches;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Per-layer statistics and the top candidates of the latest position.
void print_debug_report(const DebugReport& r, const Tokenizer& tokenizer) {
  std::fprintf(stderr, "[debug] pos %d\n", r.pos);
  for (size_t il = 0; il < r.after_attention.size(); ++il) {
    for (int k = 0; k < 2; ++k) {
      const HiddenStats& s = k == 0 ? r.after_attention[il] : r.after_ffn[il];
      std::fprintf(
          stderr,
          "[debug]   L%-3zu %-4s mean %+.4f rms %.4f min %+.4f max %+.4f nan %lld inf %lld\n", il,
          k == 0 ? "attn" : "ffn", s.mean, s.rms, s.min, s.max, static_cast<long long>(s.n_nan),
          static_cast<long long>(s.n_inf));
    }
  }
  for (const auto& [id, p] : r.top) {
    std::fprintf(stderr, "[debug]   top %6d %-16s p=%.4f\n", id,
                 ("'" + tokenizer.token_text(id) + "'").c_str(), p);
  }
}

void print_profile(const ProfileReport& p) {
  std::fprintf(stderr, "[profile] last token: %d launches, %.1f us device time\n", p.n_launches,
               p.total_us);
  for (const auto& [name, us] : p.kernel_us) {
    std::fprintf(stderr, "[profile]   %-12s %9.1f us\n", name.c_str(), us);
  }
}

// The greedy continuation of `prompt`, printed as it is made.
void generate(const RunOptions& opt, Backend& backend, ClForward* cl, const Tokenizer& tokenizer,
              const std::vector<int32_t>& prompt) {
  auto print_debug = [&] {
    if (cl && opt.debug) print_debug_report(*cl->debug_report(), tokenizer);
  };

  const auto t0 = Clock::now();
  int32_t next = backend.prefill(prompt, 0);
  const double t_prefill_s = seconds_since(t0);
  print_debug();
  int pos = int(prompt.size());
  int n_generated = 0;
  Utf8StreamDecoder utf8;
  const auto t1 = Clock::now();
  std::string ids_line;
  while (n_generated < opt.n_predict) {
    ++n_generated;
    const bool eog = tokenizer.is_eog(next) && !opt.ignore_eos;
    if (opt.ids) {
      ids_line += (ids_line.empty() ? "" : " ") + std::to_string(next);
    } else if (!tokenizer.is_control(next)) {
      std::fputs(utf8.push(tokenizer.token_to_bytes(next)).c_str(), stdout);
      std::fflush(stdout);
    }
    if (eog || n_generated == opt.n_predict || pos >= backend.n_ctx()) break;
    next = backend.decode_argmax(next, pos++);
    print_debug();
  }
  const double t_decode_s = seconds_since(t1);
  if (opt.ids) {
    std::printf("%s\n", ids_line.c_str());
  } else {
    std::fputs(utf8.finish().c_str(), stdout);
    std::fputs("\n", stdout);
  }
  std::fflush(stdout);
  if (cl && opt.profile) print_profile(cl->profile());
  std::fprintf(stderr, "[%s | prefill %zu tok %.1f tok/s | decode %d tok %.1f tok/s]\n",
               backend.name().c_str(), prompt.size(), double(prompt.size()) / t_prefill_s,
               std::max(n_generated - 1, 0),
               n_generated > 1 ? (n_generated - 1) / t_decode_s : 0.0);
}

void run(const RunOptions& opt) {
  const Model model = load_model(opt.model_path.empty() ? default_model_path() : opt.model_path);
  const auto tokenizer = Tokenizer::from_gguf(*model.file);
  const std::vector<int32_t> prompt = tokenizer->encode(opt.prompt, !opt.no_bos, !opt.no_special);
  if (prompt.empty()) throw UsageError("the prompt is empty (give -p TEXT)");

  // The prefill needs the prompt's positions; each generated token but the
  // last is fed back at the next one (the loop stops at a full cache).
  const int n_ctx = opt.n_ctx > 0 ? opt.n_ctx
                                  : std::min(model.config.n_ctx_train,
                                             int(prompt.size()) + std::max(opt.n_predict - 1, 0));
  if (int(prompt.size()) > n_ctx) {
    throw UsageError("the prompt has " + std::to_string(prompt.size()) +
                     " tokens, more than the context of " + std::to_string(n_ctx));
  }
  std::unique_ptr<ClRuntime> runtime;
  std::unique_ptr<Backend> backend;
  ClForward* cl = nullptr;
  if (opt.backend == "reference") {
    backend = make_reference_backend(model, n_ctx);
  } else {
    const DeviceInfo device = select_device(opt.device);
    try {
      check_model_fits(model, device);
      runtime = std::make_unique<ClRuntime>(device, opt.profile, opt.switches.kernel_cache);
      ClForwardOptions fo;
      fo.n_ctx = n_ctx;
      fo.tuning = Tuning::for_device(device, opt.switches);
      auto forward = std::make_unique<ClForward>(model, *runtime, fo);
      if (forward->n_ctx() < n_ctx)
        std::fprintf(stderr, "clchat: %s\n",
                     context_reduced_note(n_ctx, forward->n_ctx(), device.name).c_str());
      cl = forward.get();
      cl->set_debug(opt.debug);
      backend = std::move(forward);
    } catch (...) {
      rethrow_with_device_hint(device);
    }
  }
  try {
    generate(opt, *backend, cl, *tokenizer, prompt);
  } catch (...) {
    if (runtime) rethrow_with_device_hint(runtime->device());
    throw;
  }
}

// `run --chat`: the same engine thread as `clchat` without a subcommand.
ChatOptions chat_options(const RunOptions& opt) {
  ChatOptions c;
  c.engine.model_path = opt.model_path;
  c.engine.device = opt.device;
  c.engine.backend = opt.backend;
  c.engine.n_ctx = opt.n_ctx;
  c.engine.sampling.seed = opt.seed;
  c.engine.sampling.max_tokens = opt.n_predict;
  c.engine.profiling = opt.profile;
  c.engine.switches = opt.switches;
  c.verbose = opt.verbose;
  return c;
}

}  // namespace

void add_run_command(CLI::App& app, EngineSwitches& engine) {
  auto opt = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate a continuation of one prompt");
  cmd->add_option("-m,--model", opt->model_path, "GGUF model file (default: the SmolLM2 model)");
  cmd->add_option("-p,--prompt", opt->prompt, "Prompt text; special tokens are recognised");
  cmd->add_flag("--chat", opt->chat, "Line-mode chat: each stdin line is a user turn");
  cmd->add_flag("--verbose", opt->verbose, "With --chat: a statistics line after every reply");
  cmd->add_option("-n,--n-predict", opt->n_predict, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--backend", opt->backend, "reference (CPU) or opencl")
      ->capture_default_str()
      ->check(CLI::IsMember({"reference", "opencl"}));
  cmd->add_option("--device", opt->device, "OpenCL device: cpu, gpu, INDEX or NAME substring");
  cmd->add_flag("--debug", opt->debug,
                "Debug readback: per-layer hidden-state statistics and top-5 to stderr");
  cmd->add_flag("--profile", opt->profile, "Per-kernel device times of the last token to stderr");
  cmd->add_flag("--ids", opt->ids, "Print the generated token ids instead of text");
  cmd->add_flag("--no-special", opt->no_special, "Treat special-token text in the prompt as text");
  cmd->add_flag("--no-bos", opt->no_bos, "Do not add BOS even if the model asks for it");
  cmd->add_flag("--ignore-eos", opt->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_option("-c,--ctx", opt->n_ctx, "Context size (default: prompt + n, capped by the model)")
      ->check(CLI::Range(0, 1 << 24));
  add_seed_option(*cmd, opt->seed, "Random seed (sampling is greedy by default)");
  add_engine_flags(*cmd, engine);
  cmd->callback([opt, &engine] {
    opt->switches = engine;
    if (opt->chat) {
      if (const int rc = run_line_chat(chat_options(*opt), std::cin, stdout, stderr)) {
        throw ExitStatus(rc);
      }
      return;
    }
    if (opt->prompt.empty()) throw UsageError("run needs -p PROMPT (or --chat)");
    run(*opt);
  });
}

}  // namespace clchat::app
