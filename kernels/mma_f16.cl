// fp16 tensor-core helpers shared by the NVIDIA-only kernels
// (matmul_mma_deq.cl, attention_mma.cl), concatenated before them: inline
// PTX, which NVIDIA's OpenCL C accepts without cl_khr_fp16 because fp16
// values travel as packed uint bits.

// c += A * B (16x8x16, fp16 in, fp32 accumulate).
inline void mma16816(float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  float d0, d1, d2, d3;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
  c[0] = d0;
  c[1] = d1;
  c[2] = d2;
  c[3] = d3;
}

// The fp16 pair {lo, hi} (lo in the low half), each rounded to nearest.
inline uint pack_half2(float lo, float hi) {
  uint d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
