// Slash-command target: the bytes as a submitted input line (the first byte's
// low bit says whether it began with a bracketed paste). Every line must
// parse to some Input; a /set that parses must apply to sampling parameters
// and leave them in range.
#include <cmath>
#include <string_view>
#include <variant>

#include "fuzz/fuzz_targets.h"
#include "ui/commands.h"

namespace clchat::fuzz {

int fuzz_commands(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool pasted = data[0] & 1;
  const std::string_view line(reinterpret_cast<const char*>(data + 1), size - 1);
  const ui::Input input = ui::parse_input(line, pasted);
  if (pasted && std::holds_alternative<ui::Message>(input)) {
    require(std::get<ui::Message>(input).text == line, "a pasted line was changed");
  }
  if (const auto* set = std::get_if<ui::command::Set>(&input)) {
    require(std::isfinite(set->value), "/set accepted a value that is not finite");
    SamplingParams p;
    SamplingFields from_model;
    ui::apply_set(p, *set, from_model);
    require(p.top_k >= 0 && p.repeat_last_n >= 0 && p.max_tokens >= 1, "/set out of range");
    require(std::isfinite(p.temperature) && std::isfinite(p.top_p), "/set gave a non-finite");
    ui::sampling_summary(p);
    ui::set_values(p);
  }
  if (const auto* invalid = std::get_if<ui::command::Invalid>(&input)) {
    require(!invalid->hint.empty(), "an invalid command without a hint");
  }
  return 0;
}

}  // namespace clchat::fuzz
