// The two one-line views: the status bar (model, quant, device, sampling,
// key hints) and the hint line above the input (activity or last message).
#pragma once

#include <chrono>

#include "ui/state.h"
#include "ui/styled.h"

namespace clchat::ui {

StyledLine build_status_line(const State& s, int width);
StyledLine build_hint_line(const State& s, int width, bool unicode,
                           std::chrono::steady_clock::time_point now);

}  // namespace clchat::ui
