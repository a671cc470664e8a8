// Shared pieces of the fuzz targets (see fuzz_targets.h).
#include <cstdlib>

#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {

std::string shared_dir() {
  const char* env = std::getenv("CLCHAT_SHARED_DIR");
  return env && *env ? env : CLCHAT_SHARED_DIR_DEFAULT;
}

}  // namespace clchat::fuzz
