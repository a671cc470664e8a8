// Text inputs of `tokenize -f` and `perplexity -f`: regular files only (a
// directory used to read as an empty text, a FIFO blocked, /dev/zero never
// ended) and at most k_max_text_bytes.
#include "app/commands.h"
#include "common/input_file.h"

namespace clchat::app {

std::string read_text_file(const std::string& path) {
  try {
    return read_regular_file(path, k_max_text_bytes, "text file");
  } catch (const InputFileError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace clchat::app
