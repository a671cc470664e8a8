// Encoding and checking of kernel cache entries (see kernel_cache_entry.h).
#include "engine/cl/kernel_cache_entry.h"

#include <cstring>

namespace clchat {

namespace {

constexpr char k_magic[8] = {'C', 'L', 'C', 'H', 'A', 'T', 'K', 'C'};
constexpr uint32_t k_version = 1;
constexpr size_t k_checked_header_bytes = 32;  // everything before the checksum

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <typename T>
T get(std::string_view s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

uint64_t checksum(std::string_view header, std::string_view payload) {
  return fnv1a64(payload, fnv1a64(header.substr(0, k_checked_header_bytes)));
}

}  // namespace

uint64_t fnv1a64(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string encode_kernel_cache_entry(uint64_t key, std::string_view payload) {
  std::string out;
  out.reserve(k_kernel_cache_header_bytes + payload.size());
  out.append(k_magic, sizeof(k_magic));
  put<uint32_t>(out, k_version);
  put<uint32_t>(out, uint32_t(k_kernel_cache_header_bytes));
  put<uint64_t>(out, key);
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, checksum(out, payload));
  out.append(payload);
  return out;
}

std::variant<std::string_view, KernelCacheReject> decode_kernel_cache_entry(
    uint64_t key, std::string_view entry) {
  if (entry.size() < k_kernel_cache_header_bytes) {
    return KernelCacheReject{"only " + std::to_string(entry.size()) + " bytes, shorter than the " +
                             std::to_string(k_kernel_cache_header_bytes) + "-byte header"};
  }
  if (std::memcmp(entry.data(), k_magic, sizeof(k_magic)) != 0)
    return KernelCacheReject{"bad magic"};
  if (const auto v = get<uint32_t>(entry, 8); v != k_version) {
    return KernelCacheReject{"version " + std::to_string(v) + ", expected " +
                             std::to_string(k_version)};
  }
  if (get<uint32_t>(entry, 12) != k_kernel_cache_header_bytes) {
    return KernelCacheReject{"bad header size"};
  }
  if (get<uint64_t>(entry, 16) != key) return KernelCacheReject{"written for another cache key"};
  const std::string_view payload = entry.substr(k_kernel_cache_header_bytes);
  if (const auto n = get<uint64_t>(entry, 24); n != payload.size() || n == 0) {
    return KernelCacheReject{"length " + std::to_string(n) + " does not match the " +
                             std::to_string(payload.size()) + " bytes after the header"};
  }
  if (get<uint64_t>(entry, 32) != checksum(entry, payload)) {
    return KernelCacheReject{"checksum mismatch"};
  }
  return payload;
}

}  // namespace clchat
