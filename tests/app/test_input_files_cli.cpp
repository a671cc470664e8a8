// Inputs that are not regular files, or too large, through the real
// executable: --config, tokenize -f, perplexity -f and -m each refuse a FIFO
// (opening one used to block forever), a directory (read as an empty or
// one-token text) and /dev/zero (read until memory ran out) with exit status
// 2 and one line naming the path. Every command runs under `timeout`, so a
// blocking open fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

test::CommandResult clchat(const std::string& args) {
  return test::run_command("timeout 60 " + test::clchat_binary() + " " + args);
}

std::string model() { return "'" + test::shared_file("models/stories260K.gguf") + "'"; }

void expect_refused(const test::CommandResult& r, const std::string& path,
                    const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("clchat: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(path + ": " + phrase), std::string::npos) << r.err;
}

struct Inputs {
  test::TempDir dir;
  std::string fifo = dir.file("fifo");
  Inputs() { EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0); }
};

TEST(InputFilesCli, ConfigMustBeASmallRegularFile) {
  const Inputs in;
  const std::string big = in.dir.file("big.toml");
  std::ofstream(big) << std::string((1 << 20) + 1, '#');
  const std::string run = " -m " + model() + " --device cpu -p hi -n 1";
  expect_refused(clchat("--config /dev/zero" + run), "/dev/zero",
                 "a character device, not a regular config file");
  expect_refused(clchat("--config " + in.fifo + run), in.fifo, "a FIFO, not a regular config file");
  expect_refused(clchat("--config " + big + run), big, "the config file is over its 1 MiB limit");
}

TEST(InputFilesCli, TokenizeTextMustBeARegularFile) {
  const Inputs in;
  const std::string tok = "tokenize -m " + model() + " -f ";
  expect_refused(clchat(tok + "/dev/zero"), "/dev/zero",
                 "a character device, not a regular text file");
  expect_refused(clchat(tok + in.fifo), in.fifo, "a FIFO, not a regular text file");
  expect_refused(clchat(tok + in.dir.path()), in.dir.path(),
                 "a directory, not a regular text file");
  // Over the cap: a sparse file, refused by its size before anything is read.
  const std::string huge = in.dir.file("huge.txt");
  std::ofstream(huge).close();
  std::filesystem::resize_file(huge, (uint64_t{256} << 20) + 1);
  expect_refused(clchat(tok + huge), huge, "the text file is over its 256 MiB limit");
}

TEST(InputFilesCli, PerplexityTextMustBeARegularFile) {
  const Inputs in;
  const std::string ppl = "perplexity --device cpu -c 64 -m " + model() + " -f ";
  expect_refused(clchat(ppl + "/dev/zero"), "/dev/zero",
                 "a character device, not a regular text file");
  expect_refused(clchat(ppl + in.fifo), in.fifo, "a FIFO, not a regular text file");
  expect_refused(clchat(ppl + in.dir.path()), in.dir.path(),
                 "a directory, not a regular text file");
}

TEST(InputFilesCli, ModelMustBeARegularFile) {
  const Inputs in;
  expect_refused(clchat("info -m " + in.fifo), in.fifo, "a FIFO, not a regular file");
  expect_refused(clchat("run --device cpu -p hi -n 1 -m " + in.fifo), in.fifo,
                 "a FIFO, not a regular file");
  expect_refused(clchat("info -m /dev/zero"), "/dev/zero",
                 "a character device, not a regular file");
}

// The control: the same commands on regular files work.
TEST(InputFilesCli, RegularFilesAreRead) {
  test::TempDir dir;
  const std::string text = dir.file("text.txt");
  std::ofstream(text) << "Once upon a time";
  const auto r = clchat("tokenize --ids -m " + model() + " -f " + text);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(' '), std::string::npos) << r.out;
}

}  // namespace
}  // namespace clchat
