// A model file that shrinks while clchat reads it (issue 21: `truncate -s
// 1000000` 0.05-0.12 s after start ended clchat with SIGBUS, exit 135). The
// race is made deterministic here: the file is opened and mapped, then cut
// short, then the load reads it. Before the guard (engine/gguf/mapped_copy.h)
// each of these tests died of SIGBUS; now each read is one GgufError naming
// the path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/cpu/forward.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/mapped_copy.h"
#include "engine/model/model.h"
#include "tests/gguf_fixtures.h"

namespace clchat {
namespace {

// A tiny llama big enough that its tensor data spans many pages.
std::string write_model(const test::TempDir& dir) {
  test::TinyModelSpec spec;
  spec.n_embd = 256;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 512;
  spec.n_vocab = 280;
  spec.weight_type = GgmlType::F32;
  return test::make_tiny_model(spec).write(dir.file("model.gguf"));
}

void expect_changed_error(const std::function<void()>& load, const std::string& path) {
  try {
    load();
    ADD_FAILURE() << "no error";
  } catch (const GgufError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": the model file changed while loading", 0), 0u) << msg;
  }
}

TEST(GgufShrunk, TensorBytesOfATruncatedFileIsAnError) {
  const test::TempDir dir;
  const std::string path = write_model(dir);
  const auto file = GgufFile::open(path);
  std::filesystem::resize_file(path, 4096);
  const GgufTensor* last = &file->tensors().back();
  for (const GgufTensor& t : file->tensors()) {
    if (t.data > last->data) last = &t;
  }
  expect_changed_error([&] { file->tensor_bytes(*last); }, path);
  // The guard is re-armed for every copy: a second fault is caught too.
  expect_changed_error([&] { file->tensor_bytes(*last); }, path);
}

TEST(GgufShrunk, TheCpuLoaderReportsATruncatedFile) {
  const test::TempDir dir;
  const std::string path = write_model(dir);
  const Model model = load_model(path);
  std::filesystem::resize_file(path, 4096);
  expect_changed_error([&] { CpuForward fwd(model, 16); }, path);
}

// The metadata reader copies through the same guard: a mapping cut short
// under a copy reports failure instead of faulting.
TEST(GgufShrunk, CopyFromMappingReportsAFault) {
  const test::TempDir dir;
  const std::string path = dir.file("blob");
  std::ofstream(path).close();
  std::filesystem::resize_file(path, 1 << 20);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = mmap(nullptr, 1 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  std::vector<uint8_t> out(1 << 20);
  install_sigbus_guard();
  EXPECT_TRUE(copy_from_mapping(out.data(), map, out.size()));
  std::filesystem::resize_file(path, 100);
  EXPECT_TRUE(copy_from_mapping(out.data(), map, 100));  // before the new end: fine
  EXPECT_FALSE(copy_from_mapping(out.data(), static_cast<uint8_t*>(map) + 8192, 4096));
  EXPECT_FALSE(copy_from_mapping(out.data(), map, out.size()));
  munmap(map, 1 << 20);
}

// Another SIGBUS handler installed after the guard (the chat screen installs
// one to restore the terminal) does not switch the guard off: the loader
// reinstalls it, chaining to that handler.
TEST(GgufShrunk, TheGuardSurvivesAnotherHandler) {
  const test::TempDir dir;
  const std::string path = write_model(dir);
  const auto file = GgufFile::open(path);
  struct sigaction other {
  }, saved{};
  other.sa_handler = [](int) { std::_Exit(99); };
  sigemptyset(&other.sa_mask);
  sigaction(SIGBUS, &other, &saved);
  std::filesystem::resize_file(path, 4096);
  expect_changed_error([&] { file->tensor_bytes(file->tensors().back()); }, path);
  sigaction(SIGBUS, &saved, nullptr);
}

}  // namespace
}  // namespace clchat
