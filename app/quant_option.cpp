// --quant NAME, shared by `clchat bench --synthetic` and `clchat synth`: the
// weight types of a synthetic model, as a QuantMix (engine/model/quant_mix.h),
// and its shape (--synthetic / --preset NAME).
#include <stdexcept>

#include "app/commands.h"
#include "engine/model/quant_mix.h"

namespace clchat::app {

namespace {

std::string mix_names(bool llama_rule) {
  std::string s;
  for (const QuantMix& mix : quant_mixes()) {
    if (mix.llama_rule == llama_rule) s += (s.empty() ? "" : ", ") + std::string(mix.name);
  }
  return s;
}

}  // namespace

CLI::Option* add_quant_option(CLI::App& cmd, std::string& quant) {
  const std::string help =
      "Weight types of the synthetic model: one type for the layer matrices (" + mix_names(false) +
      "; embedding Q8_0), or a llama-quantize file type, typed tensor by tensor as "
      "llama-quantize does (" +
      mix_names(true) +
      "). Types with 256-value blocks fall back as llama-quantize's do where rows are "
      "not whole blocks";
  auto check = [](std::string& name) -> std::string {
    if (quant_mix_from_name(name)) return "";
    return "unknown quantization '" + name + "' (accepted: " + quant_mix_names() + ")";
  };
  return cmd.add_option("--quant", quant, help)
      ->capture_default_str()
      ->type_name("NAME")
      ->check(CLI::Validator(check, "", "QuantMix"));
}

QuantMix quant_mix_or_throw(const std::string& name) {
  const auto mix = quant_mix_from_name(name);
  if (!mix)
    throw UsageError("unknown quantization '" + name + "' (accepted: " + quant_mix_names() + ")");
  return *mix;
}

SyntheticSpec synthetic_preset_or_throw(const std::string& name) {
  try {
    return synthetic_preset(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace clchat::app
