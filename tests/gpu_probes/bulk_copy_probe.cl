inline uint smem_addr(__local const void* p) {
  uint a;
  asm("{\n\t.reg .pred s;\n\t.reg .u64 g;\n\t"
      "isspacep.shared s, %1;\n\t"
      "@s cvta.to.shared.u64 g, %1;\n\t"
      "@!s mov.u64 g, %1;\n\t"
      "cvt.u32.u64 %0, g;\n\t}"
      : "=r"(a)
      : "l"((ulong)(size_t)p));
  return a;
}
// One work-group of 256: 4 KB from src (its block) into local memory by one
// bulk copy completing on an mbarrier, then stored to dst. ROUNDS copies in turn (parity flips).
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void bulk_probe(const __global uint4* src, __global uint4* dst, int rounds) {
  __local uint4 buf[256];
  __local ulong bar[1];
  const uint sbuf = smem_addr(buf), sbar = smem_addr(bar);
  const int lid = get_local_id(0);
  if (lid == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sbar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  uint4 acc = (uint4)(0);
  for (int r = 0; r < rounds; ++r) {
    if (lid == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sbar), "r"(4096) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(sbuf), "l"(src + ((size_t)get_group_id(0) * rounds + r) * 256), "r"(4096), "r"(sbar) : "memory");
    }
    const uint parity = r & 1;
    asm volatile("{\n\t.reg .pred p;\n\tWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n\t}" ::"r"(sbar), "r"(parity) : "memory");
    acc ^= buf[lid];
    barrier(CLK_LOCAL_MEM_FENCE);  // buf free for the next copy
  }
  dst[(size_t)get_group_id(0) * 256 + lid] = acc;
}
