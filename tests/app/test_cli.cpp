// The clchat executable end to end: tokenize against the shared vectors,
// info, run on both backends, exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::vector<std::string> split_cases(const std::string& text) {
  std::vector<std::string> cases;
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    if (end == std::string::npos) break;
    cases.push_back(text.substr(start, end - start));
    start = end + sep.size();
  }
  return cases;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

void check_tokenize_vectors(const std::string& model, const std::string& inp,
                            const std::string& out, bool special) {
  const auto cases = split_cases(test::read_file(inp));
  const auto expected = lines(test::read_file(out));
  ASSERT_EQ(cases.size(), expected.size());
  // ctest runs tests as separate processes in parallel: each needs its own file.
  const test::TempDir dir;
  const std::string tmp = dir.file("case.txt");
  for (size_t i = 0; i < cases.size(); ++i) {
    std::ofstream(tmp, std::ios::binary) << cases[i];
    const auto r = test::run_command(test::clchat_binary() + " tokenize -m " + model + " -f " +
                                     tmp + " --ids --no-bos" + (special ? " --special" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(trim(r.out), trim(expected[i])) << "case " << i << ": " << cases[i];
  }
}

TEST(Cli, TokenizeReproducesSmolLM2Vectors) {
  check_tokenize_vectors(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                         test::shared_file("reference/tokenizer-smollm2.inp"),
                         test::shared_file("reference/tokenizer-smollm2.out"), false);
  check_tokenize_vectors(test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                         test::shared_file("reference/tokenizer-smollm2-special.inp"),
                         test::shared_file("reference/tokenizer-smollm2-special.out"), true);
}

TEST(Cli, TokenizeReproducesLlamaSpmVectors) {
  const std::string vocab = test::shared_file("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  check_tokenize_vectors(vocab, vocab + ".inp", vocab + ".out", false);
}

TEST(Cli, TokenizeAddsBosPerModel) {
  const auto r = test::run_command(test::clchat_binary() + " tokenize -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 'Once upon a time' --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), "1 403 407 261 378");  // models/SOURCE.md
}

TEST(Cli, InfoJsonDescribesSmolLM2) {
  const auto r = test::run_command(test::clchat_binary() + " info --json -m " +
                                   test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_embd"], 576);
  EXPECT_EQ(j["n_layer"], 30);
  EXPECT_EQ(j["n_head"], 9);
  EXPECT_EQ(j["n_head_kv"], 3);
  EXPECT_EQ(j["n_ff"], 1536);
  EXPECT_EQ(j["n_vocab"], 49152);
  EXPECT_EQ(j["tied_embeddings"], true);
  EXPECT_EQ(j["weight_type"], "Q4_1");
  EXPECT_EQ(j["n_tensors"], 272);
  EXPECT_EQ(j["file_size"], 98362432);
  EXPECT_EQ(j["chat_template"], true);
}

const char* k_stories_ids =
    "432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292 411 322 265 "
    "282 295 433 426 385 328 432 358 394 261 370 432 352 266 268 388 426 338 391 266 267 337 335 "
    "312 432 398 312 286 267 414 270 333 415 426 13 438 310";

TEST(Cli, RunReferenceBackendReproducesStories260K) {
  const auto r = test::run_command(test::clchat_binary() + " run --backend reference -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 'Once upon a time' -n 60 --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), k_stories_ids);
}

TEST(Cli, RunOpenClBackendReproducesStories260K) {
  const auto r = test::run_command(test::clchat_binary() + " run --backend opencl -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 'Once upon a time' -n 60 --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), k_stories_ids);
}

TEST(Cli, RunPrintsTextOfStories260K) {
  const auto r = test::run_command(test::clchat_binary() + " run --backend reference -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 'Once upon a time' -n 11");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The start of the continuation quoted in models/SOURCE.md.
  EXPECT_EQ(r.out.rfind(", there was a little girl named Lily.", 0), 0u) << r.out;
}

TEST(Cli, RunWithZeroTokensPrintsNothing) {
  // The default context is the prompt plus the tokens to generate: with -n 0
  // that is the prompt alone, which the prefill fills exactly.
  for (const std::string backend : {"reference", "opencl"}) {
    const auto r = test::run_command(
        test::clchat_binary() + " run --backend " + backend + " --device cpu -m " +
        test::shared_file("models/stories260K.gguf") + " -p 'Once upon a time' -n 0 --ids");
    ASSERT_EQ(r.exit_code, 0) << backend << ": " << r.err;
    EXPECT_EQ(trim(r.out), "") << backend;
    EXPECT_NE(r.err.find("decode 0 tok"), std::string::npos) << r.err;
  }
  // -n 1 fits the same context: no token is fed back.
  const auto r = test::run_command(test::clchat_binary() + " run --backend reference -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 'Once upon a time' -n 1 --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trim(r.out), "432");
}

TEST(Cli, BenchJsonRecordsOnePerTest) {
  // Speeds are not asserted (they belong to the record); the fields are.
  const auto r = test::run_command(test::clchat_binary() + " bench --device cpu -m " +
                                   test::shared_file("models/stories260K.gguf") +
                                   " -p 8 -n 4 -d 16 -r 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto records = nlohmann::json::parse(r.out);
  ASSERT_EQ(records.size(), 2u) << r.out;
  EXPECT_EQ(records[0]["test"], "pp8 @ d16");
  EXPECT_EQ(records[0]["n_prompt"], 8);
  EXPECT_EQ(records[0]["n_gen"], 0);
  EXPECT_EQ(records[1]["test"], "tg4 @ d16");
  EXPECT_EQ(records[1]["n_gen"], 4);
  for (const auto& rec : records) {
    EXPECT_EQ(rec["n_depth"], 16);
    EXPECT_EQ(rec["quant"], "F32");
    EXPECT_GT(rec["avg_ts"].get<double>(), 0.0);
    EXPECT_GE(rec["stddev_ts"].get<double>(), 0.0);
    EXPECT_FALSE(rec["device"].get<std::string>().empty());
  }
  // Without -d the names are llama-bench's plain ones.
  const auto plain =
      test::run_command(test::clchat_binary() + " bench --device cpu -m " +
                        test::shared_file("models/stories260K.gguf") + " -p 0 -n 4 -r 1 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto one = nlohmann::json::parse(plain.out);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["test"], "tg4");
  EXPECT_EQ(one[0]["n_depth"], 0);
  // Out of range: a usage error, nothing run.
  const auto bad = test::run_command(test::clchat_binary() + " bench --device cpu -m " +
                                     test::shared_file("models/stories260K.gguf") + " -d -1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST(Cli, ExitCodes) {
  const std::string bin = test::clchat_binary();
  auto r = test::run_command(bin + " run -m /nonexistent.gguf -p hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_command(bin + " run --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_command(bin + " frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_command(bin + " --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("tokenize"), std::string::npos);
  r = test::run_command(bin + " run --device no-such-device -m " +
                        test::shared_file("models/stories260K.gguf") + " -p hi -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no OpenCL device matches"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace clchat
