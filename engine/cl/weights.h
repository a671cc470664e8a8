// Weights on the device. Matrices are uploaded once, read-only, in their GGUF
// storage type; quantized blocks are split into two arrays (16-byte-aligned
// quant payloads and fp16 scales) so kernels can use aligned vector loads:
//   Q4_0: q = 16 nibble bytes per block, s = fp16 d
//   Q4_1: q = 16 nibble bytes per block, s = fp16 (d, m) pairs
//   Q8_0: q = 32 int8 per block,         s = fp16 d
//   F32, F16: q = the row-major values,  s = unused (1 element)
// The same layout (rows x blocks, row-major) holds for q and s, so row-wise
// concatenation of matrices is concatenation of both arrays.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cl/runtime.h"
#include "engine/gguf/gguf.h"

namespace clchat {

struct RepackedMatrix {
  GgmlType type = GgmlType::F32;
  int n_in = 0;  // values per row
  int rows = 0;
  std::vector<uint8_t> q;  // payloads (or plain values for F32/F16)
  std::vector<uint8_t> s;  // scales (empty for F32/F16)
};

// GGUF row-major blocks -> the device layout above. `data` holds rows rows of
// ggml_row_bytes(type, n_in) bytes.
RepackedMatrix repack_matrix(GgmlType type, const uint8_t* data, int n_in, int rows);
RepackedMatrix repack_tensor(const GgufTensor& t);
// Stacks matrices of equal type and n_in row-wise (e.g. [Wq; Wk; Wv]).
RepackedMatrix stack_rows(const std::vector<RepackedMatrix>& parts);

struct DeviceMatrix {
  GgmlType type = GgmlType::F32;
  int n_in = 0;
  int rows = 0;
  ClMem q;
  ClMem s;
  uint64_t n_bytes = 0;
};

DeviceMatrix upload_matrix(const ClRuntime& rt, const RepackedMatrix& m);
DeviceMatrix upload_floats(const ClRuntime& rt, const float* data, int n);  // 1-row F32

}  // namespace clchat
