// Subcommands of the clchat executable. Each add_*_command registers its
// options and callback on the CLI11 app; errors propagate as exceptions and
// main() maps them to exit codes (2: bad usage or input file, 1: other).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/number_rules.h"
#include "engine/cl/tuning.h"
#include "engine/messages.h"
#include "engine/model/quant_mix.h"
#include "engine/model/synthetic.h"

namespace clchat::app {

// Bad usage or bad input: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ends clchat with `code` once a command has printed why (line mode's
// failed turns: exit 1 after the remaining lines).
class ExitStatus : public std::exception {
 public:
  explicit ExitStatus(int exit_code) : code(exit_code) {}
  const char* what() const noexcept override { return "exit status"; }
  int code;
};

void add_info_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_devices_command(CLI::App& app);
void add_synth_command(CLI::App& app);
// Commands that build an OpenCL engine. `engine` (it must outlive parsing)
// holds the config file's [engine] switches; the engine flags, given before
// the command or after it, override them in place (only one command runs).
void add_run_command(CLI::App& app, EngineSwitches& engine);
void add_bench_command(CLI::App& app, EngineSwitches& engine);
void add_perplexity_command(CLI::App& app, EngineSwitches& engine);

// --chat-template NAME, checked against the template styles' names (an
// unknown one fails parsing with the list).
CLI::Option* add_chat_template_option(CLI::App& cmd, std::string& name);

// --quant NAME: a synthetic model's weight types, checked against
// quant_mix.h's names (an unknown one fails parsing with the list).
CLI::Option* add_quant_option(CLI::App& cmd, std::string& quant);
// The mix `name` stands for; UsageError when there is none.
QuantMix quant_mix_or_throw(const std::string& name);
// The synthetic shape `name` stands for (bench --synthetic, synth --preset);
// UsageError when there is none.
SyntheticSpec synthetic_preset_or_throw(const std::string& name);

// A flag's value checked by a config rule (config/number_rules.h), so that a
// flag refuses what the config file refuses (NaN included).
CLI::Validator rule_validator(const config::NumberRule& rule);
// --seed S by config::rules::seed into `seed`; -1 picks a random seed.
CLI::Option* add_seed_option(CLI::App& cmd, uint64_t& seed, const std::string& help);
// A config seed as the engine's: -1 is a new random one.
uint64_t seed_or_random(int64_t seed);

// --no-persistent, --no-tensor-cores, --no-lookahead, --kernel-cache DIR.
void add_engine_flags(CLI::App& cmd, EngineSwitches& switches);
// --tune KEY=VALUE (repeatable), a tuning field for A/B runs.
CLI::Option* add_tune_option(CLI::App& cmd, std::vector<std::string>& tune);
// The device's tuning with the switches and every KEY=VALUE of `tune`
// applied, checked against the device (a bad key or value: UsageError).
Tuning tuning_with(const DeviceInfo& device, const EngineSwitches& switches,
                   const std::vector<std::string>& tune);

// The model to use when -m is not given: $CLCHAT_MODEL, else the default
// SmolLM2 GGUF under assets/models/ (beside the executable's source tree or the
// current directory). Throws UsageError saying how to get one.
std::string default_model_path();

// The largest text `tokenize -f` and `perplexity -f` read (wiki.test.raw,
// the usual perplexity text, is 1.3 MiB).
constexpr uint64_t k_max_text_bytes = uint64_t{256} << 20;
// The bytes of a text file for -f; UsageError (one line naming the path) when
// it is not a regular file or is over k_max_text_bytes.
std::string read_text_file(const std::string& path);

}  // namespace clchat::app
