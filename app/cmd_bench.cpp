// `clchat bench`: prompt processing (pp) and generation (tg) speed, modelled
// on llama-bench. Each test runs once as a warm-up, then -r times; the result
// is tok/s as mean and standard deviation over the repetitions. --tune
// KEY=VALUE sets any field of the engine's tuning (engine/cl/tuning.h) for
// A/B runs; --tune help lists them with the device's defaults. The sampling
// flags (--temp, --top-k, ..., as the chat's) make tg sample as the chat
// does (Backend::decode_sample: on the device where it can, draw number =
// token index); the default is greedy, the device argmax.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "config/number_rules.h"
#include "engine/chat/sampler.h"
#include "engine/cl/device_fit.h"
#include "engine/cl/forward.h"
#include "engine/cl/read_bandwidth.h"
#include "engine/model/synthetic.h"

namespace clchat::app {

namespace {

struct BenchOptions {
  std::string model_path;
  std::string synthetic;
  std::string quant = "q4_0";
  int n_prompt = 512;
  int n_gen = 128;
  int n_depth = 0;
  int reps = 5;
  bool json = false;
  std::string device;
  bool profile = false;
  EngineSwitches switches;
  std::vector<std::string> tune;  // KEY=VALUE, or "help"
  SamplingParams sampling;        // greedy unless --temp > 0 or a penalty
};

struct Sample {
  double mean = 0, sd = 0;
};

Sample mean_sd(const std::vector<double>& v) {
  Sample s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0.0;
  return s;
}

using Clock = std::chrono::steady_clock;

// Prompt of n deterministic token ids (never 0, which is often a special id).
std::vector<int32_t> bench_tokens(int n, int n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[size_t(i)] = 1 + int32_t((uint64_t(i) * 2654435761u) % uint64_t(n_vocab - 1));
  return t;
}

double run_pp(ClForward& fwd, const std::vector<int32_t>& tokens, int depth) {
  const auto t0 = Clock::now();
  fwd.prefill(tokens, depth);
  return double(tokens.size()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Greedy without penalties: the device argmax; else decode_sample with the
// context (the depth's tokens, then each one fed) as the penalties' window.
double run_tg(ClForward& fwd, int n, int depth, int n_vocab, const SamplingParams& sampling) {
  int32_t next = bench_tokens(1, n_vocab)[0];
  const bool argmax = sampling.greedy() && !sampling.penalized();
  std::vector<int32_t> context = bench_tokens(depth, n_vocab);
  context.reserve(size_t(depth + n));
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (argmax) {
      next = fwd.decode_argmax(next, depth + i);
      continue;
    }
    context.push_back(next);
    next = fwd.decode_sample(next, depth + i, sampling, uint64_t(i), context);
  }
  fwd.settle();  // steps enqueued ahead count: the device spent the time
  return double(n) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// What a tg test's tokens read: bytes per token (the mean over its
// positions), at its speed in bytes per second, beside the device's own read
// bandwidth (measured once, cached beside the kernel cache).
struct ReadShare {
  double bytes_per_token = 0;
  double bytes_per_s = 0;
  ReadBandwidth device;  // bytes_per_s 0: the measurement failed (logged)
};

ReadShare read_share(const ClForward& fwd, int depth, int n_gen, double tok_per_s) {
  ReadShare r;
  for (int i = 0; i < n_gen; ++i) r.bytes_per_token += double(fwd.decode_read_bytes(depth + i));
  r.bytes_per_token /= n_gen;
  r.bytes_per_s = r.bytes_per_token * tok_per_s;
  try {  // e.g. no room for the 1 GiB buffer beside a large model: the tests' figures stay
    r.device = device_read_bandwidth(fwd.runtime(), fwd.runtime().kernel_cache());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clchat: the device's read bandwidth was not measured: %s\n", e.what());
  }
  return r;
}

void print_read_share(const ReadShare& r, int n_gen) {
  if (r.device.bytes_per_s <= 0) {
    std::printf("\ntg%d reads %.1f MB a token (weights and KV cache): %.1f GB/s\n", n_gen,
                r.bytes_per_token / 1e6, r.bytes_per_s / 1e9);
    return;
  }
  std::printf(
      "\ntg%d reads %.1f MB a token (weights and KV cache): %.1f GB/s, %.0f%% of the %.1f GB/s "
      "this device reads (%s)\n",
      n_gen, r.bytes_per_token / 1e6, r.bytes_per_s / 1e9,
      100.0 * r.bytes_per_s / r.device.bytes_per_s, r.device.bytes_per_s / 1e9,
      r.device.cached ? "measured before, read-bandwidth.json"
                      : "measured now, kept in read-bandwidth.json");
}

void print_profile(const ProfileReport& p) {
  std::printf("\nprofile of one decode token: %d launches, %.1f us of device time\n", p.n_launches,
              p.total_us);
  for (const auto& [name, us] : p.kernel_us) {
    std::printf("  %-12s %9.1f us  %5.1f%%\n", name.c_str(), us, 100.0 * us / p.total_us);
  }
  for (size_t il = 0; il < p.layer_us.size(); ++il) {
    std::printf("  L%-3zu %8.1f us\n", il, p.layer_us[il]);
  }
}

// --tune help: every key with its type, this device's default and what it
// sets.
void print_tuning_keys(const BenchOptions& opt) {
  const DeviceInfo device = select_device(opt.device);
  const Tuning t = Tuning::for_device(device, opt.switches);
  std::printf("--tune KEY=VALUE keys (defaults for %s):\n", device.name.c_str());
  for (const TuningKey& k : tuning_keys()) {
    const std::string value = k.get(t);
    std::printf("  %-19s %-6s %-60s default %s\n", std::string(k.name).c_str(),
                std::string(k.type).c_str(), std::string(k.help).c_str(),
                value.empty() ? "\"\"" : value.c_str());
  }
}

void bench(const BenchOptions& opt) {
  if (std::find(opt.tune.begin(), opt.tune.end(), "help") != opt.tune.end()) {
    print_tuning_keys(opt);
    return;
  }
  {  // unknown keys and malformed values before anything is loaded
    Tuning any;
    try {
      for (const std::string& kv : opt.tune) set_tuning(any, kv);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  std::string path = opt.model_path;
  bool remove_after = false;
  std::string quant_name;
  if (!opt.synthetic.empty()) {
    SyntheticSpec spec = synthetic_preset_or_throw(opt.synthetic);
    spec.mix = quant_mix_or_throw(opt.quant);
    path = write_synthetic_model_tmp(spec);
    remove_after = true;
  } else if (path.empty()) {
    path = default_model_path();
  }
  std::unique_ptr<ClRuntime> rt;
  std::unique_ptr<ClForward> fwd;
  Model model;
  try {
    const DeviceInfo device = select_device(opt.device);
    ClForwardOptions fo;
    fo.tuning = tuning_with(device, opt.switches, opt.tune);
    model = load_model(path);
    rt = std::make_unique<ClRuntime>(device, opt.profile, opt.switches.kernel_cache);
    fo.n_ctx = opt.n_depth + std::max(opt.n_prompt, opt.n_gen) + 1;
    fwd = std::make_unique<ClForward>(model, *rt, fo);
    if (fwd->n_ctx() < fo.n_ctx)
      std::fprintf(stderr, "clchat: %s\n",
                   context_reduced_note(fo.n_ctx, fwd->n_ctx(), device.name).c_str());
  } catch (...) {
    if (remove_after) std::filesystem::remove(path);
    throw;
  }
  if (remove_after) std::filesystem::remove(path);  // mapped: stays readable until closed

  const std::string quant = describe_weight_type(model);
  const std::string device = rt->device().name;
  nlohmann::ordered_json records = nlohmann::json::array();
  if (!opt.json) {
    std::printf("| model | quant | device | launches/token | test | t/s |\n");
    std::printf("| --- | --- | --- | ---: | --- | ---: |\n");
  }
  // llama-bench names a test at depth D "tg128 @ d512".
  const std::string at_depth = opt.n_depth > 0 ? " @ d" + std::to_string(opt.n_depth) : "";
  // launches_extra: the sampling chain's (1 a token, after the step's).
  auto report = [&](const std::string& name, int n_prompt, int n_gen, const Sample& s,
                    int launches_extra = 0) {
    const std::string test = name + at_depth;
    const int launches = fwd->launches_per_token() + launches_extra;
    if (opt.json) {
      records.push_back({{"test", test},
                         {"n_prompt", n_prompt},
                         {"n_gen", n_gen},
                         {"n_depth", opt.n_depth},
                         {"avg_ts", s.mean},
                         {"stddev_ts", s.sd},
                         {"model", model.config.name},
                         {"quant", quant},
                         {"device", device},
                         {"launches_per_token", launches}});
      if (n_gen > 0) {
        const ReadShare r = read_share(*fwd, opt.n_depth, n_gen, s.mean);
        records.back()["bytes_per_token"] = r.bytes_per_token;
        records.back()["read_bytes_per_s"] = r.bytes_per_s;
        if (r.device.bytes_per_s > 0) {
          records.back()["device_read_bytes_per_s"] = r.device.bytes_per_s;
        }
      }
    } else {
      std::printf("| %s | %s | %s | %d | %s | %.2f ± %.2f |\n", model.config.name.c_str(),
                  quant.c_str(), device.c_str(), launches, test.c_str(), s.mean, s.sd);
      std::fflush(stdout);
    }
  };
  const int n_vocab = model.config.n_vocab;
  // The context before each test: positions 0..depth-1, filled once; the tests
  // write only at depth.. so they all see the same cache. A sliding-window
  // model's rings lose the window before depth to a run longer than a
  // prefill chunk: the depth is filled again (untimed) before the next run.
  const auto fill_depth = [&] {
    if (opt.n_depth > 0 && !fwd->can_resume(opt.n_depth)) {
      fwd->prefill(bench_tokens(opt.n_depth, n_vocab), 0);
    }
  };
  if (opt.n_depth > 0) fwd->prefill(bench_tokens(opt.n_depth, n_vocab), 0);
  double tg_mean = 0;
  if (opt.n_prompt > 0) {
    const auto tokens = bench_tokens(opt.n_prompt, n_vocab);
    run_pp(*fwd, tokens, opt.n_depth);  // warm-up
    std::vector<double> v;
    for (int r = 0; r < opt.reps; ++r) {
      fill_depth();
      v.push_back(run_pp(*fwd, tokens, opt.n_depth));
    }
    report("pp" + std::to_string(opt.n_prompt), opt.n_prompt, 0, mean_sd(v));
  }
  if (opt.n_gen > 0) {
    const SamplingParams& s = opt.sampling;
    fill_depth();
    run_tg(*fwd, opt.n_gen, opt.n_depth, n_vocab, s);  // warm-up
    std::vector<double> v;
    for (int r = 0; r < opt.reps; ++r) {
      fill_depth();
      v.push_back(run_tg(*fwd, opt.n_gen, opt.n_depth, n_vocab, s));
    }
    std::string name = "tg" + std::to_string(opt.n_gen);
    int chain_launches = 0;
    if (!s.greedy() || s.penalized()) {
      const bool on_device = fwd->device_sampling(s);
      name += on_device ? " (sampled on the device)" : " (sampled on the host)";
      chain_launches = on_device ? 1 : 0;
    }
    const Sample tg = mean_sd(v);
    report(name, 0, opt.n_gen, tg, chain_launches);
    tg_mean = tg.mean;
  }
  if (opt.json) {
    std::cout << records.dump(2) << "\n";
    return;
  }
  if (tg_mean > 0) print_read_share(read_share(*fwd, opt.n_depth, opt.n_gen, tg_mean), opt.n_gen);
  if (opt.profile) print_profile(fwd->profile());
}

}  // namespace

void add_bench_command(CLI::App& app, EngineSwitches& engine) {
  auto opt = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  auto* m = cmd->add_option("-m,--model", opt->model_path, "GGUF model file");
  auto* s = cmd->add_option(
      "--synthetic", opt->synthetic,
      "Benchmark a synthetic model of this shape instead (" + synthetic_preset_names() + ")");
  m->excludes(s);
  add_quant_option(*cmd, opt->quant);
  cmd->add_option("-p,--n-prompt", opt->n_prompt, "Prompt tokens (0: skip the pp test)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-n,--n-gen", opt->n_gen, "Generated tokens (0: skip the tg test)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-d,--n-depth", opt->n_depth,
                  "Tokens already in the context when each test starts (filled once, not timed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-r,--repetitions", opt->reps, "Measured repetitions after one warm-up")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", opt->json, "Print a JSON array of records, like llama-bench");
  {  // tg's sampling, checked as the chat's flags are
    SamplingParams& s = opt->sampling;
    const auto number = [cmd](const char* flag, auto& value, const char* help,
                              const config::NumberRule& rule) {
      cmd->add_option(flag, value, help)->capture_default_str()->check(rule_validator(rule));
    };
    namespace rules = config::rules;
    number("--temp", s.temperature, "tg: sampling temperature (0: greedy, the device argmax)",
           rules::temperature);
    number("--top-k", s.top_k, "tg: top-k (0: off; 1..256 sample on the device)", rules::top_k);
    number("--top-p", s.top_p, "tg: top-p (1: off)", rules::top_p);
    number("--min-p", s.min_p, "tg: min-p (0: off)", rules::min_p);
    number("--repeat-penalty", s.repeat_penalty, "tg: repeat penalty (1: off)",
           rules::repeat_penalty);
    number("--repeat-last-n", s.repeat_last_n, "tg: tokens the penalties look back over",
           rules::repeat_last_n);
    add_seed_option(*cmd, s.seed, "tg: sampling seed");
  }
  cmd->add_option("--device", opt->device, "OpenCL device: cpu, gpu, INDEX or NAME substring");
  cmd->add_flag("--profile", opt->profile, "Per-kernel and per-layer device times (OpenCL events)");
  add_engine_flags(*cmd, engine);
  add_tune_option(*cmd, opt->tune);
  cmd->callback([opt, &engine] {
    opt->switches = engine;
    bench(*opt);
  });
}

}  // namespace clchat::app
