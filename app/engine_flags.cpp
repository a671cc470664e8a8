// The OpenCL engine's switches on the command line (EngineSwitches,
// engine/messages.h): the same four flags on every command that builds an
// OpenCL engine, each overriding its key in the config file's [engine] table;
// --tune for the commands that take it.
#include "app/commands.h"

namespace clchat::app {

void add_engine_flags(CLI::App& cmd, EngineSwitches& s) {
  cmd.add_flag_callback(
      "--no-persistent", [&s] { s.persistent_decode = false; },
      "Decode with the multi-kernel plan, not the one-launch persistent kernel (config: "
      "engine.persistent_decode)");
  cmd.add_flag_callback(
      "--no-tensor-cores", [&s] { s.tensor_cores = false; },
      "Prefill without NVIDIA tensor cores (config: engine.tensor_cores)");
  cmd.add_flag_callback(
      "--no-lookahead", [&s] { s.lookahead = false; },
      "Do not queue greedy decode steps ahead of the host (config: engine.lookahead)");
  cmd.add_option("--kernel-cache", s.kernel_cache,
                 "Folder for compiled kernels (config: engine.kernel_cache; default "
                 "$CLCHAT_KERNEL_CACHE, else $XDG_CACHE_HOME/clchat/kernels)")
      ->type_name("DIR");
}

CLI::Option* add_tune_option(CLI::App& cmd, std::vector<std::string>& tune) {
  return cmd
      .add_option("--tune", tune,
                  "Set a decode or prefill tuning field for A/B runs (repeatable; bench --tune "
                  "help lists the keys, their types and this device's defaults)")
      ->type_name("KEY=VALUE");
}

Tuning tuning_with(const DeviceInfo& device, const EngineSwitches& switches,
                   const std::vector<std::string>& tune) {
  try {
    Tuning t = Tuning::for_device(device, switches);
    for (const std::string& kv : tune) set_tuning(t, kv);
    t.check(device);
    return t;
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace clchat::app
