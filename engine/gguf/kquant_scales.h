// The packed 6-bit sub-block scales of K-quant super-blocks, unpacked: what
// the dequantizers (dequantize.cpp) and the device repack
// (engine/cl/block_layout.cpp) both read.
#pragma once

#include <cstdint>

namespace clchat {

// Q4_K and Q5_K: the 6-bit scale and min of group g (8 groups of 32). g < 4:
// the low 6 bits of bytes g and g + 4; g >= 4: a nibble of byte g + 4 (low:
// scale, high: min) with the top 2 bits of bytes g - 4 and g as bits 4, 5.
inline void k4_scale_min(const uint8_t* s, int g, int* scale, int* min) {
  if (g < 4) {
    *scale = s[g] & 63;
    *min = s[g + 4] & 63;
  } else {
    *scale = (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
    *min = (s[g + 4] >> 4) | (s[g] >> 6) << 4;
  }
}

// Q3_K: the scale of group g (16 groups of 16), offset 32 removed. Its low 4
// bits are nibbles of scales[0..7] (g < 8: low halves of bytes g, else high
// halves of g - 8), its top 2 bits a bit pair of scales[8 + g % 4] (pair g / 4).
inline int q3_k_scale(const uint8_t* s, int g) {
  const int low = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
  const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | high << 4) - 32;
}

}  // namespace clchat
