// One entry of clchat's compiled-kernel cache (~/.cache/clchat/kernels/*.bin):
// the driver's program binary behind a header that lets the entry check
// itself before the bytes reach clCreateProgramWithBinary. Drivers do not
// survive a damaged binary (PoCL asserts, NVIDIA segfaults), so anything
// that is not exactly what encode_kernel_cache_entry() wrote is rejected.
//
// Layout (little-endian), 40 bytes of header then the payload:
//   char[8] magic "CLCHATKC", u32 version (1), u32 header size (40),
//   u64 key (the cache key the file is named after), u64 payload length,
//   u64 checksum: FNV-1a 64 over the first 32 header bytes and the payload.
// Pure functions, no OpenCL: unit-tested and fuzzed (fuzz_kernel_cache).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace clchat {

constexpr size_t k_kernel_cache_header_bytes = 40;

// The entry for `payload` (a program binary) under cache key `key`.
std::string encode_kernel_cache_entry(uint64_t key, std::string_view payload);

// The payload of `entry` (a view into it), or why the entry is unusable
// ("bad magic", "length 10 does not match the 4096 bytes after the header",
// "checksum mismatch", ...) when it is not a whole, intact entry for `key`.
struct KernelCacheReject {
  std::string reason;
};
std::variant<std::string_view, KernelCacheReject> decode_kernel_cache_entry(uint64_t key,
                                                                            std::string_view entry);

// FNV-1a, 64 bits, continuing from `h`: the cache key and the entry checksum
// (damage detection, not a security boundary).
uint64_t fnv1a64(std::string_view s, uint64_t h = 1469598103934665603ull);

}  // namespace clchat
