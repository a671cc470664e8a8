// OpenCL failures that a healthy PoCL never produces, made on demand with the
// CLCHAT_FAULT test hook (engine/cl/fault_injection.h): a kernel that does not
// compile, an allocation the device refuses, a launch without resources, and
// a model larger than the device's memory. Through the real executable, each
// must end `clchat run` and the line-mode chat with exit status 1 and one
// "clchat:" line on stderr naming the failure; a build failure puts the
// compiler's whole log in the log file. The formatting of the hint that names
// other devices is tested directly (this machine has one OpenCL device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "engine/cl/build_error.h"
#include "engine/cl/device_fit.h"
#include "engine/cl/fault_injection.h"
#include "tests/gguf_fixtures.h"
#include "tests/test_support.h"

namespace clchat {
namespace {

std::string device() {
  const char* d = std::getenv("CLCHAT_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

std::string model_args() {
  return "-m '" + test::shared_file("models/stories260K.gguf") + "' --device " + device() +
         " -c 64 -n 4";
}

// `clchat ARGS` with CLCHAT_FAULT=fault, its state (log file) in `state`.
test::CommandResult clchat_with_fault(const std::string& fault, const test::TempDir& state,
                                      const std::string& args, const std::string& input = "") {
  return test::run_command("( printf '" + input + "' | env CLCHAT_FAULT=" + fault +
                           " XDG_STATE_HOME=" + state.path() + " " + test::clchat_binary() + " " +
                           args + " )");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Exit status 1 and exactly one line from clchat naming the failure. PoCL
// writes its compiler's summary ("N warnings and M errors generated.") to
// file descriptor 2 itself; lines that are not clchat's are allowed when
// `driver_lines_allowed`.
void expect_failure_line(const test::CommandResult& r, const std::string& phrase,
                         bool driver_lines_allowed) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto lines = lines_of(r.err);
  const auto ours = std::count_if(lines.begin(), lines.end(),
                                  [](const std::string& l) { return l.rfind("clchat: ", 0) == 0; });
  EXPECT_EQ(ours, 1) << r.err;
  if (!driver_lines_allowed) {
    EXPECT_EQ(lines.size(), 1u) << r.err;
  }
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
}

const struct {
  const char* fault;
  const char* phrase;
  bool driver_lines_allowed;
} k_faults[] = {
    {"build", "failed (CL_BUILD_PROGRAM_FAILURE): ", true},
    {"alloc", "failed: CL_MEM_OBJECT_ALLOCATION_FAILURE", false},
    {"device_mem=100000", "the model's weights need ", false},
};

TEST(FaultOpenCL, RunReportsEachFailureInOneLine) {
  for (const auto& f : k_faults) {
    SCOPED_TRACE(f.fault);
    test::TempDir state;
    const auto r = clchat_with_fault(f.fault, state, "run " + model_args() + " -p 'Once upon'");
    expect_failure_line(r, f.phrase, f.driver_lines_allowed);
    EXPECT_EQ(r.out, "");
  }
}

TEST(FaultOpenCL, LineModeReportsEachLoadFailureInOneLine) {
  for (const auto& f : k_faults) {
    SCOPED_TRACE(f.fault);
    test::TempDir state;
    const auto r = clchat_with_fault(f.fault, state, model_args(), "Once upon\\n");
    expect_failure_line(r, f.phrase, f.driver_lines_allowed);
    EXPECT_EQ(r.out, "");
  }
}

// The compiler's whole log lands in the log file named by the message.
TEST(FaultOpenCL, BuildLogGoesToTheLogFile) {
  for (const std::string mode : {"run -p hi ", ""}) {
    SCOPED_TRACE(mode.empty() ? "line mode" : mode);
    test::TempDir state;
    const auto r = clchat_with_fault("build", state, mode + model_args(), "hi\\n");
    const std::string log_path = state.file("clchat/clchat.log");
    EXPECT_NE(r.err.find("(build log in " + log_path + ")"), std::string::npos) << r.err;
    const std::string log = test::read_file(log_path);
    EXPECT_NE(log.find("build log:"), std::string::npos) << log;
    // PoCL names the injected line's file ("clchat-fault-injection:1:13");
    // NVIDIA's compiler ignores #line names but quotes the line.
    EXPECT_TRUE(log.find("clchat-fault-injection") != std::string::npos ||
                log.find("clchat fault injection: not OpenCL C") != std::string::npos)
        << log;
  }
}

// A launch that fails stops `run`; in line mode the turn fails with one line
// and the chat reads the next one.
TEST(FaultOpenCL, EnqueueFailure) {
  test::TempDir state;
  const auto run = clchat_with_fault("enqueue", state, "run " + model_args() + " -p 'Once upon'");
  expect_failure_line(run, "failed: CL_OUT_OF_RESOURCES", true);

  const auto chat = clchat_with_fault("enqueue", state, model_args(), "Once upon\\nA time\\n");
  const auto lines = lines_of(chat.err);
  const auto failed_turns = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.rfind("clchat: ", 0) == 0 && l.find("CL_OUT_OF_RESOURCES") != std::string::npos;
  });
  EXPECT_EQ(failed_turns, 2) << chat.err;
  EXPECT_EQ(chat.exit_code, 1) << chat.err;
}

// The persistent decode kernel (one launch per token, work-groups meeting at
// spin barriers; used on x86-64 CPU devices and NVIDIA) gives a token up when
// a barrier waits too long. `run` must then say so once on stderr, recompute
// that token on the multi-kernel plan, go on with the kernel, and print the
// same text as a run without the fault (the 12th launch: the start-up check
// is the first, so mid-reply). Three such tokens leave the plan for good.
TEST(FaultOpenCL, BarrierTimeoutRecomputesTheTokenOnThePlan) {
#if !defined(__x86_64__)
  if (device() == "cpu") GTEST_SKIP() << "no persistent decode kernel for CPUs of this host";
#endif
  const std::string args = "run -m '" + test::shared_file("models/stories260K.gguf") +
                           "' --device " + device() + " -c 64 -n 40 -p 'Once upon a time'";
  test::TempDir state;
  const auto plain = clchat_with_fault("", state, args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // Is the kernel used here? With --profile, `run` prints the last token's
  // launches: 1 on the kernel. NVIDIA's kernel wants heads of 32 or more
  // (stories260K's are 8): there the plan runs and the hook has nothing to
  // break. CPU devices of x86-64 hosts always take the kernel.
  const auto probe = clchat_with_fault("", state, args + " --profile");
  const bool used = probe.err.find("last token: 1 launches") != std::string::npos;
#if defined(__x86_64__)
  if (device() == "cpu") {
    EXPECT_TRUE(used) << probe.err;
  }
#endif
  if (!used) GTEST_SKIP() << "the persistent decode kernel is not used for this model here";
  const auto faulty = clchat_with_fault("barrier_timeout=12", state, args);
  EXPECT_EQ(plain.err.find("timed out"), std::string::npos) << plain.err;
  EXPECT_EQ(faulty.exit_code, 0) << faulty.err;
  const std::string warning = "persistent decode kernel timed out at a grid barrier";
  EXPECT_NE(faulty.err.find(warning + "; this token runs on the multi-kernel plan"),
            std::string::npos)
      << faulty.err;
  EXPECT_EQ(faulty.err.find(warning), faulty.err.rfind(warning)) << faulty.err;  // once
  EXPECT_GT(plain.out.size(), 40u);
  EXPECT_EQ(faulty.out, plain.out);
}

TEST(FaultInjection, ParsesTheHook) {
  const fault::Faults f = fault::parse("build,enqueue,device_mem=4096");
  EXPECT_TRUE(f.build);
  EXPECT_FALSE(f.alloc);
  EXPECT_TRUE(f.enqueue);
  EXPECT_EQ(f.device_mem, 4096u);
  EXPECT_TRUE(fault::parse("alloc").alloc);
  EXPECT_FALSE(fault::parse("").build);
  EXPECT_THROW(fault::parse("bulid"), std::invalid_argument);
  EXPECT_THROW(fault::parse("device_mem=lots"), std::invalid_argument);
  EXPECT_THROW(fault::parse("device_mem=0"), std::invalid_argument);
  EXPECT_EQ(fault::parse("barrier_timeout=12").barrier_timeout, 12u);
  EXPECT_EQ(fault::parse("build").barrier_timeout, 0u);
  EXPECT_THROW(fault::parse("barrier_timeout=0"), std::invalid_argument);
  EXPECT_THROW(fault::parse("barrier_timeout=-1"), std::invalid_argument);
}

DeviceInfo device_info(int index, const std::string& name, bool gpu) {
  DeviceInfo d;
  d.index = index;
  d.name = name;
  d.is_gpu = gpu;
  d.is_cpu = !gpu;
  return d;
}

TEST(DeviceHint, NamesTheOtherDevicesAndHowToSelectOne) {
  const std::vector<DeviceInfo> devices = {device_info(0, "pthread-cpu", false),
                                           device_info(1, "NVIDIA H100", true),
                                           device_info(2, "Intel UHD", true)};
  EXPECT_EQ(other_devices_hint(devices, 1),
            "; other OpenCL devices: 0: pthread-cpu (cpu), 2: Intel UHD (gpu); select one with "
            "--device INDEX");
  EXPECT_EQ(other_devices_hint({devices[0]}, 0), "");
}

TEST(DeviceHint, FirstBuildErrorLine) {
  EXPECT_EQ(first_build_error("warning: unused x\n\nk.cl:3:1: error: unknown type 'y'\nmore\n"),
            "k.cl:3:1: error: unknown type 'y'");
  EXPECT_EQ(first_build_error("\n  only a note  \n"), "  only a note");
  EXPECT_EQ(first_build_error(""), "");
  EXPECT_EQ(first_build_error("error: " + std::string(300, 'x'), 20), "error: xxxxxxxxxxxxx...");
}

}  // namespace
}  // namespace clchat
