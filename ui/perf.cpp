// Performance panel model and layout (see perf.h).
#include "ui/perf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ui/text.h"

namespace clchat::ui {

namespace {

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

// "label   value" with the value right-aligned in the panel width.
StyledLine row(const std::string& label, const std::string& value, int width,
               Style value_style = Style::Normal) {
  const int gap = std::max(1, width - 1 - display_width(label) - display_width(value));
  StyledLine line;
  line.add(" " + label, Style::Dim);
  line.add(std::string(static_cast<size_t>(gap), ' ') + value, value_style);
  return line;
}

// A quoted token for the top-5 list: control characters made visible.
std::string show_token(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void add_speed_section(const PerfState& p, int width, bool unicode, std::vector<StyledLine>& out) {
  const auto& s = p.stats;
  out.emplace_back(" Performance", Style::Title);
  if (!p.have_stats) {
    out.push_back(row("prefill", "–", width));
    out.push_back(row("decode", "–", width));
    out.push_back(row("TTFT", "–", width));
  } else {
    out.push_back(
        row("prefill",
            format("%.1f tok/s", s.prefill_tok_s) + " (" + std::to_string(s.prefill_tokens) + ")",
            width, Style::Accent));
    out.push_back(
        row("decode",
            format("%.1f tok/s", s.decode_tok_s) + " (" + std::to_string(s.decode_tokens) + ")",
            width, Style::Accent));
    out.push_back(row("TTFT", format("%.1f ms", s.ttft_ms), width));
  }
  StyledLine spark;
  spark.add(" ");
  spark.add(sparkline(p.decode_history, width - 2, unicode), Style::Accent);
  out.push_back(std::move(spark));

  const int cap = std::max(1, s.cache_capacity);
  const std::string fill = std::to_string(s.cache_used) + "/" + std::to_string(s.cache_capacity);
  const int bar_cells = std::max(1, width - 12 - display_width(fill));
  StyledLine kv;
  kv.add(" KV cache  ", Style::Dim);
  kv.add(pad_width(bar(static_cast<double>(s.cache_used) / cap, bar_cells, unicode), bar_cells),
         Style::Bar);
  kv.add(" " + fill);
  out.push_back(std::move(kv));
  out.push_back(row("device", fit_width(p.device, std::max(1, width - 9)), width));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

void add_layer_section(const PerfState& p, int width, int room, bool unicode,
                       std::vector<StyledLine>& out) {
  const ev::LayerTimings layers = p.layer_median();
  const auto& ms = layers.layer_ms;
  // "Layers ms, median of 9" (of the sampled tokens so far, up to 9).
  const std::string title = "Layers ms, median of " + std::to_string(p.layer_samples.size());
  out.push_back(row(ms.empty() ? "Layers (ms)" : title,
                    ms.empty() ? "waiting" : format("total %.3f", layers.total_ms), width));
  out.back().spans[0].style = Style::Title;
  if (ms.empty()) return;
  const double max_ms = std::max(1e-9, *std::max_element(ms.begin(), ms.end()));
  const int n = static_cast<int>(ms.size());
  const int shown = n <= room - 1 ? n : std::max(0, room - 2);
  const int label_w = static_cast<int>(std::to_string(n - 1).size()) + 1;
  for (int il = 0; il < shown; ++il) {
    const std::string value = format("%.3f", ms[static_cast<size_t>(il)]);
    const int cells = std::max(1, width - 3 - label_w - display_width(value));
    StyledLine line;
    line.add(" " + pad_width("L" + std::to_string(il), label_w) + " ", Style::Dim);
    line.add(pad_width(bar(ms[static_cast<size_t>(il)] / max_ms, cells, unicode), cells),
             Style::Bar);
    line.add(" " + value);
    out.push_back(std::move(line));
  }
  if (shown < n) out.emplace_back(" … " + std::to_string(n - shown) + " more layers", Style::Dim);
}

void add_debug_section(const PerfState& p, int width, int room, std::vector<StyledLine>& out) {
  if (!p.debug) {
    out.emplace_back(" Debug on: waiting for a token", Style::Title);
    return;
  }
  const auto& r = p.debug->report;
  out.emplace_back(" Debug (pos " + std::to_string(r.pos) + ") top-5", Style::Title);
  for (const auto& [text, prob] : p.debug->top) {
    out.emplace_back(fit_width(format("  %.3f  ", prob) + show_token(text), width));
  }
  out.emplace_back(fit_width(" layer    rms     min     max", width), Style::Dim);
  const int n = static_cast<int>(r.after_ffn.size());
  const int budget = std::max(0, room - static_cast<int>(p.debug->top.size()) - 2);
  const int shown = n <= budget ? n : std::max(0, budget - 1);
  for (int il = 0; il < shown; ++il) {
    const auto& h = r.after_ffn[static_cast<size_t>(il)];
    const auto& a =
        r.after_attention[std::min(static_cast<size_t>(il), r.after_attention.size() - 1)];
    char buf[96];
    std::snprintf(buf, sizeof buf, " L%-3d %6.3f %7.3g %7.3g", il, h.rms, h.min, h.max);
    std::string text = buf;
    const int64_t bad = h.n_nan + h.n_inf + a.n_nan + a.n_inf;
    if (bad > 0) {
      text +=
          " NaN" + std::to_string(h.n_nan + a.n_nan) + " inf" + std::to_string(h.n_inf + a.n_inf);
    }
    out.emplace_back(fit_width(text, width), bad > 0 ? Style::Warning : Style::Normal);
  }
  if (shown < n) out.emplace_back(" … " + std::to_string(n - shown) + " more layers", Style::Dim);
}

}  // namespace

void PerfState::on_layers(const ev::LayerTimings& t) {
  // A different layer count (another model) starts again.
  if (!layer_samples.empty() && layer_samples.back().layer_ms.size() != t.layer_ms.size()) {
    layer_samples.clear();
  }
  layer_samples.push_back(t);
  while (layer_samples.size() > k_layer_window) layer_samples.pop_front();
}

ev::LayerTimings PerfState::layer_median() const {
  ev::LayerTimings m;
  if (layer_samples.empty()) return m;
  m = layer_samples.back();
  std::vector<double> v;
  for (size_t il = 0; il < m.layer_ms.size(); ++il) {
    v.clear();
    for (const auto& t : layer_samples) v.push_back(t.layer_ms[il]);
    m.layer_ms[il] = median(v);
  }
  v.clear();
  for (const auto& t : layer_samples) v.push_back(t.total_ms);
  m.total_ms = median(v);
  return m;
}

void PerfState::on_stats(const ev::Stats& s) {
  stats = s;
  have_stats = true;
  if (s.live && s.decode_tok_s > 0) {
    decode_history.push_back(s.decode_tok_s);
    while (decode_history.size() > k_history) decode_history.pop_front();
  }
}

std::string bar(double fraction, int cells, bool unicode) {
  if (cells <= 0) return {};
  if (!(fraction > 0)) fraction = 0;  // NaN too
  fraction = std::min(fraction, 1.0);
  const int eighths = static_cast<int>(std::lround(fraction * cells * 8));
  if (!unicode) return std::string(static_cast<size_t>((eighths + 4) / 8), '#');
  static const char* const k_partial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  std::string out;
  for (int i = 0; i < eighths / 8; ++i) out += "█";
  out += k_partial[eighths % 8];
  return out;
}

std::string sparkline(const std::deque<double>& values, int cells, bool unicode) {
  if (cells <= 0) return {};
  static const char* const k_levels[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  static const char k_ascii[] = "_.-=+*#@";
  const size_t n = std::min(values.size(), static_cast<size_t>(cells));
  double hi = 0;
  for (size_t i = values.size() - n; i < values.size(); ++i) hi = std::max(hi, values[i]);
  std::string out;
  for (size_t i = values.size() - n; i < values.size(); ++i) {
    const int level = hi > 0 ? std::clamp(static_cast<int>(values[i] / hi * 7.0 + 0.5), 0, 7) : 0;
    if (unicode) {
      out += k_levels[level];
    } else {
      out += k_ascii[level];
    }
  }
  return out;
}

std::vector<StyledLine> build_panel(const PerfState& perf, bool debug_on, int width, int height,
                                    bool unicode) {
  std::vector<StyledLine> out;
  add_speed_section(perf, width, unicode, out);
  out.emplace_back();
  const int room = height - static_cast<int>(out.size());
  if (debug_on) {
    add_debug_section(perf, width, room, out);
  } else {
    add_layer_section(perf, width, room, unicode, out);
  }
  out.resize(static_cast<size_t>(std::max(0, height)));
  return out;
}

}  // namespace clchat::ui
