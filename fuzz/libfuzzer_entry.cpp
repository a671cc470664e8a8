// libFuzzer's entry point for one target: CLCHAT_FUZZ_TARGET names the
// function in fuzz_targets.h (set per executable by fuzz/CMakeLists.txt).
#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return clchat::fuzz::CLCHAT_FUZZ_TARGET(data, size);
}
