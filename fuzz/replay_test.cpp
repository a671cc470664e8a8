// Replays every input under fuzz/regressions/<target>/ through its fuzz
// target in the ordinary build (and under ASan/UBSan in the sanitizer build),
// so a crash the fuzzers once found stays fixed without clang or libFuzzer.
// Each file is an input that crashed or broke an invariant before its fix, or
// a hand-written edge case; the file name says which.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {
namespace {

using Target = int (*)(const uint8_t*, size_t);

void replay(const std::string& name, Target target) {
  const std::filesystem::path dir = std::filesystem::path(CLCHAT_FUZZ_DIR) / "regressions" / name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NO_THROW(EXPECT_EQ(target(bytes.data(), bytes.size()), 0));
    ++n;
  }
  EXPECT_GT(n, 0) << "no inputs in " << dir;
}

TEST(FuzzRegressions, Gguf) { replay("gguf", fuzz_gguf); }
TEST(FuzzRegressions, TokenizerBpe) { replay("tokenizer_bpe", fuzz_tokenizer_bpe); }
TEST(FuzzRegressions, TokenizerSpm) { replay("tokenizer_spm", fuzz_tokenizer_spm); }
TEST(FuzzRegressions, ChatTemplate) { replay("chat_template", fuzz_chat_template); }
TEST(FuzzRegressions, Config) { replay("config", fuzz_config); }
TEST(FuzzRegressions, Commands) { replay("commands", fuzz_commands); }
TEST(FuzzRegressions, KernelCache) { replay("kernel_cache", fuzz_kernel_cache); }

// The targets must be able to fail: a broken invariant throws.
TEST(FuzzRegressions, InvariantChecksThrow) { EXPECT_THROW(require(false, "x"), FuzzFailure); }

}  // namespace
}  // namespace clchat::fuzz
