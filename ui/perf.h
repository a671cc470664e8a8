// The performance panel: its model (PerfState, fed by engine events) and its
// view builder (build_panel, pure, so layouts are unit-tested as text).
//
// Bars and the sparkline use Unicode block elements (1/8-cell steps); with
// `unicode` false (a non-UTF-8 locale) they fall back to '#' and ASCII ramps.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/messages.h"
#include "ui/styled.h"

namespace clchat::ui {

struct PerfState {
  static constexpr size_t k_history = 120;  // sparkline samples kept
  // Layer bars show the median of this many sampled tokens, so one token
  // preempted on a busy CPU does not make a few layers look 100x slower.
  static constexpr size_t k_layer_window = 9;

  std::string device;
  int n_layer = 0;
  ev::Stats stats;
  bool have_stats = false;
  std::deque<double> decode_history;           // decode tok/s, one per live Stats event
  std::deque<ev::LayerTimings> layer_samples;  // the last k_layer_window
  std::optional<ev::DebugStats> debug;

  void on_stats(const ev::Stats& s);
  void on_layers(const ev::LayerTimings& t);
  // Per layer (and total) the median of layer_samples; empty before any.
  ev::LayerTimings layer_median() const;
  void on_debug(const ev::DebugStats& d) { debug = d; }
};

// Exactly `height` lines (padded), none wider than `width` columns.
std::vector<StyledLine> build_panel(const PerfState& perf, bool debug_on, int width, int height,
                                    bool unicode);

// Building blocks, exposed for tests.
std::string bar(double fraction, int cells, bool unicode);
std::string sparkline(const std::deque<double>& values, int cells, bool unicode);

}  // namespace clchat::ui
