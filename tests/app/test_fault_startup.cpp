// Start-up faults through the real executable: a state or cache directory that
// cannot be created, a config file that is missing, a directory or invalid
// TOML, and a --device that matches nothing. Each either works (the state and
// cache directories are optional) or ends with exit status 1 or 2 and one line
// on stderr that says what to do. Line mode runs on stories260K on the test
// device (CLCHAT_TEST_DEVICE, default cpu = PoCL).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::string device() {
  const char* d = std::getenv("CLCHAT_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

// `env ENV clchat ARGS`, with `input` on its stdin (run_command gives the
// command /dev/null, so the pipe lives in a subshell).
test::CommandResult clchat(const std::string& env, const std::string& args,
                           const std::string& input = "") {
  return test::run_command("( printf '" + input + "' | env " + env + " " + test::clchat_binary() +
                           " " + args + " )");
}

std::string chat_args() {
  return "-m '" + test::shared_file("models/stories260K.gguf") + "' --device " + device() +
         " -c 64 -n 4";
}

void expect_one_line(const test::CommandResult& r, int exit_code, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("clchat: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
}

// The log file, history and autosaves live in $XDG_STATE_HOME/clchat; when it
// cannot be created (its parent is a file), chatting still works.
TEST(FaultStartup, UnwritableStateDirectory) {
  const auto r = clchat("XDG_STATE_HOME=/dev/null/state", chat_args(), "Once upon a time\\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find_first_not_of(" \n"), std::string::npos) << "no reply";
  // (PoCL may print compiler warnings when its cache is cold; clchat nothing.)
  EXPECT_EQ(r.err.find("clchat:"), std::string::npos) << r.err;
}

// clchat's compiled-kernel cache is optional too (PoCL's own cache is
// pointed somewhere writable here; see the next test for it).
TEST(FaultStartup, UnwritableKernelCache) {
  test::TempDir pocl;
  const auto r = clchat("XDG_CACHE_HOME=/dev/null/cache POCL_CACHE_DIR=" + pocl.path(), chat_args(),
                        "Once upon a time\\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find_first_not_of(" \n"), std::string::npos) << "no reply";
}

// PoCL offers no device when it cannot create its cache directory. That used
// to read "no OpenCL platform found. Install an OpenCL driver", which sent
// people to reinstall a driver that was there; now the line says what failed.
TEST(FaultStartup, DriverWithoutItsCacheDirectory) {
  const auto r = clchat("-u POCL_CACHE_DIR HOME=/dev/null XDG_CACHE_HOME=/dev/null/cache",
                        "run " + chat_args() + " -p hi");
  if (r.exit_code == 0) GTEST_SKIP() << "this OpenCL driver starts without a cache directory";
  expect_one_line(r, 1, device() == "cpu" ? "cache directory" : "OpenCL");
  EXPECT_EQ(r.err.find("no OpenCL platform found"), std::string::npos) << r.err;
}

TEST(FaultStartup, DeviceMatchingNothingListsTheDevices) {
  for (const std::string mode : {"run -p hi ", ""}) {
    SCOPED_TRACE(mode.empty() ? "line mode" : mode);
    const auto r = clchat(
        "",
        mode + "-m '" + test::shared_file("models/stories260K.gguf") + "' --device no-such-device",
        "hi\\n");
    expect_one_line(r, 1, "no OpenCL device matches --device 'no-such-device'; available: 0: ");
    EXPECT_NE(r.err.find("(select with --device cpu|gpu|INDEX|NAME)"), std::string::npos);
  }
}

// Issue 21: a damaged compiled-kernel cache entry crashed every later start
// (PoCL assertion or SIGSEGV in clCreateProgramWithBinary) until the cache
// was deleted. Each entry is damaged one of the ways; the next start
// warns, deletes and rebuilds them and replies as before; the one after that
// finds valid entries and says nothing.
TEST(FaultStartup, DamagedKernelCacheIsRebuilt) {
  test::TempDir dir;
  const std::string run =
      "( " + test::clchat_binary() + " run --device " + device() + " --kernel-cache " + dir.path() +
      " -m '" + test::shared_file("models/stories260K.gguf") + "' -p 'Once upon' -n 4 --seed 7 )";
  const auto first = test::run_command(run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries.push_back(e.path());
  ASSERT_FALSE(entries.empty());
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string bytes = test::read_file(entries[i].string());
    switch (i % 4) {
      case 0:
        bytes.resize(bytes.size() / 2);
        break;
      case 1:
        bytes.replace(16, 8, 8, '\xff');
        break;
      case 2:
        bytes[24] = char(bytes[24] + 1);  // the length field
        break;
      default:
        bytes.clear();
    }
    std::ofstream(entries[i], std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  }
  const auto second = test::run_command(run);
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, first.out);
  size_t warnings = 0;
  for (size_t at = 0; (at = second.err.find("deleted it, rebuilding", at)) != std::string::npos;
       ++at) {
    ++warnings;
  }
  EXPECT_EQ(warnings, entries.size()) << second.err;
  const auto third = test::run_command(run);
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(third.out, first.out);
  EXPECT_EQ(third.err.find("kernel cache entry"), std::string::npos) << third.err;
}

TEST(FaultStartup, BadConfigFilesStopWithOneLine) {
  test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  const std::string syntax = write("syntax.toml", "model = \"x\"\nsampling = =\ndevice = \"\"\n");
  const std::string type = write("type.toml", "\n\ncontext_size = \"big\"\n");
  const std::string deep = write("deep.toml", "a = " + std::string(100, '[') + "\n");
  const struct {
    std::string config;
    std::string phrase;
  } cases[] = {
      {syntax, syntax + ":2: syntax error"},
      {type, type + ":3: context_size: expected an integer"},
      {deep, deep + ":1: arrays, tables or dotted keys nested deeper than 32 levels"},
      {dir.file("missing.toml"), dir.file("missing.toml") + ": cannot open config file"},
      {dir.path(), dir.path() + ": a directory, not a regular config file"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config);
    expect_one_line(clchat("", "--config '" + c.config + "' " + chat_args(), "hi\\n"), 2,
                    "clchat: config: " + c.phrase);
  }
  // The same file found in $XDG_CONFIG_HOME instead of named.
  test::TempDir home;
  std::filesystem::create_directories(home.file("clchat"));
  std::filesystem::copy_file(type, home.file("clchat/config.toml"));
  expect_one_line(clchat("XDG_CONFIG_HOME=" + home.path(), chat_args(), "hi\\n"), 2,
                  "clchat: config: " + home.file("clchat/config.toml") +
                      ":3: context_size: expected an integer");
}

}  // namespace
}  // namespace clchat
