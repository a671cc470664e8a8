// Conversion between float32 and the GGML storage types. fp16 and bf16 round
// bit for bit as GGML does; every type has a quantizer (quant.cpp says whose
// method each follows) and a dequantizer (dequantize.cpp, GGML's formulas).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace clchat {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even, like GGML's
uint16_t fp32_to_bf16(float f);  // round to nearest even; NaN stays (quiet) NaN

// Dequantizes `n` values (a multiple of the type's block size) from `src`.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, uint64_t n);
// Quantizes `n` values into `dst`, which must hold ggml_row_bytes(type, n);
// throws std::invalid_argument when n is not a whole number of blocks. Inputs
// must be finite and within fp16 range once divided by the code range (the
// block scales are fp16).
void quantize_row(GgmlType type, const float* src, uint8_t* dst, uint64_t n);

// Convenience for tests and the synthesizer: a rows x n matrix.
std::vector<uint8_t> quantize_matrix(GgmlType type, std::span<const float> values, uint64_t n);
std::vector<float> dequantize_matrix(GgmlType type, std::span<const uint8_t> bytes, uint64_t n,
                                     uint64_t rows);

}  // namespace clchat
