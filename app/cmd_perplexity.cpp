// `clchat perplexity`: perplexity of a model on a text file, measured the way
// llama.cpp's llama-perplexity does it (tools/perplexity), so the numbers
// compare: the whole text is tokenized once (BOS prepended only if the model
// asks for one), cut into non-overlapping windows of --ctx tokens (a tail
// shorter than a window is dropped; at least two windows are needed); each
// window starts from an empty cache, its first token replaced by BOS when the
// model adds BOS; only the second half of each window is scored (positions
// ctx/2 .. ctx-2 predicting the next token), so every scored token has at
// least ctx/2 tokens of context. stdout gets the running perplexity after
// each window, "[i]value," as llama-perplexity prints it, then
// "Final estimate: PPL = <value> +/- <standard error>", the error being
// ppl * sqrt(var(log p) / (count - 1)). Timing goes to stderr.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "app/commands.h"
#include "engine/cl/forward.h"
#include "engine/model/backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat::app {

namespace {

struct PerplexityOptions {
  std::string model_path;
  std::string text_path;
  int n_ctx = 512;
  int chunk = 512;
  std::string backend = "opencl";
  std::string device;
  EngineSwitches switches;
  std::vector<std::string> tune;  // --tune KEY=VALUE
};

// log p(target) under softmax(logits), in float64.
double log_prob(std::span<const float> logits, int32_t target) {
  float max = logits[0];
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max);
  return double(logits[size_t(target)]) - max - std::log(sum);
}

void perplexity(const PerplexityOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const std::string text = read_text_file(opt.text_path);
  const Model model = load_model(opt.model_path.empty() ? default_model_path() : opt.model_path);
  const auto tokenizer = Tokenizer::from_gguf(*model.file);
  std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
  const int n_ctx = opt.n_ctx;
  const int n_windows = int(tokens.size() / size_t(n_ctx));
  if (n_windows < 2) {
    throw UsageError("the text has " + std::to_string(tokens.size()) +
                     " tokens; perplexity needs at least 2 * ctx = " + std::to_string(2 * n_ctx));
  }
  std::unique_ptr<ClRuntime> runtime;
  std::unique_ptr<Backend> backend;
  if (opt.backend == "reference") {
    backend = make_reference_backend(model, n_ctx);
  } else {
    const DeviceInfo device = select_device(opt.device);
    runtime = std::make_unique<ClRuntime>(device, false, opt.switches.kernel_cache);
    ClForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.prefill_chunk = opt.chunk;
    fo.tuning = tuning_with(device, opt.switches, opt.tune);
    backend = std::make_unique<ClForward>(model, *runtime, fo);
  }
  std::fprintf(stderr, "perplexity: %zu tokens, %d windows of %d, %s\n", tokens.size(), n_windows,
               n_ctx, backend->name().c_str());

  const int first = n_ctx / 2;  // scored: logits of positions first .. n_ctx - 2
  const size_t n_vocab = size_t(model.config.n_vocab);
  const auto t0 = Clock::now();
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  std::vector<float> logits;
  for (int w = 0; w < n_windows; ++w) {
    std::vector<int32_t> window(tokens.begin() + int64_t(w) * n_ctx,
                                tokens.begin() + int64_t(w + 1) * n_ctx);
    if (tokenizer->add_bos() && tokenizer->bos_id() >= 0) window[0] = tokenizer->bos_id();
    // The last position predicts nothing in the window: run only n_ctx - 1.
    backend->prefill_logits(std::span(window).first(size_t(n_ctx - 1)), 0, first, logits);
    for (int i = first; i < n_ctx - 1; ++i) {
      const std::span<const float> row(logits.data() + size_t(i - first) * n_vocab, n_vocab);
      const double lp = log_prob(row, window[size_t(i + 1)]);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    std::printf("[%d]%.4f,", w + 1, std::exp(nll / double(count)));
    std::fflush(stdout);
  }
  std::printf("\n");
  const double mean = nll / double(count);
  const double var = nll2 / double(count) - mean * mean;
  const double ppl = std::exp(mean);
  const double err = var > 0 ? ppl * std::sqrt(var / double(count - 1)) : 0.0;
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "perplexity: %lld tokens scored in %.1f s (%.1f tok/s through the model)\n",
               static_cast<long long>(count), seconds, double(n_windows) * (n_ctx - 1) / seconds);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
}

}  // namespace

void add_perplexity_command(CLI::App& app, EngineSwitches& engine) {
  auto opt = std::make_shared<PerplexityOptions>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity on a text file (as llama-perplexity)");
  cmd->add_option("-m,--model", opt->model_path, "GGUF model file");
  cmd->add_option("-f,--file", opt->text_path, "Text file")->required();
  cmd->add_option("-c,--ctx", opt->n_ctx, "Window (context) size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--chunk", opt->chunk, "Prefill chunk size (1: position by position)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--backend", opt->backend, "opencl or reference")
      ->capture_default_str()
      ->check(CLI::IsMember({"opencl", "reference"}));
  cmd->add_option("--device", opt->device, "OpenCL device: cpu, gpu, INDEX or NAME substring");
  add_engine_flags(*cmd, engine);
  add_tune_option(*cmd, opt->tune);
  cmd->callback([opt, &engine] {
    opt->switches = engine;
    perplexity(*opt);
  });
}

}  // namespace clchat::app
