// Status bar and hint line (see status.h). The status bar drops its least
// useful parts first when narrow: key hints, then the device (the panel and
// /show name it), then the sampling label ("temp 0.80": /show has the rest).
#include "ui/status.h"

#include "ui/commands.h"
#include "ui/text.h"

namespace clchat::ui {

namespace {

// "prompt 640/2,132 tokens"
std::string prefill_text(const ev::PrefillProgress& p) {
  return "prompt " + with_thousands(p.done) + "/" + with_thousands(p.total) + " tokens";
}

}  // namespace

StyledLine build_status_line(const State& s, int width) {
  std::string left = " clchat";
  if (s.session.ready) {
    left += " │ " + s.session.model + " │ " + s.session.quant;
  } else if (s.session.failed) {
    left += " │ no model";
  } else {
    left += s.session.stage.empty() ? " │ loading…" : " │ loading: " + s.session.stage + "…";
  }
  // A failing autosave stays in view until it works again.
  if (!s.autosave_error.empty()) left += " │ AUTOSAVE FAILED";
  const std::string device = s.session.device.empty() ? "" : " │ " + s.session.device;
  const std::string sampling = " │ " + sampling_label(s.sampling);
  const std::string keys = "F" + std::to_string(s.key_panel) + " panel  F" +
                           std::to_string(s.key_debug) + " debug" + (s.debug ? "*" : "") +
                           "  /help ";
  bool with_device = true, with_sampling = true;
  const auto compose = [&] {
    return left + (with_device ? device : "") + (with_sampling ? sampling : "");
  };
  if (display_width(compose()) > width) with_device = false;
  if (display_width(compose()) > width) with_sampling = false;
  std::string text = compose();
  const int gap = width - display_width(text) - display_width(keys);
  if (gap >= 1) text += std::string(static_cast<size_t>(gap), ' ') + keys;
  return StyledLine(pad_width(text, width), Style::Status);
}

StyledLine build_hint_line(const State& s, int width, bool unicode,
                           std::chrono::steady_clock::time_point now) {
  const std::string rule = unicode ? "─" : "-";
  std::string message;
  Style style = Style::Dim;
  if (!s.hint.empty() && now < s.hint_until) {
    message = s.hint;
    style = s.hint_style;
  } else if (s.generating && s.cancel_requested) {
    message = s.prefill.total > 0 ? "stopping… (" + prefill_text(s.prefill) + ")" : "stopping…";
    style = Style::Warning;
  } else if (s.generating && s.prefill.total > 0) {
    message = prefill_text(s.prefill) + " · Ctrl-C stops";
    style = Style::Accent;
  } else if (s.generating) {
    message = "generating… Ctrl-C stops";
    style = Style::Accent;
  } else if (!s.transcript.following()) {
    message = "reading back — End returns to the bottom";
  }
  StyledLine line;
  if (message.empty()) {
    std::string fill;
    for (int i = 0; i < width; ++i) fill += rule;
    line.add(fill, Style::Dim);
    return line;
  }
  line.add(rule + rule + " ", Style::Dim);
  message = fit_width(message, std::max(0, width - 4));
  line.add(message, style);
  std::string fill = " ";
  for (int i = display_width(message) + 4; i < width; ++i) fill += rule;
  line.add(fill, Style::Dim);
  return line;
}

}  // namespace clchat::ui
