// Performance panel, screen layout and status bar, checked as text: one bar
// per layer, live numbers, debug statistics, sizes that fit, the panel hiding
// on narrow terminals, "too small" below the minimum.
#include <gtest/gtest.h>

#include <clocale>

#include "ui/layout.h"
#include "ui/perf.h"
#include "ui/status.h"
#include "ui/text.h"

namespace ui = clchat::ui;

namespace {
struct Utf8Locale {
  Utf8Locale() { std::setlocale(LC_ALL, "C.UTF-8"); }
} g_locale;

ui::PerfState sample_perf(int n_layer) {
  ui::PerfState p;
  p.device = "pthread-cpu";
  p.n_layer = n_layer;
  clchat::ev::Stats s;
  s.prefill_tokens = 19;
  s.prefill_tok_s = 2000;
  s.decode_tokens = 64;
  s.decode_tok_s = 150.5;
  s.ttft_ms = 9.4;
  s.cache_used = 83;
  s.cache_capacity = 2048;
  s.live = true;
  for (int i = 0; i < 5; ++i) p.on_stats(s);
  clchat::ev::LayerTimings t;
  for (int il = 0; il < n_layer; ++il) t.layer_ms.push_back(0.01 * (il + 1));
  t.total_ms = 0.5;
  p.on_layers(t);
  return p;
}

std::string find_line(const std::vector<ui::StyledLine>& lines, const std::string& prefix) {
  for (const auto& l : lines) {
    if (l.text().rfind(prefix, 0) == 0) return l.text();
  }
  return "";
}
}  // namespace

TEST(UiPanel, ShowsSpeedsCacheDeviceAndOneBarPerLayer) {
  const auto lines = ui::build_panel(sample_perf(5), false, 38, 30, true);
  ASSERT_EQ(lines.size(), 30u);
  for (const auto& l : lines) EXPECT_LE(ui::display_width(l.text()), 38) << l.text();
  EXPECT_NE(find_line(lines, " decode").find("150.5 tok/s (64)"), std::string::npos);
  EXPECT_NE(find_line(lines, " prefill").find("2000.0 tok/s"), std::string::npos);
  EXPECT_NE(find_line(lines, " TTFT").find("9.4 ms"), std::string::npos);
  EXPECT_NE(find_line(lines, " KV cache").find("83/2048"), std::string::npos);
  EXPECT_NE(find_line(lines, " device").find("pthread-cpu"), std::string::npos);
  for (int il = 0; il < 5; ++il) {
    const auto l = find_line(lines, " L" + std::to_string(il) + " ");
    EXPECT_FALSE(l.empty()) << il;
    EXPECT_NE(l.find("█"), std::string::npos);
  }
  // The slowest layer gets the full bar.
  EXPECT_NE(find_line(lines, " L4 ").find("0.050"), std::string::npos);
  EXPECT_TRUE(find_line(lines, " L5 ").empty());
}

// One preempted token (layers 2 and 3 at 40 ms) among normal ones does not
// move the bars: they show the median of the last samples, and say so.
TEST(UiPanel, LayerBarsShowTheMedianOfRecentSamples) {
  ui::PerfState p = sample_perf(5);
  clchat::ev::LayerTimings slow;
  slow.layer_ms = {0.01, 0.02, 40, 40, 0.05};
  slow.total_ms = 80;
  p.on_layers(slow);
  clchat::ev::LayerTimings normal;
  normal.layer_ms = {0.01, 0.02, 0.03, 0.04, 0.05};
  normal.total_ms = 0.5;
  p.on_layers(normal);
  const auto lines = ui::build_panel(p, false, 38, 30, true);
  EXPECT_NE(find_line(lines, " L2 ").find("0.030"), std::string::npos) << find_line(lines, " L2 ");
  EXPECT_NE(find_line(lines, " L4 ").find("0.050"), std::string::npos);
  EXPECT_NE(find_line(lines, " Layers ms, median of 3").find("total 0.500"), std::string::npos)
      << find_line(lines, " Layers");
  for (int i = 0; i < 20; ++i) p.on_layers(normal);
  EXPECT_EQ(p.layer_samples.size(), ui::PerfState::k_layer_window);
}

