// What `clchat bench` reports beside tg's speed: the bytes a decode step
// reads (ClForward::decode_read_bytes, against the GGML block sizes and the
// float KV cache's rows counted here) and the device's measured read
// bandwidth, cached per device in read-bandwidth.json (engine/cl/read_bandwidth.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
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

// A FIFO where the file should be is refused without blocking, measured
// again and replaced by the file.
TEST_F(ReadBandwidthCache, AFifoIsNotReadButReplaced) {
  ASSERT_EQ(::mkfifo(file().c_str(), 0600), 0);
  const ReadBandwidth r = device_read_bandwidth(test::cl_test_runtime(), dir_.string());
  EXPECT_FALSE(r.cached);
  expect_plausible(r.bytes_per_s);
  EXPECT_TRUE(std::filesystem::is_regular_file(file()));
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

// The layers' matrices (Q4_0), the K and V rows of positions 0..pos in
// every layer, and the Q8_0 head.
uint64_t expected_bytes(const SyntheticSpec& s, int pos) {
  const uint64_t kv = uint64_t(s.n_embd) / uint64_t(s.n_head) * uint64_t(s.n_head_kv);
  const uint64_t per_layer = q4_0_bytes(uint64_t(s.n_embd), uint64_t(s.n_embd)) * 2 +  // q, o
                             q4_0_bytes(kv, uint64_t(s.n_embd)) * 2 +                  // k, v
                             q4_0_bytes(uint64_t(s.n_ff), uint64_t(s.n_embd)) * 3;     // ffn
  return uint64_t(s.n_layer) * (per_layer + 2 * uint64_t(pos + 1) * kv * 4) +
         q8_0_bytes(uint64_t(s.n_vocab), uint64_t(s.n_embd));
}

// ClForward::decode_read_bytes at each of `positions` for the model of `s`.
std::vector<uint64_t> read_bytes(const SyntheticSpec& s, const std::vector<int>& positions) {
  const std::string path = write_synthetic_model_tmp(s);
  const ClForward fwd(load_model(path), test::cl_test_runtime(), ClForwardOptions{});
  std::filesystem::remove(path);
  std::vector<uint64_t> out;
  for (const int pos : positions) out.push_back(fwd.decode_read_bytes(pos));
  return out;
}

TEST(DecodeReadBytes, TiedHeadIsTheEmbeddingReadWhole) {
  const SyntheticSpec s = small_spec(true);
  EXPECT_EQ(
      read_bytes(s, {0, 1, 37}),
      (std::vector<uint64_t>{expected_bytes(s, 0), expected_bytes(s, 1), expected_bytes(s, 37)}));
}

// With a head of its own, the embedding is one row a token: left out.
TEST(DecodeReadBytes, SeparateHeadLeavesTheEmbeddingOut) {
  const SyntheticSpec s = small_spec(false);
  EXPECT_EQ(read_bytes(s, {5}), std::vector<uint64_t>{expected_bytes(s, 5)});
}

// Gemma 3's sliding-window layers (il % 6 < 5) attend to the last `window`
// positions only.
TEST(DecodeReadBytes, WindowLayersReadTheWindowOnly) {
  SyntheticSpec s = small_spec(true);
  s.arch = "gemma3";
  s.n_layer = 6;
  s.sliding_window = 4;
  const uint64_t kv_row = 2 * uint64_t(s.n_embd) / uint64_t(s.n_head) * uint64_t(s.n_head_kv) * 4;
  // expected_bytes counts 11 positions in all 6 layers at position 10; 5 of
  // them see 4. Position 2 is inside the window.
  EXPECT_EQ(
      read_bytes(s, {10, 2}),
      (std::vector<uint64_t>{expected_bytes(s, 10) - 5 * (11 - 4) * kv_row, expected_bytes(s, 2)}));
}

}  // namespace
}  // namespace clchat
