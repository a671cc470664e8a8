// `clchat info -m MODEL [--json]`: what a model file holds.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.h"
#include "common/utf8.h"
#include "engine/chat/template.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat::app {

namespace {

// A float32 as the shortest decimal that reads back as it (1e-05, not the
// double 9.999999747378752e-06 that widening it gives).
double shortest(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

nlohmann::ordered_json describe(const Model& model) {
  const ModelConfig& c = model.config;
  const GgufFile& f = *model.file;
  std::map<std::string, int> type_counts;
  for (const auto& t : f.tensors()) ++type_counts[ggml_type_name(t.type)];
  nlohmann::ordered_json j;
  // Strings from the file may be any bytes; JSON output needs valid UTF-8.
  j["file"] = sanitize_utf8(f.path());
  j["file_size"] = f.file_size();
  j["gguf_version"] = f.version();
  j["name"] = sanitize_utf8(c.name);
  j["architecture"] = sanitize_utf8(c.arch);
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_head_kv"] = c.n_head_kv;
  j["head_dim"] = c.head_dim;
  j["n_ff"] = c.n_ff;
  j["n_vocab"] = c.n_vocab;
  j["n_ctx_train"] = c.n_ctx_train;
  j["n_rot"] = c.n_rot;
  j["rope_freq_base"] = shortest(c.rope_freq_base);
  j["rope_style"] = c.rope_style == RopeStyle::Neox ? "neox" : "adjacent";
  j["rope_freq_scale"] = shortest(c.rope_freq_scale);
  j["rope_freq_factors"] = c.rope_freq_factors;
  j["sliding_window"] = c.sliding_window;
  int n_swa = 0;
  for (int il = 0; il < c.n_layer; ++il) n_swa += c.is_swa(il) ? 1 : 0;
  j["sliding_window_layers"] = n_swa;
  j["rope_freq_base_swa"] = shortest(c.rope_freq_base_swa);
  j["rms_eps"] = shortest(c.rms_eps);
  // The graph's options (architecture.h), by name.
  nlohmann::ordered_json graph = nlohmann::ordered_json::array();
  if (c.embed_scale != 1.0f) graph.push_back("embedding scale");
  if (c.qkv_bias) graph.push_back("q/k/v biases");
  if (c.qk_norm) graph.push_back("q/k head norms");
  if (c.post_norms) graph.push_back("post-norms");
  graph.push_back(c.ffn_act == FfnActivation::GeluTanh ? "GELU" : "SiLU");
  j["graph"] = graph;
  j["tied_embeddings"] = c.tied_embeddings;
  j["weight_type"] = describe_weight_type(model);
  nlohmann::ordered_json layer_types = nlohmann::ordered_json::object();
  for (const auto& [type, n] : layer_weight_types(model)) layer_types[ggml_type_name(type)] = n;
  j["layer_weight_types"] = layer_types;  // most common first
  j["n_tensors"] = f.tensors().size();
  j["tensor_types"] = type_counts;
  j["tokenizer"] = sanitize_utf8(f.opt_string("tokenizer.ggml.model").value_or("none"));
  j["tokenizer_pre"] = sanitize_utf8(f.opt_string("tokenizer.ggml.pre").value_or(""));
  j["vocab_size"] =
      f.has("tokenizer.ggml.tokens") ? f.get_array("tokenizer.ggml.tokens").items.size() : 0;
  // The style the chat uses ("plain" when the template is missing or not
  // recognised), and whether the file has a template at all.
  j["chat_template"] = std::string(ChatTemplate::from_gguf(f, "").name());
  j["has_chat_template"] = f.has("tokenizer.chat_template");
  return j;
}

void print_text(const nlohmann::ordered_json& j) {
  auto s = [&](const char* k) { return j[k].dump(); };
  std::printf("file:          %s (%s bytes, GGUF v%s)\n", j["file"].get<std::string>().c_str(),
              s("file_size").c_str(), s("gguf_version").c_str());
  std::printf("name:          %s\n", j["name"].get<std::string>().c_str());
  std::printf("architecture:  %s\n", j["architecture"].get<std::string>().c_str());
  std::printf("embedding:     %s\n", s("n_embd").c_str());
  std::printf("layers:        %s\n", s("n_layer").c_str());
  std::printf("heads:         %s (KV %s, head dim %s)\n", s("n_head").c_str(),
              s("n_head_kv").c_str(), s("head_dim").c_str());
  std::printf("ffn:           %s\n", s("n_ff").c_str());
  std::printf("context:       %s\n", s("n_ctx_train").c_str());
  std::string rope = s("n_rot") + " dims, " + j["rope_style"].get<std::string>() + " pairs, base " +
                     s("rope_freq_base");
  if (j["rope_freq_scale"].get<double>() != 1.0) rope += ", position scale " + s("rope_freq_scale");
  if (j["rope_freq_factors"].get<bool>()) rope += ", frequency factors";
  std::printf("rope:          %s\n", rope.c_str());
  if (j["sliding_window"].get<int>() > 0) {
    std::printf("window:        %s positions on %s of %s layers (rope base %s there)\n",
                s("sliding_window").c_str(), s("sliding_window_layers").c_str(),
                s("n_layer").c_str(), s("rope_freq_base_swa").c_str());
  }
  std::string graph;
  for (const auto& g : j["graph"]) graph += (graph.empty() ? "" : ", ") + g.get<std::string>();
  std::printf("graph:         %s\n", graph.c_str());
  std::printf("rms eps:       %s\n", s("rms_eps").c_str());
  std::printf("vocab:         %s (%s tokenizer%s%s)\n", s("n_vocab").c_str(),
              j["tokenizer"].get<std::string>().c_str(),
              j["tokenizer_pre"].get<std::string>().empty() ? "" : ", pre ",
              j["tokenizer_pre"].get<std::string>().c_str());
  std::printf("lm head:       %s\n",
              j["tied_embeddings"].get<bool>() ? "tied to token embedding" : "output.weight");
  // One type: "Q4_1 (layer matrices)"; a mix: every type, most common first,
  // and llama-quantize's file type when the file names one.
  const auto& layer_types = j["layer_weight_types"];
  std::string weights = j["weight_type"].get<std::string>();
  if (layer_types.size() > 1) {
    std::string list;
    for (const auto& [name, n] : layer_types.items()) list += (list.empty() ? "" : ", ") + name;
    const bool named = weights.size() > 4 && weights.ends_with(" mix");
    weights = list + " (layer matrices, " + (named ? weights : std::string("mixed")) + ")";
  } else {
    weights += " (layer matrices)";
  }
  std::printf("weights:       %s\n", weights.c_str());
  std::string types;
  for (const auto& [name, n] : j["tensor_types"].items()) {
    types += (types.empty() ? "" : ", ") + std::to_string(n.get<int>()) + " " + name;
  }
  std::printf("tensors:       %s (%s)\n", s("n_tensors").c_str(), types.c_str());
  const bool has_template = j["has_chat_template"].get<bool>();
  const std::string style = j["chat_template"].get<std::string>();
  std::printf("chat template: %s%s\n", style.c_str(),
              !has_template      ? " (the file has none)"
              : style == "plain" ? " (the file's template is not recognised)"
                                 : "");
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a model's architecture, sizes and tensor types");
  auto model_path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", *model_path, "GGUF model file (default: the SmolLM2 model)");
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([=] {
    const Model model = load_model(model_path->empty() ? default_model_path() : *model_path);
    // What `run` would refuse, info refuses too: the tokenizer is built (and
    // dropped) when the file has one.
    if (model.file->has("tokenizer.ggml.tokens")) Tokenizer::from_gguf(*model.file);
    const auto j = describe(model);
    if (*json) {
      std::cout << j.dump(2) << "\n";
    } else {
      print_text(j);
    }
  });
}

}  // namespace clchat::app
