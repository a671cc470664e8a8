// The clchat executable end to end: tokenize against the shared vectors,
// info, run on both backends, exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/model/synthetic.h"
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
  // SmolLM2-Instruct's tokenizer.chat_template is ChatML (<|im_start|>).
  EXPECT_EQ(j["chat_template"], "chatml");
  EXPECT_EQ(j["has_chat_template"], true);
}

// llama-quantize's Q4_K_M: the layer matrices' types, most common first (ties
// in GGML's id order), and the file type general.file_type names.
TEST(Cli, InfoDescribesAMixedFile) {
  const std::string model = test::shared_file("models/SmolLM2-135M-Instruct.Q4_K_M.gguf");
  const auto r = test::run_command(test::clchat_binary() + " info --json -m " + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(j["weight_type"], "Q4_K_M mix");
  EXPECT_EQ(j["layer_weight_types"].dump(), R"({"Q5_0":166,"Q4_K":16,"Q8_0":14,"Q6_K":14})");
  const auto text = test::run_command(test::clchat_binary() + " info -m " + model);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("weights:       Q5_0, Q4_K, Q8_0, Q6_K (layer matrices, Q4_K_M mix)\n"),
            std::string::npos)
      << text.out;
}

// Float32 settings print as themselves, not as the double they widen to
// (9.999999747378752e-06).
TEST(Cli, InfoPrintsFloat32SettingsShort) {
  const std::string model = test::shared_file("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const auto text = test::run_command(test::clchat_binary() + " info -m " + model);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("rms eps:       1e-05\n"), std::string::npos) << text.out;
  const auto r = test::run_command(test::clchat_binary() + " info --json -m " + model);
  EXPECT_NE(r.out.find("\"rms_eps\": 1e-05"), std::string::npos) << r.out;
}

// The --verbose header names the device once.
TEST(Cli, VerboseHeaderNamesTheDeviceOnce) {
  const auto r = test::run_command("printf 'hi\\n' | " + test::clchat_binary() +
                                   " --device cpu -n 2 --verbose -m " +
                                   test::shared_file("models/stories260K.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string header = r.err.substr(0, r.err.find('\n'));
  EXPECT_EQ(header.find("pthread"), header.rfind("pthread")) << header;
  EXPECT_NE(header.find("| opencl |"), std::string::npos) << header;
}

// synth --quant takes llama-quantize's file types (any case) and writes the
// mix llama-quantize would; an unknown name is one usage error listing the
// accepted ones, for synth and bench alike.
TEST(Cli, SynthQuantMixes) {
  const test::TempDir dir;
  const std::string out = dir.file("q4_k_m.gguf");
  const auto r = test::run_command(test::clchat_binary() + " synth --quant Q4_K_M -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Q4_K_M mix"), std::string::npos) << r.err;
  const auto info = test::run_command(test::clchat_binary() + " info --json -m " + out);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["weight_type"], "Q4_K_M mix");
  EXPECT_EQ(j["tensor_types"],
            nlohmann::json({{"F32", 61}, {"Q5_0", 166}, {"Q4_K", 16}, {"Q6_K", 14}, {"Q8_0", 15}}));
  for (const std::string& cmd :
       {" synth -o " + dir.file("x.gguf"), std::string(" bench --synthetic smollm2-135m")}) {
    const auto bad = test::run_command(test::clchat_binary() + cmd + " --quant q4_k_x");
    EXPECT_EQ(bad.exit_code, 2) << cmd;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    EXPECT_NE(bad.err.find("unknown quantization 'q4_k_x'"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("q3_k_l"), std::string::npos) << bad.err;
  }
  const auto help = test::run_command(test::clchat_binary() + " bench --help");
  EXPECT_NE(help.out.find("q4_k_m"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("iq4_xs"), std::string::npos) << help.out;
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
  // tg's bytes read per token, at its speed, beside the device's own reads
  // (test_cl_read_bandwidth checks the figures); pp has none.
  // stories260K's F32 matrices are nearly all of its file: a token reads about
  // the file's size (its norms and the KV cache's 16-20 rows aside).
  const double file_bytes =
      double(std::filesystem::file_size(test::shared_file("models/stories260K.gguf")));
  EXPECT_GT(records[1]["bytes_per_token"].get<double>(), 0.8 * file_bytes);
  EXPECT_LT(records[1]["bytes_per_token"].get<double>(), 1.2 * file_bytes);
  EXPECT_GT(records[1]["read_bytes_per_s"].get<double>(), 0.0);
  EXPECT_GT(records[1]["device_read_bytes_per_s"].get<double>(), 0.0);
  EXPECT_FALSE(records[0].contains("bytes_per_token"));
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
  // The table form says the same in a line after the table.
  const auto text =
      test::run_command(test::clchat_binary() + " bench --device cpu -m " +
                        test::shared_file("models/stories260K.gguf") + " -p 0 -n 4 -r 1");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("\ntg4 reads "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" GB/s this device reads ("), std::string::npos) << text.out;
  // Out of range: a usage error, nothing run.
  const auto bad = test::run_command(test::clchat_binary() + " bench --device cpu -m " +
                                     test::shared_file("models/stories260K.gguf") + " -d -1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

// A small Gemma 3 shape (a 5-position window on layers 0-4 of 6): with
// bench's chunks of 512 its window layers keep rings of 517 rows, so a pp600
// run at depth 520 overwrites the rows of the window before 520, and bench
// fills the depth again before the next run instead of failing.
TEST(Cli, BenchAtDepthRefillsSlidingWindowRings) {
  SyntheticSpec s;
  s.name = "test-bench-gemma3";
  s.arch = "gemma3";
  s.head_dim = 64;
  s.sliding_window = 5;
  s.n_embd = 128;
  s.n_layer = 6;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.n_ctx = 2048;
  s.layer_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  const std::string path = write_synthetic_model_tmp(s);
  const auto r = test::run_command(test::clchat_binary() + " bench --device cpu -m " + path +
                                   " -p 600 -n 4 -d 520 -r 2 --json");
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto records = nlohmann::json::parse(r.out);
  ASSERT_EQ(records.size(), 2u) << r.out;
  EXPECT_EQ(records[0]["test"], "pp600 @ d520");
  EXPECT_EQ(records[1]["test"], "tg4 @ d520");
}

// --temp (or a penalty) makes tg sample; the test names where, and the device
// chain's launch counts.
TEST(Cli, BenchSamplesWhenAskedTo) {
  const std::string bench = test::clchat_binary() + " bench --device cpu -m " +
                            test::shared_file("models/stories260K.gguf") +
                            " -p 0 -n 4 -r 1 --json ";
  const auto greedy = test::run_command(bench);
  const auto device = test::run_command(bench + "--temp 0.8 --seed 3");
  const auto host = test::run_command(bench + "--temp 0.8 --top-k 0");
  const auto penalised = test::run_command(bench + "--repeat-penalty 1.2");
  for (const auto* r : {&greedy, &device, &host, &penalised}) {
    ASSERT_EQ(r->exit_code, 0) << r->err;
  }
  const auto record = [](const test::CommandResult& r) {
    return nlohmann::json::parse(r.out).at(0);
  };
  EXPECT_EQ(record(greedy)["test"], "tg4");
  EXPECT_EQ(record(device)["test"], "tg4 (sampled on the device)");
  EXPECT_EQ(record(host)["test"], "tg4 (sampled on the host)");
  EXPECT_EQ(record(penalised)["test"], "tg4 (sampled on the device)");  // greedy + penalty
  EXPECT_EQ(record(device)["launches_per_token"].get<int>(),
            record(greedy)["launches_per_token"].get<int>() + 1);
  EXPECT_EQ(record(host)["launches_per_token"], record(greedy)["launches_per_token"]);
  EXPECT_EQ(test::run_command(bench + "--temp -1").exit_code, 2);  // the chat's rules
}

// `clchat BEFORE bench ARGS --json` on stories260K (tg4 only): its launches
// per token.
int bench_launches_per_token(const std::string& args, const std::string& before = "") {
  const auto r = test::run_command(
      test::clchat_binary() + " " + before + " bench --device cpu -m " +
      test::shared_file("models/stories260K.gguf") + " -p 0 -n 4 -r 1 --json " + args);
  EXPECT_EQ(r.exit_code, 0) << before << " bench " << args << ": " << r.err;
  if (r.exit_code != 0) return -1;
  return nlohmann::json::parse(r.out).at(0).at("launches_per_token").get<int>();
}

// The engine switches turn the one-launch persistent kernel off whichever way
// they come: the flag (after the command or before it), --tune persistent=0,
// the config file's [engine] table. The other switches are accepted on every
// command that builds an OpenCL engine.
// The engine flags and the config table reach the engine, before or after the
// subcommand: --no-persistent's effect is seen in the launches per token; the
// other switches are checked here for being accepted by every subcommand that
// builds an engine (what each turns off is Tuning.SwitchesTurnThePathsOff, and
// tensor cores exist only on NVIDIA, so PoCL cannot show that one).
TEST(Cli, EngineSwitchesReachTheEngine) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "no persistent decode kernel for CPUs of this host";
#endif
  EXPECT_EQ(bench_launches_per_token(""), 1);
  EXPECT_EQ(bench_launches_per_token("--no-lookahead --no-tensor-cores"), 1);
  EXPECT_GT(bench_launches_per_token("--no-persistent"), 1);
  EXPECT_GT(bench_launches_per_token("--tune persistent=0"), 1);
  EXPECT_GT(bench_launches_per_token("", "--no-persistent"), 1);  // before the command
  const test::TempDir dir;
  const std::string config = dir.file("config.toml");
  std::ofstream(config) << "[engine]\npersistent_decode = false\n";
  EXPECT_GT(bench_launches_per_token("", "--config " + config), 1);
  // The plan gives the same ids as the kernel.
  const auto run = test::run_command(
      test::clchat_binary() + " run --device cpu --no-persistent --no-lookahead --no-tensor-cores" +
      " -m " + test::shared_file("models/stories260K.gguf") + " -p 'Once upon a time' -n 60 --ids");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(trim(run.out), k_stories_ids);
  const auto chat =
      test::run_command("printf 'Once upon a time\\n' | " + test::clchat_binary() +
                        " --device cpu --no-persistent --no-lookahead --no-tensor-cores -n 4 -m " +
                        test::shared_file("models/stories260K.gguf"));
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  const auto ppl = test::run_command(
      test::clchat_binary() + " perplexity --no-persistent --no-lookahead --no-tensor-cores" +
      " --device cpu -c 64 -m " + test::shared_file("models/stories260K.gguf") + " -f " +
      test::shared_file("models/SOURCE.md"));
  EXPECT_EQ(ppl.exit_code, 0) << ppl.err;
  for (const char* cmd : {"", "run ", "bench ", "perplexity "}) {
    const auto help = test::run_command(test::clchat_binary() + " " + cmd + "--help");
    for (const char* flag :
         {"--no-persistent", "--no-tensor-cores", "--no-lookahead", "--kernel-cache DIR"}) {
      EXPECT_NE(help.out.find(flag), std::string::npos) << cmd << flag;
    }
  }
}

// --kernel-cache DIR wins over $CLCHAT_KERNEL_CACHE, which is the fallback.
TEST(Cli, KernelCacheFolder) {
  const test::TempDir dir;
  const std::string flag_dir = dir.file("flag"), env_dir = dir.file("env");
  const auto r = test::run_command("CLCHAT_KERNEL_CACHE=" + env_dir + " " + test::clchat_binary() +
                                   " run --device cpu --kernel-cache " + flag_dir + " -m " +
                                   test::shared_file("models/stories260K.gguf") + " -p hi -n 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto n_binaries = [](const std::string& folder) {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
      n += e.path().extension() == ".bin";
    }
    return n;
  };
  EXPECT_GT(n_binaries(flag_dir), 0u);
  EXPECT_EQ(n_binaries(env_dir), 0u);
}

TEST(Cli, BenchTuneRejectsUnknownKeysAndBadValues) {
  const std::string bench = test::clchat_binary() + " bench --device cpu -m " +
                            test::shared_file("models/stories260K.gguf") + " -p 0 -n 2 -r 1 ";
  for (const std::string bad : {"bogus=1", "tpr=abc", "persistent=maybe", "tpr", "tpr=3"}) {
    const auto r = test::run_command(bench + "--tune " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
    EXPECT_EQ(r.err.rfind("clchat: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "") << bad;
  }
  const auto help = test::run_command(test::clchat_binary() + " bench --device cpu --tune help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("persist_groups"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("tensor_cores"), std::string::npos) << help.out;
  const auto ok = test::run_command(bench + "--json --tune cpu_fuse=0 --tune att_split_pos=8");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
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
