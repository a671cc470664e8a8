// The compiled-kernel cache: entries check themselves (kernel_cache_entry.h)
// and a damaged entry on disk is deleted and rebuilt instead of reaching the
// driver, which crashed on every damage issue 21 tried (PoCL asserts in
// pocl_binary.c, NVIDIA segfaults in clCreateProgramWithBinary).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/cl/kernel_cache.h"
#include "engine/cl/kernel_cache_entry.h"
#include "engine/cl/runtime.h"
#include "tests/gguf_fixtures.h"

namespace clchat {
namespace {

constexpr uint64_t k_key = 0x0123456789abcdefull;

bool accepted(uint64_t key, std::string_view entry) {
  return std::holds_alternative<std::string_view>(decode_kernel_cache_entry(key, entry));
}

std::string reason(uint64_t key, std::string_view entry) {
  const auto d = decode_kernel_cache_entry(key, entry);
  return std::holds_alternative<KernelCacheReject>(d) ? std::get<KernelCacheReject>(d).reason : "";
}

// Each damage of issue 21, applied to an entry's bytes.
struct Damage {
  const char* name;
  std::function<void(std::string&)> apply;
};
const std::vector<Damage>& damages() {
  static const std::vector<Damage> all = {
      {"truncated to half", [](std::string& e) { e.resize(e.size() / 2); }},
      {"8 bytes 0xFF at offset 16", [](std::string& e) { e.replace(16, 8, 8, '\xff'); }},
      {"wrong length", [](std::string& e) { e[24] = char(e[24] + 1); }},
      {"empty", [](std::string& e) { e.clear(); }},
      {"one payload bit", [](std::string& e) { e.back() = char(e.back() ^ 1); }},
      {"appended byte", [](std::string& e) { e.push_back('x'); }},
  };
  return all;
}

TEST(KernelCacheEntry, RoundTrips) {
  const std::string payload = "binary\0with\0zeros" + std::string(1000, '\x7f');
  const std::string entry = encode_kernel_cache_entry(k_key, payload);
  EXPECT_EQ(entry.size(), k_kernel_cache_header_bytes + payload.size());
  const auto decoded = decode_kernel_cache_entry(k_key, entry);
  ASSERT_TRUE(std::holds_alternative<std::string_view>(decoded)) << reason(k_key, entry);
  EXPECT_EQ(std::get<std::string_view>(decoded), payload);
}

TEST(KernelCacheEntry, RejectsEveryDamage) {
  const std::string good = encode_kernel_cache_entry(k_key, std::string(4096, 'b'));
  for (const Damage& d : damages()) {
    std::string e = good;
    d.apply(e);
    EXPECT_FALSE(accepted(k_key, e)) << d.name;
    EXPECT_FALSE(reason(k_key, e).empty()) << d.name;
  }
  EXPECT_EQ(reason(k_key + 1, good), "written for another cache key");
  EXPECT_EQ(reason(k_key, std::string(4096, 'b')), "bad magic");  // a binary of the old format
  EXPECT_FALSE(accepted(k_key, encode_kernel_cache_entry(k_key, "")));
}

std::vector<std::filesystem::path> cache_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  return files;
}

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The real path on PoCL: build a program into an empty cache folder, damage
// its entry, build again. The damaged entry must not reach the driver (the
// process would die here); it is replaced by a fresh, valid entry and the
// program works.
TEST(KernelCache, DamagedEntryIsDeletedAndRebuilt) {
  const test::TempDir dir;
  const ClRuntime rt(select_device("cpu"), false, dir.path());
  const std::string source = "__kernel void twice(__global float* x) { x[0] *= 2.0f; }\n";
  (void)rt.build_program("twice", source, "");
  const auto files = cache_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  const std::filesystem::path entry = files[0];
  const std::string good = file_bytes(entry);
  const uint64_t key = *reinterpret_cast<const uint64_t*>(good.data() + 16);
  ASSERT_TRUE(accepted(key, good));
  for (const Damage& d : damages()) {
    SCOPED_TRACE(d.name);
    std::string damaged = good;
    d.apply(damaged);
    std::ofstream(entry, std::ios::binary).write(damaged.data(), std::streamsize(damaged.size()));
    const ClProgram p = rt.build_program("twice", source, "");
    EXPECT_NE(rt.create_kernel(p, "twice").get(), nullptr);
    ASSERT_EQ(cache_files(dir.path()).size(), 1u);  // no temporary file left behind
    EXPECT_TRUE(accepted(key, file_bytes(entry)));
  }
  // A valid entry is read back as is.
  EXPECT_TRUE(read_kernel_cache(entry, key).has_value());
  EXPECT_FALSE(read_kernel_cache(entry, key + 1).has_value());
  EXPECT_FALSE(std::filesystem::exists(entry));  // the foreign entry was deleted
}

}  // namespace
}  // namespace clchat
