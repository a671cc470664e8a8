// What `clchat bench` reports beside tg's speed: the bytes a decode step
// reads (ClForward::decode_read_bytes, against the GGML block sizes and the
// float KV cache's rows counted here) and the device's measured read
// bandwidth, cached per device in read-bandwidth.json (engine/cl/read_bandwidth.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/cl/forward.h"
#include "engine/cl/read_bandwidth.h"
#include "engine/model/synthetic.h"
#include "tests/cl/cl_test_support.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

// A fresh folder under the system's temporary one, removed at the end.
class ReadBandwidthCache : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("clchat-read-bandwidth-" + std::to_string(::getpid()) + "-" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path file() const { return dir_ / "read-bandwidth.json"; }
  void write(const std::string& text) const { std::ofstream(file()) << text; }
  nlohmann::json stored() const { return nlohmann::json::parse(test::read_file(file().string())); }
  std::filesystem::path dir_;
};

// At least 100 MB/s and finite: any device that runs these tests reads faster.
void expect_plausible(double bytes_per_s) {
  EXPECT_TRUE(std::isfinite(bytes_per_s));
  EXPECT_GT(bytes_per_s, 1e8);
}

TEST_F(ReadBandwidthCache, MeasuredOnceThenReadFromTheFile) {
  const ClRuntime& rt = test::cl_test_runtime();
  const ReadBandwidth first = device_read_bandwidth(rt, dir_.string());
  EXPECT_FALSE(first.cached);
  expect_plausible(first.bytes_per_s);
  ASSERT_TRUE(std::filesystem::exists(file()));
  const ReadBandwidth second = device_read_bandwidth(rt, dir_.string());
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.bytes_per_s, first.bytes_per_s);
}

TEST_F(ReadBandwidthCache, AFileThatIsNotJsonIsMeasuredAgainAndRewritten) {
  write("{\"not json");
  const ReadBandwidth r = device_read_bandwidth(test::cl_test_runtime(), dir_.string());
  EXPECT_FALSE(r.cached);
  expect_plausible(r.bytes_per_s);
  EXPECT_EQ(stored().size(), 1u);
}

// Every damaged value of this device's entry is measured again; another
// device's entry stays as it was.
TEST_F(ReadBandwidthCache, DamagedEntriesAreMeasuredAgainOthersKept) {
  const ClRuntime& rt = test::cl_test_runtime();
  const DeviceInfo& d = rt.device();
  const std::string key = d.platform_name + " | " + d.name + " | " + d.driver_version;
  for (const char* value : {"-1", "0", "\"fast\"", "null", "[1]"}) {
    SCOPED_TRACE(value);
    write("{\"other | device | 1\": {\"device\": \"other\", \"bytes_per_s\": 5e9}, \"" + key +
          "\": {\"bytes_per_s\": " + value + "}}");
    const ReadBandwidth r = device_read_bandwidth(rt, dir_.string());
    EXPECT_FALSE(r.cached);
    expect_plausible(r.bytes_per_s);
    const nlohmann::json j = stored();
    EXPECT_EQ(j["other | device | 1"]["bytes_per_s"].get<double>(), 5e9);
    EXPECT_EQ(j[key]["bytes_per_s"].get<double>(), r.bytes_per_s);
  }
}

// A folder that cannot be written (a file stands where it should be): the
// figure is still measured and returned.
TEST_F(ReadBandwidthCache, AnUnwritableFolderCostsOnlyTheCache) {
  const std::filesystem::path blocked = dir_ / "blocked";
  std::ofstream(blocked) << "a file, not a folder";
  const ReadBandwidth r = device_read_bandwidth(test::cl_test_runtime(), blocked.string());
  EXPECT_FALSE(r.cached);
  expect_plausible(r.bytes_per_s);
}

// GGML's bytes per 32 values: Q4_0 18 (16 of nibbles, a half scale), Q8_0 34.
uint64_t q4_0_bytes(uint64_t rows, uint64_t n_in) { return rows * n_in / 32 * 18; }
uint64_t q8_0_bytes(uint64_t rows, uint64_t n_in) { return rows * n_in / 32 * 34; }

SyntheticSpec small_spec(bool tied) {
  SyntheticSpec s;
  s.n_embd = 128;
  s.n_layer = 3;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.layer_type = GgmlType::Q4_0;
  s.embd_type = GgmlType::Q8_0;
  s.tied = tied;
  return s;
}

// The layers' matrices (Q4_0) and the K and V rows of positions 0..pos.
uint64_t layers_and_cache(const SyntheticSpec& s, int pos) {
  const uint64_t kv = uint64_t(s.n_embd) / uint64_t(s.n_head) * uint64_t(s.n_head_kv);
  const uint64_t per_layer = q4_0_bytes(uint64_t(s.n_embd), uint64_t(s.n_embd)) * 2 +  // q, o
                             q4_0_bytes(kv, uint64_t(s.n_embd)) * 2 +                  // k, v
                             q4_0_bytes(uint64_t(s.n_ff), uint64_t(s.n_embd)) * 3;     // ffn
  return uint64_t(s.n_layer) * (per_layer + 2 * uint64_t(pos + 1) * kv * 4);
}

TEST(DecodeReadBytes, TiedHeadIsTheEmbeddingReadWhole) {
  const SyntheticSpec s = small_spec(true);
  const std::string path = write_synthetic_model_tmp(s);
  const ClForward fwd(load_model(path), test::cl_test_runtime(), ClForwardOptions{});
  std::filesystem::remove(path);
  const uint64_t head = q8_0_bytes(uint64_t(s.n_vocab), uint64_t(s.n_embd));
  for (const int pos : {0, 1, 37}) {
    EXPECT_EQ(fwd.decode_read_bytes(pos), layers_and_cache(s, pos) + head) << "position " << pos;
  }
}

// With a head of its own, the embedding is one row a token: left out.
TEST(DecodeReadBytes, SeparateHeadLeavesTheEmbeddingOut) {
  const SyntheticSpec s = small_spec(false);
  const std::string path = write_synthetic_model_tmp(s);
  const ClForward fwd(load_model(path), test::cl_test_runtime(), ClForwardOptions{});
  std::filesystem::remove(path);
  const uint64_t head = q8_0_bytes(uint64_t(s.n_vocab), uint64_t(s.n_embd));
  EXPECT_EQ(fwd.decode_read_bytes(5), layers_and_cache(s, 5) + head);
}

// Gemma 3's sliding-window layers (il % 6 < 5) attend to the last `window`
// positions only.
TEST(DecodeReadBytes, WindowLayersReadTheWindowOnly) {
  SyntheticSpec s = small_spec(true);
  s.arch = "gemma3";
  s.n_layer = 6;
  s.sliding_window = 4;
  const std::string path = write_synthetic_model_tmp(s);
  const ClForward fwd(load_model(path), test::cl_test_runtime(), ClForwardOptions{});
  std::filesystem::remove(path);
  const uint64_t head = q8_0_bytes(uint64_t(s.n_vocab), uint64_t(s.n_embd));
  const uint64_t kv_row = 2 * uint64_t(s.n_embd) / uint64_t(s.n_head) * uint64_t(s.n_head_kv) * 4;
  const int pos = 10;
  // layers_and_cache counts 11 positions in all 6 layers; 5 of them see 4.
  EXPECT_EQ(fwd.decode_read_bytes(pos), layers_and_cache(s, pos) - 5 * (11 - 4) * kv_row + head);
  EXPECT_EQ(fwd.decode_read_bytes(2), layers_and_cache(s, 2) + head);  // inside the window
}

}  // namespace
}  // namespace clchat
