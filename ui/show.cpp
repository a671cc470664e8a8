// /show's lines (see show.h).
#include "ui/show.h"

#include <cstdio>

#include "ui/commands.h"
#include "ui/text.h"

namespace clchat::ui {

namespace {

// 134515008 -> "134.5M"
std::string count_text(uint64_t n) {
  char buf[32];
  if (n >= 1000000000) {
    std::snprintf(buf, sizeof buf, "%.2fB", double(n) / 1e9);
  } else if (n >= 1000000) {
    std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fK", double(n) / 1e3);
  }
  return buf;
}

std::string mib_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string row(const std::string& label, const std::string& value) {
  return "  " + pad_width(label, 18) + " " + value;
}

// Whether the model's recommendation set /set key `key`.
bool recommended(const SamplingFields& f, const std::string& key) {
  return (key == "temp" && f.temperature) || (key == "top_k" && f.top_k) ||
         (key == "top_p" && f.top_p) || (key == "min_p" && f.min_p) ||
         (key == "repeat_penalty" && f.repeat_penalty) ||
         (key == "repeat_last_n" && f.repeat_last_n);
}

}  // namespace

std::vector<std::string> show_lines(const ev::Ready& m, const std::string& system,
                                    const SamplingParams& sampling,
                                    const SamplingFields& from_model) {
  std::vector<std::string> out;
  out.push_back("model " + m.model_name);
  out.push_back(row("architecture", m.architecture));
  out.push_back(
      row("parameters", count_text(m.n_params) + " (file " + mib_text(m.file_bytes) + ")"));
  out.push_back(row("quantization", m.quant));
  out.push_back(row("weight types", m.weight_types));
  out.push_back(row("context", with_thousands(m.n_ctx) + " tokens (trained on " +
                                   with_thousands(m.n_ctx_train) + ")"));
  out.push_back(row("shape", std::to_string(m.n_layer) + " layers, embedding " +
                                 std::to_string(m.n_embd) + ", " + std::to_string(m.n_head) +
                                 " heads (" + std::to_string(m.n_head_kv) + " KV), vocabulary " +
                                 with_thousands(m.n_vocab)));
  out.push_back(row("template", m.chat_template));
  // Backend::name() names the device too ("opencl (pthread-...)").
  out.push_back(
      row("device", m.device_name + " (" + m.backend.substr(0, m.backend.find(" (")) + ")"));
  out.push_back(row("system prompt", system.empty() ? "(none)" : system));
  out.push_back("settings (/set KEY VALUE)");
  for (const auto& [key, value] : set_values(sampling)) {
    out.push_back(row(key, value + (recommended(from_model, key) ? " (the model's)" : "")));
  }
  return out;
}

}  // namespace clchat::ui
