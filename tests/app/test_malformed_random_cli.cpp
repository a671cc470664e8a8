// `clchat info` and `clchat run` on random bytes and on bit-flipped copies of
// a valid model, through the executable: each must finish within 20 s with
// status 0 (a flip in a weight or a name may leave a usable file) or 2 with
// one line on stderr naming the file; never a crash, a signal or status 1
// (an error that is not about the file). test_malformed_gguf.cpp does the same
// damage to load_model() in-process; this checks the whole command.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

using Bytes = std::vector<uint8_t>;

// The fixture's default shape (2 layers) with Q4_0 weights.
Bytes base() {
  test::TinyModelSpec spec;
  spec.weight_type = GgmlType::Q4_0;
  return test::make_tiny_model(spec).bytes();
}

void expect_clean(const std::string& path) {
  for (const std::string& cmd :
       {" info -m '" + path + "'", " run --backend reference -c 64 -n 2 -p hi -m '" + path + "'"}) {
    SCOPED_TRACE(cmd);
    const auto r = test::run_command("timeout 20 " + test::clchat_binary() + cmd);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 2) << "status " << r.exit_code << ": " << r.err;
    if (r.exit_code == 2) {
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_EQ(r.err.rfind("clchat: " + path + ": ", 0), 0u) << r.err;
    }
  }
}

TEST(MalformedRandomCli, RandomBytes) {
  test::TempDir dir;
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) {
    Bytes bytes(std::uniform_int_distribution<size_t>(0, 4096)(rng));
    for (auto& b : bytes) b = uint8_t(rng());
    if (i % 2 == 1 && bytes.size() >= 8) {  // half of them with a valid magic and version
      const Bytes head = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
      std::copy(head.begin(), head.end(), bytes.begin());
    }
    SCOPED_TRACE(i);
    expect_clean(dir.write("random-" + std::to_string(i) + ".gguf", bytes));
  }
}

// 1..4 flipped bits, three in four of the files in the header and metadata
// (where a flip changes a count, a length, a type or a key), the rest anywhere.
TEST(MalformedRandomCli, BitFlips) {
  test::TempDir dir;
  const Bytes good = base();
  const uint64_t header_end = test::parse_gguf_layout(good).header_end;
  std::mt19937 rng(11);
  for (int i = 0; i < 24; ++i) {
    Bytes bytes = good;
    const uint64_t range = i % 4 == 3 ? bytes.size() : header_end;
    const int n_flips = 1 + int(rng() % 4);
    for (int f = 0; f < n_flips; ++f) {
      const uint64_t at = rng() % range;
      bytes[at] ^= uint8_t(1u << (rng() % 8));
    }
    SCOPED_TRACE(i);
    expect_clean(dir.write("flip-" + std::to_string(i) + ".gguf", bytes));
  }
}

}  // namespace
}  // namespace clchat
