// OpenCL object accounting (engine/cl/object_counts.h) on the CPU OpenCL
// device (PoCL): creating buffers, programs, kernels, events, a context and a
// queue through the runtime raises the created and live counts of exactly
// that kind by the number made; releasing them raises the released count and
// brings live back; moving a handle counts nothing; a null handle is not an
// object. Expected deltas are the numbers of objects each test makes.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/cl/object_counts.h"
#include "tests/cl/cl_test_support.h"

namespace clchat {
namespace {

constexpr ClObjectKind kAllKinds[] = {ClObjectKind::buffer,  ClObjectKind::kernel,
                                      ClObjectKind::program, ClObjectKind::event,
                                      ClObjectKind::queue,   ClObjectKind::context};

size_t at(ClObjectKind kind) { return static_cast<size_t>(kind); }

// Checks that from `before` to now exactly `created` objects of `kind` were
// created and `released` released, and nothing of any other kind.
void expect_delta(const ClObjectCounts& before, ClObjectKind kind, uint64_t created,
                  uint64_t released) {
  const ClObjectCounts now = cl_object_counts();
  for (ClObjectKind k : kAllKinds) {
    SCOPED_TRACE(cl_object_kind_name(k));
    EXPECT_EQ(now.created[at(k)] - before.created[at(k)], k == kind ? created : 0);
    EXPECT_EQ(now.released[at(k)] - before.released[at(k)], k == kind ? released : 0);
  }
}

const char* const kSource = R"CL(
__kernel void fill(__global int* out, int value) { out[get_global_id(0)] = value; }
)CL";

TEST(ClObjectCounts, BuffersAreCountedWhenCreatedAndReleased) {
  ClRuntime& rt = test::cl_test_runtime();
  const ClObjectCounts before = cl_object_counts();
  {
    std::vector<ClMem> buffers;
    buffers.push_back(rt.alloc(64));
    buffers.push_back(rt.alloc(128, true));
    const int data[4] = {1, 2, 3, 4};
    buffers.push_back(rt.upload(data, sizeof data));
    expect_delta(before, ClObjectKind::buffer, 3, 0);
    EXPECT_EQ(cl_object_counts().live(ClObjectKind::buffer) - before.live(ClObjectKind::buffer), 3);
    buffers[1].reset();
    expect_delta(before, ClObjectKind::buffer, 3, 1);
    buffers[1].reset();  // already empty: nothing more is released
    expect_delta(before, ClObjectKind::buffer, 3, 1);
  }
  expect_delta(before, ClObjectKind::buffer, 3, 3);
  EXPECT_EQ(cl_object_counts().live(ClObjectKind::buffer), before.live(ClObjectKind::buffer));
}

TEST(ClObjectCounts, MovingAHandleCountsNothingAndOverwritingReleases) {
  ClRuntime& rt = test::cl_test_runtime();
  const ClObjectCounts before = cl_object_counts();
  {
    ClMem a = rt.alloc(16);
    ClMem b(std::move(a));  // one object, two owners in turn
    ClMem c;
    c = std::move(b);
    expect_delta(before, ClObjectKind::buffer, 1, 0);
    c = rt.alloc(32);  // the first buffer is released here
    expect_delta(before, ClObjectKind::buffer, 2, 1);
  }
  expect_delta(before, ClObjectKind::buffer, 2, 2);
}

TEST(ClObjectCounts, NullHandleIsNotAnObject) {
  const ClObjectCounts before = cl_object_counts();
  { ClMem none(nullptr); }
  { ClEvent none; }
  for (ClObjectKind k : kAllKinds) expect_delta(before, k, 0, 0);
}

TEST(ClObjectCounts, ProgramsKernelsAndEvents) {
  ClRuntime& rt = test::cl_test_runtime();
  ClMem out = rt.alloc(4 * sizeof(cl_int), true);
  ClObjectCounts before = cl_object_counts();
  {
    ClProgram program = rt.build_program("cl_object_counts_test", kSource, "-cl-std=CL1.2");
    expect_delta(before, ClObjectKind::program, 1, 0);
    before = cl_object_counts();
    {
      ClKernel k1 = rt.create_kernel(program, "fill");
      ClKernel k2 = rt.create_kernel(program, "fill");
      expect_delta(before, ClObjectKind::kernel, 2, 0);
      set_args(k1, out, cl_int(7));
      before = cl_object_counts();
      {
        const size_t global = 4;
        cl_event raw = nullptr;
        cl_check(clEnqueueNDRangeKernel(rt.queue(), k1.get(), 1, nullptr, &global, nullptr, 0,
                                        nullptr, &raw),
                 "clEnqueueNDRangeKernel");
        ClEvent event(raw);
        cl_check(clWaitForEvents(1, &raw), "clWaitForEvents");
        expect_delta(before, ClObjectKind::event, 1, 0);
      }
      expect_delta(before, ClObjectKind::event, 1, 1);
      before = cl_object_counts();
    }
    expect_delta(before, ClObjectKind::kernel, 0, 2);
    before = cl_object_counts();
  }
  expect_delta(before, ClObjectKind::program, 0, 1);
}

TEST(ClObjectCounts, RuntimeOwnsOneContextAndOneQueue) {
  const DeviceInfo device = test::cl_test_runtime().device();
  ClObjectCounts before = cl_object_counts();
  {
    ClRuntime rt(device, false);
    const ClObjectCounts now = cl_object_counts();
    EXPECT_EQ(now.live(ClObjectKind::context) - before.live(ClObjectKind::context), 1);
    EXPECT_EQ(now.live(ClObjectKind::queue) - before.live(ClObjectKind::queue), 1);
    before = now;
  }
  const ClObjectCounts after = cl_object_counts();
  EXPECT_EQ(after.released[at(ClObjectKind::context)] - before.released[at(ClObjectKind::context)],
            1u);
  EXPECT_EQ(after.released[at(ClObjectKind::queue)] - before.released[at(ClObjectKind::queue)], 1u);
  EXPECT_EQ(after.total_live(), before.total_live() - 2);
}

TEST(ClObjectCounts, FormatNamesEveryKindWithItsLiveCount) {
  ClObjectCounts c;
  c.created = {5, 4, 3, 2, 1, 1};
  c.released = {1, 4, 0, 2, 0, 0};
  EXPECT_EQ(c.total_live(), 16 - 7);
  EXPECT_EQ(format_cl_object_counts(c),
            "live buffers 4 kernels 0 programs 3 events 0 queues 1 contexts 1 | created 16 "
            "released 7");
}

}  // namespace
}  // namespace clchat
