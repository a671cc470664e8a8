// GGUF target: the bytes are a whole model file. It is loaded the way clchat
// loads models (GgufFile::open on a path: open, fstat, mmap, parse), through a
// memfd so no disk file is written per input, then every reader API is
// exercised on whatever the parser accepted.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>

#include "engine/chat/template.h"
#include "engine/cpu/forward.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_targets.h"

namespace clchat::fuzz {
namespace {

// A path whose contents are `data`: one memfd, rewritten per input.
std::string memfd_path(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("clchat-fuzz.gguf", MFD_CLOEXEC);
  require(fd >= 0, "memfd_create failed");
  require(ftruncate(fd, 0) == 0, "ftruncate failed");
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
    require(n > 0, "pwrite failed");
    done += size_t(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

// Every typed getter on every key: each must return or throw GgufError.
void touch_metadata(const GgufFile& file) {
  for (const auto& entry : file.metadata()) {
    const std::string& key = entry.first;  // (clang 14 lambdas cannot capture bindings)
    require(file.find(key) == &entry.second, "find() misses key");
    const auto attempt = [](auto&& get) {
      try {
        get();
      } catch (const GgufError&) {
      }
    };
    attempt([&] { file.get_uint(key); });
    attempt([&] { file.opt_uint(key); });
    attempt([&] { file.get_int(key); });
    attempt([&] { file.get_float(key); });
    attempt([&] { file.opt_float(key); });
    attempt([&] { file.get_bool(key); });
    attempt([&] { file.opt_bool(key); });
    attempt([&] { file.get_string(key); });
    attempt([&] { file.opt_string(key); });
    attempt([&] { file.get_array(key); });
    attempt([&] { file.get_string_array(key); });
    attempt([&] { file.get_float_array(key); });
    attempt([&] { file.get_int_array(key); });
  }
}

// Reads each tensor's first and last byte: a pointer or size outside the
// mapping faults here.
void touch_tensors(const GgufFile& file) {
  volatile uint8_t sink = 0;
  for (const GgufTensor& t : file.tensors()) {
    require(file.find_tensor(t.name) == &t, "find_tensor() misses '" + t.name + "'");
    const auto row_bytes = ggml_row_bytes(t.type, t.ne(0));
    require(row_bytes && *row_bytes * t.n_rows() == t.n_bytes, "tensor size of '" + t.name + "'");
    require(t.offset + t.n_bytes <= file.file_size(), "tensor past the end");
    if (t.n_bytes == 0) continue;
    sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
}

void use_tokenizer(const GgufFile& file) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_gguf(file);
  } catch (const GgufError&) {
    return;
  }
  const int32_t n_vocab = tok->n_vocab();
  require(n_vocab > 0, "empty vocabulary accepted");
  for (bool special : {false, true}) {
    const auto ids = tok->encode("Hello world! <|im_start|>\xff\xfe caf\xc3\xa9", true, special);
    for (int32_t id : ids) require(id >= 0 && id < n_vocab, "encode() id out of range");
    tok->decode(ids);
  }
  for (int32_t id = -1; id < std::min(n_vocab, 2048) + 1; ++id) {
    tok->token_to_bytes(id);
    tok->is_eog(id);
    tok->is_control(id);
  }
}

// One token through the reference forward pass when the model is small
// enough to do it quickly; the logits may be anything (weights are fuzzed)
// but the pass must stay in bounds.
void run_small_model(std::unique_ptr<GgufFile> file, const ModelConfig& config) {
  uint64_t n_elements = 0;
  for (const GgufTensor& t : file->tensors()) n_elements += t.n_elements;
  if (n_elements > (uint64_t{1} << 21)) return;
  Model model;
  model.config = config;
  model.tensors = find_model_tensors(*file, config);
  // CpuForward copies the tensors' bytes through model.file.
  model.file = std::move(file);
  CpuForward cpu(model, 2);
  const auto& logits = cpu.forward(0, 0);
  require(logits.size() == size_t(config.n_vocab), "logits size");
  cpu.forward(config.n_vocab - 1, 1);
}

}  // namespace

int fuzz_gguf(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file;
  try {
    file = GgufFile::open(memfd_path(data, size));
  } catch (const GgufError&) {
    return 0;
  }
  touch_metadata(*file);
  touch_tensors(*file);
  use_tokenizer(*file);
  try {
    std::string note;
    ChatTemplate::from_gguf(*file, "", &note);
  } catch (const GgufError&) {
  }
  try {
    const ModelConfig config = read_model_config(*file);
    find_model_tensors(*file, config);
    run_small_model(std::move(file), config);
  } catch (const GgufError&) {
  }
  return 0;
}

}  // namespace clchat::fuzz
