// Reading quantized weights in the device block layout of
// engine/cl/block_layout.h: every row is cut into blocks of 32 values, each
// with a payload in q (QB(type) bytes) and a record in s (SB(type) bytes).
// Built before the kernels that use it (programs "quant_blocks+..."); no
// kernels here.
//
// block_values8(type, q, s, blk, p) gives values 8p .. 8p + 7 (p < 4) of
// block `blk` (a row's blocks are row * n_in / 32 + b). `type` is a GGML
// type id and a literal at every call, so each use compiles to its type's
// code alone. The kernels keep their own tuned loops for Q4_0, Q4_1 and Q8_0
// and read the other types through this function.

#define QT_F32 0
#define QT_F16 1
#define QT_Q4_0 2
#define QT_Q4_1 3
#define QT_Q5_0 6
#define QT_Q5_1 7
#define QT_Q8_0 8
#define QT_Q2_K 10
#define QT_Q3_K 11
#define QT_Q4_K 12
#define QT_Q5_K 13
#define QT_Q6_K 14
#define QT_IQ4_NL 20
#define QT_IQ4_XS 23
#define QT_BF16 30

// Payload and record bytes per block of 32 (block_layout.cpp's device_q_bytes
// and device_s_bytes; tests/cl/test_cl_block_layout.cpp checks they agree).
#define QT_QB(t) ((t) == QT_Q8_0 ? 32 : (t) == QT_Q2_K || (t) == QT_Q3_K ? 8 : 16)
#define QT_SB(t)                                                                      \
  ((t) == QT_Q4_0 || (t) == QT_Q8_0 || (t) == QT_IQ4_NL   ? 2                         \
   : (t) == QT_Q4_1 || (t) == QT_IQ4_XS                   ? 4                         \
   : (t) == QT_Q5_K || (t) == QT_Q6_K                     ? 16                        \
                                                          : 8)
// The types read only through block_values8 (not F32/F16/BF16, not the
// three with tuned loops).
#define QT_GENERIC(t)                                                                   \
  ((t) == QT_Q5_0 || (t) == QT_Q5_1 || (t) == QT_Q2_K || (t) == QT_Q3_K ||              \
   (t) == QT_Q4_K || (t) == QT_Q5_K || (t) == QT_Q6_K || (t) == QT_IQ4_NL ||            \
   (t) == QT_IQ4_XS)

// IQ4_NL's and IQ4_XS's code values.
__constant float qt_iq4_values[16] = {-127.0f, -104.0f, -83.0f, -65.0f, -49.0f, -35.0f,
                                      -22.0f,  -10.0f,  1.0f,   13.0f,  25.0f,  38.0f,
                                      53.0f,   69.0f,   89.0f,  113.0f};

inline float qt_half(const __global uchar* p) { return vload_half(0, (const __global half*)p); }
// Records are 4-byte aligned where they hold a uint or float.
inline uint qt_u32(const __global uchar* p) { return *(const __global uint*)p; }
inline float qt_f32(const __global uchar* p) { return as_float(qt_u32(p)); }

// Bits 0..7 of `bits` as 0/1 in eight lanes.
inline int8 qt_bits8(uint bits) {
  return ((int8)(int)bits >> (int8)(0, 1, 2, 3, 4, 5, 6, 7)) & 1;
}

// The 4-bit codes of values 8p .. 8p + 7 from 16 nibble bytes.
inline int8 qt_nibbles8(const __global uchar* q, int p) {
  const int8 b = convert_int8(vload8(0, q + 8 * (p & 1)));
  return p < 2 ? b & 15 : b >> 4;
}
// The 2-bit codes of values 8p .. 8p + 7 from 8 bytes of 2-bit codes.
inline int8 qt_crumbs8(const __global uchar* q, int p) {
  return (convert_int8(vload8(0, q)) >> (2 * p)) & 3;
}
inline float8 qt_iq4_8(int8 c) {
  return (float8)(qt_iq4_values[c.s0], qt_iq4_values[c.s1], qt_iq4_values[c.s2],
                  qt_iq4_values[c.s3], qt_iq4_values[c.s4], qt_iq4_values[c.s5],
                  qt_iq4_values[c.s6], qt_iq4_values[c.s7]);
}

inline float8 block_values8(const int type, const __global uchar* q, const __global uchar* s,
                            size_t blk, int p) {
  const __global uchar* bq = q + blk * QT_QB(type);
  const __global uchar* bs = s + blk * QT_SB(type);
  switch (type) {
    case QT_Q4_0:
      return qt_half(bs) * convert_float8(qt_nibbles8(bq, p) - 8);
    case QT_Q4_1:
      return qt_half(bs) * convert_float8(qt_nibbles8(bq, p)) + qt_half(bs + 2);
    case QT_Q5_0:
    case QT_Q5_1: {
      const int8 c = qt_nibbles8(bq, p) | qt_bits8(qt_u32(bs + 4) >> (8 * p)) << 4;
      return type == QT_Q5_0 ? qt_half(bs) * convert_float8(c - 16)
                             : qt_half(bs) * convert_float8(c) + qt_half(bs + 2);
    }
    case QT_Q8_0:
      return qt_half(bs) * convert_float8(vload8(p, (const __global char*)bq));
    case QT_IQ4_NL:
      return qt_half(bs) * qt_iq4_8(qt_nibbles8(bq, p));
    case QT_IQ4_XS:
      return qt_f32(bs) * qt_iq4_8(qt_nibbles8(bq, p));
    case QT_Q4_K:
      return qt_f32(bs) * convert_float8(qt_nibbles8(bq, p)) - qt_f32(bs + 4);
    case QT_Q5_K: {
      const int8 c = qt_nibbles8(bq, p) | qt_bits8(qt_u32(bs + 8) >> (8 * p)) << 4;
      return qt_f32(bs) * convert_float8(c) - qt_f32(bs + 4);
    }
    case QT_Q6_K: {
      // Top two bits of values 16 (p / 2) + 8 (p % 2) + i at bits 2i of `top`.
      const uint top = qt_u32(bs + 8 + 4 * (p / 2)) >> (16 * (p & 1));
      const int8 hi = ((int8)(int)top >> (int8)(0, 2, 4, 6, 8, 10, 12, 14)) & 3;
      const int8 c = qt_nibbles8(bq, p) | hi << 4;
      return qt_f32(bs + 4 * (p / 2)) * convert_float8(c - 32);
    }
    case QT_Q3_K: {
      const int8 c = qt_crumbs8(bq, p) | qt_bits8(qt_u32(bs + 4) >> (8 * p)) << 2;
      const float sc = (float)(((const __global char*)bs)[2 + p / 2]);
      return (qt_half(bs) * sc) * convert_float8(c - 4);
    }
    case QT_Q2_K: {
      const uint sm = bs[4 + p / 2];
      return (qt_half(bs) * (float)(sm & 15)) * convert_float8(qt_crumbs8(bq, p)) -
             qt_half(bs + 2) * (float)(sm >> 4);
    }
    default:
      return (float8)(0.0f);
  }
}

// Value i of a row-major F32, F16 or BF16 matrix's payload.
inline float plain_value(const int type, const __global uchar* q, size_t i) {
  if (type == QT_F32) return ((const __global float*)q)[i];
  if (type == QT_F16) return vload_half(i, (const __global half*)q);
  return as_float((uint)((const __global ushort*)q)[i] << 16);
}
