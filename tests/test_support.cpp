#include "tests/test_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/gguf/quant.h"

namespace clchat::test {

std::string shared_dir() {
  const char* env = std::getenv("CLCHAT_SHARED_DIR");
  return env && *env ? env : CLCHAT_SHARED_DIR_DEFAULT;
}

std::string shared_file(const std::string& relative) {
  std::string path = shared_dir() + "/" + relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing shared file " << path
                  << " (set CLCHAT_SHARED_DIR to the folder holding models/ and reference/)";
  }
  return path;
}

std::string gemma3_model() {
  const char* models_env = std::getenv("CLCHAT_MODELS_DIR");
  for (const std::string& dir :
       {std::string(models_env ? models_env : ""), shared_dir() + "/models",
        std::string(CLCHAT_SOURCE_DIR) + "/assets/models"}) {
    if (dir.empty()) continue;
    const std::string path = dir + "/gemma-3-270m-q4_k_m.gguf";
    if (std::filesystem::is_regular_file(path)) return path;
  }
  return "";
}

std::string clchat_binary() { return CLCHAT_BINARY; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint8_t> random_blocks(GgmlType type, uint64_t n_in, uint64_t rows, uint32_t seed) {
  const auto row_bytes = ggml_row_bytes(type, n_in);
  if (!row_bytes || !ggml_is_quantized(type)) throw std::invalid_argument("random_blocks: type");
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(*row_bytes * rows);
  for (auto& v : b) v = uint8_t(rng());
  std::uniform_real_distribution<float> unit(0.5f, 1.0f);
  auto put = [&](uint8_t* at, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(at, &h, 2);
  };
  // Offsets of the fp16 fields in each block (ggml_types.h): the scale d,
  // and a min (Q4_1, Q5_1) or dmin (K-quants) or none (-1); `range` is the
  // largest |value| that d multiplies (sub-scale times code), so that the
  // values stay within about [-1, 1].
  int d_at = 0, m_at = -1;
  float range = 1.0f;
  switch (type) {
    case GgmlType::Q4_0:
      range = 8;
      break;
    case GgmlType::Q4_1:
      range = 15, m_at = 2;
      break;
    case GgmlType::Q5_0:
      range = 16;
      break;
    case GgmlType::Q5_1:
      range = 31, m_at = 2;
      break;
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
      range = 127;
      break;
    case GgmlType::Q2_K:
      range = 15 * 3, d_at = 80, m_at = 82;
      break;
    case GgmlType::Q3_K:
      range = 32 * 4, d_at = 108;
      break;
    case GgmlType::Q4_K:
      range = 63 * 15, m_at = 2;
      break;
    case GgmlType::Q5_K:
      range = 63 * 31, m_at = 2;
      break;
    case GgmlType::Q6_K:
      range = 128 * 32, d_at = 208;
      break;
    case GgmlType::IQ4_XS:
      range = 32 * 127;
      break;
    default:
      break;
  }
  const bool k_quant = ggml_block_size(type) == 256;
  const size_t bytes = size_t(ggml_block_bytes(type));
  for (size_t at = 0; at < b.size(); at += bytes) {
    put(&b[at + d_at], (rng() & 1 ? 1.0f : -1.0f) * unit(rng) / range);
    // Q4_1/Q5_1: the min, added; K-quants: dmin, times a 4- or 6-bit min, subtracted.
    if (m_at >= 0) put(&b[at + m_at], k_quant ? unit(rng) / 63.0f : -unit(rng));
  }
  return b;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (a.size() != b.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  char out_path[] = "/tmp/clchat-test-out-XXXXXX";
  char err_path[] = "/tmp/clchat-test-err-XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  close(out_fd);
  close(err_fd);
  std::string full = command + " >" + out_path + " 2>" + err_path + " </dev/null";
  int status = std::system(full.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  std::remove(out_path);
  std::remove(err_path);
  return result;
}

}  // namespace clchat::test