TEST(UiPanel, ManyLayersAreCutWithACount) {
  const auto lines = ui::build_panel(sample_perf(30), false, 38, 20, true);
  ASSERT_EQ(lines.size(), 20u);
  bool more = false;
  for (const auto& l : lines) more |= l.text().find("more layers") != std::string::npos;
  EXPECT_TRUE(more);
}

TEST(UiPanel, BeforeAnyStatsShowsDashes) {
  ui::PerfState p;
  const auto lines = ui::build_panel(p, false, 30, 12, true);
  EXPECT_NE(find_line(lines, " decode").find("–"), std::string::npos);
  EXPECT_NE(find_line(lines, " Layers").find("waiting"), std::string::npos);
}

TEST(UiPanel, DebugShowsTopFiveAndLayerStats) {
  auto p = sample_perf(3);
  clchat::ev::DebugStats d;
  d.report.pos = 41;
  d.report.after_attention.resize(3);
  d.report.after_ffn = {{0, 0.5, -1, 1, 0, 0}, {0, 0.75, -2, 2, 0, 0}, {0, 1.25, -3, 3, 2, 1}};
  d.top = {{"the", 0.5f}, {"\n", 0.25f}, {"a", 0.1f}, {"an", 0.1f}, {"one", 0.05f}};
  p.on_debug(d);
  const auto lines = ui::build_panel(p, true, 38, 30, true);
  EXPECT_FALSE(find_line(lines, " Debug (pos 41)").empty());
  EXPECT_FALSE(find_line(lines, "  0.500  \"the\"").empty());
  EXPECT_FALSE(find_line(lines, "  0.250  \"\\n\"").empty());
  EXPECT_NE(find_line(lines, " L0").find("0.500"), std::string::npos);
  EXPECT_NE(find_line(lines, " L2").find("NaN2 inf1"), std::string::npos);
}

TEST(UiPanel, BarsAndSparkline) {
  EXPECT_EQ(ui::bar(1.0, 4, true), "████");
  EXPECT_EQ(ui::bar(0.5, 4, true), "██");
  EXPECT_EQ(ui::bar(0.0, 4, true), "");
  EXPECT_EQ(ui::bar(0.5, 4, false), "##");
  EXPECT_EQ(ui::bar(1.0 / 16, 2, true), "▏");
  EXPECT_EQ(ui::sparkline({1, 2, 4, 8}, 10, true), "▂▃▅█");
  EXPECT_EQ(ui::sparkline({1, 2, 4, 8}, 2, true), "▅█");  // the newest samples, rescaled
  EXPECT_EQ(ui::sparkline({1, 8}, 2, false), ".@");
}

TEST(UiLayout, PanelBesideTranscriptWhenWide) {
  const auto l = ui::compute_layout(40, 120, true, 38, 1);
  EXPECT_FALSE(l.too_small);
  EXPECT_TRUE(l.panel_shown);
  EXPECT_EQ(l.panel.w, 38);
  EXPECT_EQ(l.panel.x, 82);
  EXPECT_EQ(l.transcript.w, 81);  // one column of border between
  EXPECT_EQ(l.transcript.h, 37);
  EXPECT_EQ(l.hint.y, 37);
  EXPECT_EQ(l.input.y, 38);
  EXPECT_EQ(l.status.y, 39);
}

TEST(UiLayout, PanelHidesWhenTooNarrow) {
  const auto l = ui::compute_layout(24, 70, true, 38, 1);
  EXPECT_FALSE(l.panel_shown);
  EXPECT_EQ(l.transcript.w, 70);
}

TEST(UiLayout, MultiLineInputGrowsUpToALimit) {
  EXPECT_EQ(ui::compute_layout(24, 80, false, 38, 3).input.h, 3);
  EXPECT_EQ(ui::compute_layout(24, 80, false, 38, 50).input.h, ui::k_max_input_lines);
  const auto l = ui::compute_layout(8, 80, false, 38, 50);
  EXPECT_GE(l.transcript.h, 3);
}

