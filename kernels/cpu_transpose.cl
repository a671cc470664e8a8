// 8 x 8 float transposes for the CPU kernels that turn rows into columns
// (kernels/attention_prefill.cl's key tiles, matmul_x16.cl's token groups),
// built before them. No kernels here.
//
// With clang's __builtin_shufflevector (PoCL) the transpose stays in
// registers: rows interleaved in pairs, then pairs of pairs, then the 128-bit
// halves exchanged (24 unpack and shuffle instructions on AVX2). Without it,
// or with -DTRANSPOSE_PORTABLE=1 (the tests), vector literals of the rows'
// components give the same result.

#ifndef TRANSPOSE_PORTABLE
#define TRANSPOSE_PORTABLE 0
#endif
#if defined(__has_builtin) && !TRANSPOSE_PORTABLE
#if __has_builtin(__builtin_shufflevector)
#define TRANSPOSE_SHUFFLES 1
#endif
#endif

// c[e].sj = r[j].se for e, j < 8.
inline void transpose8x8(const float8* r, float8* c) {
#ifdef TRANSPOSE_SHUFFLES
  float8 t[8], u[8];
  __attribute__((opencl_unroll_hint)) for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  __attribute__((opencl_unroll_hint)) for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  // u[e] (e < 4): columns e and e + 4 of rows 0..3; u[4 + e]: of rows 4..7
  __attribute__((opencl_unroll_hint)) for (int e = 0; e < 4; ++e) {
    c[e] = __builtin_shufflevector(u[e], u[4 + e], 0, 1, 2, 3, 8, 9, 10, 11);
    c[e + 4] = __builtin_shufflevector(u[e], u[4 + e], 4, 5, 6, 7, 12, 13, 14, 15);
  }
#else
#define TRANSPOSE_COLUMN(e) \
  (float8)(r[0].s##e, r[1].s##e, r[2].s##e, r[3].s##e, r[4].s##e, r[5].s##e, r[6].s##e, r[7].s##e)
  c[0] = TRANSPOSE_COLUMN(0);
  c[1] = TRANSPOSE_COLUMN(1);
  c[2] = TRANSPOSE_COLUMN(2);
  c[3] = TRANSPOSE_COLUMN(3);
  c[4] = TRANSPOSE_COLUMN(4);
  c[5] = TRANSPOSE_COLUMN(5);
  c[6] = TRANSPOSE_COLUMN(6);
  c[7] = TRANSPOSE_COLUMN(7);
#undef TRANSPOSE_COLUMN
#endif
}
