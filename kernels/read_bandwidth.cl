// The device's read bandwidth, measured once per device for `clchat bench`
// (engine/cl/read_bandwidth.h): every work-item XORs its share of the n
// 16-byte words of src, four loads in flight at a time, and writes the
// result to sink (never read: the write keeps the loads). per_item 0: the
// words g, g + n_items, ... (a GPU's work-items then read neighbouring
// words); else the per_item words from g * per_item on (a CPU device runs a
// work-item's loop before the next one's: each core then streams through
// one region).
__kernel void read_stream(const __global uint4* src, ulong n, ulong per_item,
                          __global uint* sink) {
  const ulong g = get_global_id(0);
  const ulong step = per_item ? 1 : get_global_size(0);
  const ulong end = per_item ? min(n, (g + 1) * per_item) : n;
  uint4 a0 = (uint4)(0u), a1 = (uint4)(0u), a2 = (uint4)(0u), a3 = (uint4)(0u);
  ulong i = per_item ? g * per_item : g;
  for (; i + 3 * step < end; i += 4 * step) {
    a0 ^= src[i];
    a1 ^= src[i + step];
    a2 ^= src[i + 2 * step];
    a3 ^= src[i + 3 * step];
  }
  for (; i < end; i += step) a0 ^= src[i];
  const uint4 a = a0 ^ a1 ^ a2 ^ a3;
  sink[g] = a.x ^ a.y ^ a.z ^ a.w;
}