// Decided at every size unless F2 chose (the choice sticks).
TEST(UiLayout, PanelWantedFollowsTheWidthUntilF2Chooses) {
  EXPECT_TRUE(ui::panel_wanted(std::nullopt, true, 100, 120));
  EXPECT_FALSE(ui::panel_wanted(std::nullopt, true, 100, 80));
  EXPECT_FALSE(ui::panel_wanted(std::nullopt, false, 100, 200));
  EXPECT_TRUE(ui::panel_wanted(true, true, 100, 80));
  EXPECT_FALSE(ui::panel_wanted(false, true, 100, 200));
}

TEST(UiLayout, TooSmall) {
  EXPECT_TRUE(ui::compute_layout(7, 80, true, 38, 1).too_small);
  EXPECT_TRUE(ui::compute_layout(24, 29, true, 38, 1).too_small);
  EXPECT_FALSE(ui::compute_layout(8, 30, true, 38, 1).too_small);
}

TEST(UiStatus, StatusBarFitsAndDropsPartsWhenNarrow) {
  ui::State s;
  s.session = {true, false, "SmolLM2", "Q4_1", "NVIDIA H200", "opencl", 30, 2048, {}, {}};
  const auto wide = ui::build_status_line(s, 120).text();
  EXPECT_EQ(ui::display_width(wide), 120);
  for (const char* part : {"SmolLM2", "Q4_1", "NVIDIA H200", "greedy", "F2 panel", "F3 debug"}) {
    EXPECT_NE(wide.find(part), std::string::npos) << part;
  }
  const auto narrow = ui::build_status_line(s, 40).text();
  EXPECT_EQ(ui::display_width(narrow), 40);
  EXPECT_NE(narrow.find("SmolLM2"), std::string::npos);
}

// At 120 columns a sampling chat keeps its label beside a long device name:
// the device goes first (the panel and /show name it).
TEST(UiStatus, SamplingLabelStaysAt120Columns) {
  ui::State s;
  s.session = {true,
               false,
               "SmolLM2 135M Instruct",
               "Q4_1",
               "cpu-haswell-AMD EPYC 7B13 64-Core Processor",
               "opencl",
               30,
               8192,
               {},
               {}};
  s.sampling.temperature = 0.8f;
  const auto line = ui::build_status_line(s, 120).text();
  EXPECT_EQ(ui::display_width(line), 120);
  EXPECT_NE(line.find("temp 0.80"), std::string::npos) << line;
}

TEST(UiStatus, LoadingSaysWhatTheEngineIsDoing) {
  ui::State s;
  EXPECT_NE(ui::build_status_line(s, 100).text().find("loading…"), std::string::npos);
  s.session.stage = "compiling kernels 3: matvec_cpu";
  EXPECT_NE(ui::build_status_line(s, 100).text().find("loading: compiling kernels 3: matvec_cpu…"),
            std::string::npos);
}

TEST(UiStatus, HintLineShowsPrefillProgressAndStopping) {
  ui::State s;
  const auto now = std::chrono::steady_clock::now();
  s.generating = true;
  s.prefill = {640, 2132};
  EXPECT_NE(ui::build_hint_line(s, 80, true, now).text().find("prompt 640/2,132 tokens"),
            std::string::npos);
  s.cancel_requested = true;
  EXPECT_NE(ui::build_hint_line(s, 80, true, now).text().find("stopping… (prompt 640/2,132"),
            std::string::npos);
}

TEST(UiStatus, HintLineShowsActivityThenMessages) {
  ui::State s;
  const auto now = std::chrono::steady_clock::now();
  s.generating = true;
  EXPECT_NE(ui::build_hint_line(s, 60, true, now).text().find("Ctrl-C stops"), std::string::npos);
  s.hint = "saved x";
  s.hint_until = now + std::chrono::seconds(1);
  EXPECT_NE(ui::build_hint_line(s, 60, true, now).text().find("saved x"), std::string::npos);
  EXPECT_EQ(ui::display_width(ui::build_hint_line(s, 60, true, now).text()), 60);
}
