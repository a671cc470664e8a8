// Kernel cache target: the bytes as a cache entry file. decode must accept
// exactly the entries encode writes (an accepted entry re-encodes to the same
// bytes) and reject everything else with a reason, never read past the end;
// the bytes as a payload must survive encode then decode.
#include <string>
#include <variant>

#include "engine/cl/kernel_cache_entry.h"
#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {

int fuzz_kernel_cache(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto decoded = decode_kernel_cache_entry(k_fuzz_kernel_cache_key, bytes);
  if (const auto* payload = std::get_if<std::string_view>(&decoded)) {
    require(!payload->empty(), "accepted an empty payload");
    require(encode_kernel_cache_entry(k_fuzz_kernel_cache_key, *payload) == bytes,
            "accepted an entry that encode would not write");
  } else {
    require(!std::get<KernelCacheReject>(decoded).reason.empty(), "rejected without a reason");
  }
  if (!bytes.empty()) {
    const std::string entry = encode_kernel_cache_entry(k_fuzz_kernel_cache_key, bytes);
    const auto back = decode_kernel_cache_entry(k_fuzz_kernel_cache_key, entry);
    require(
        std::holds_alternative<std::string_view>(back) && std::get<std::string_view>(back) == bytes,
        "an encoded entry does not decode to its payload");
    require(std::holds_alternative<KernelCacheReject>(
                decode_kernel_cache_entry(k_fuzz_kernel_cache_key + 1, entry)),
            "accepted an entry written for another key");
  }
  return 0;
}

}  // namespace clchat::fuzz
