// The /show text (as `ollama run`'s /show info): the model (architecture,
// size, weight types, context, template, device) and the value of every /set
// key, saying which came from the model's recommendation. Plain lines, so the
// chat screen and line mode print the same thing.
#pragma once

#include <string>
#include <vector>

#include "engine/messages.h"

namespace clchat::ui {

// `model`: the engine's Ready event; `system`: the system prompt in use;
// `from_model`: the settings still at the model's recommendation.
std::vector<std::string> show_lines(const ev::Ready& model, const std::string& system,
                                    const SamplingParams& sampling,
                                    const SamplingFields& from_model);

}  // namespace clchat::ui
