// `clchat synth`: writes a synthetic model (real shapes, random weights).
#include <cstdio>

#include "app/commands.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"

namespace clchat::app {

void add_synth_command(CLI::App& app) {
  struct SynthOptions {
    std::string preset = "smollm2-135m", quant = "q4_0", out, vocab_from;
    uint64_t seed = 1;
  };
  auto opt = std::make_shared<SynthOptions>();
  auto* cmd =
      app.add_subcommand("synth", "Write a synthetic model with real shapes and random weights");
  cmd->add_option("--preset", opt->preset, "Shape to copy (" + synthetic_preset_names() + ")")
      ->capture_default_str();
  add_quant_option(*cmd, opt->quant);
  cmd->add_option("-o,--output", opt->out, "Output GGUF file")->required();
  cmd->add_option("--vocab-from", opt->vocab_from, "Copy the tokenizer from this GGUF");
  cmd->add_option("--seed", opt->seed, "Random seed")->capture_default_str();
  cmd->callback([opt] {
    SyntheticSpec spec = synthetic_preset_or_throw(opt->preset);
    spec.mix = quant_mix_or_throw(opt->quant);
    spec.seed = opt->seed;
    std::unique_ptr<GgufFile> vocab;
    if (!opt->vocab_from.empty()) vocab = GgufFile::open(opt->vocab_from);
    make_synthetic_model(spec, vocab.get()).write(opt->out);
    const Model written = load_model(opt->out);  // mapped, not read: cheap
    std::fprintf(stderr, "wrote %s (%s, layer matrices %s)\n", opt->out.c_str(), spec.name.c_str(),
                 describe_weight_type(written).c_str());
  });
}

}  // namespace clchat::app
