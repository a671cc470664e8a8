// Repacking GGUF blocks into the split payload/scale layout and uploading.
#include "engine/cl/weights.h"

#include <cstring>
#include <stdexcept>

namespace clchat {

RepackedMatrix repack_matrix(GgmlType type, const uint8_t* data, int n_in, int rows) {
  RepackedMatrix m;
  m.type = type;
  m.n_in = n_in;
  m.rows = rows;
  const auto row_bytes = ggml_row_bytes(type, uint64_t(n_in));
  if (!row_bytes) throw std::invalid_argument("repack_matrix: row length does not fit type");
  const size_t n_blocks = size_t(rows) * (size_t(n_in) / k_quant_block);
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
      m.q.assign(data, data + *row_bytes * size_t(rows));
      m.s.assign(4, 0);
      return m;
    case GgmlType::Q4_0: {
      m.q.resize(n_blocks * 16);
      m.s.resize(n_blocks * 2);
      const auto* b = reinterpret_cast<const BlockQ4_0*>(data);
      for (size_t i = 0; i < n_blocks; ++i) {
        std::memcpy(&m.q[i * 16], b[i].qs, 16);
        std::memcpy(&m.s[i * 2], &b[i].d, 2);
      }
      return m;
    }
    case GgmlType::Q4_1: {
      m.q.resize(n_blocks * 16);
      m.s.resize(n_blocks * 4);
      const auto* b = reinterpret_cast<const BlockQ4_1*>(data);
      for (size_t i = 0; i < n_blocks; ++i) {
        std::memcpy(&m.q[i * 16], b[i].qs, 16);
        std::memcpy(&m.s[i * 4], &b[i].d, 2);
        std::memcpy(&m.s[i * 4 + 2], &b[i].m, 2);
      }
      return m;
    }
    case GgmlType::Q8_0: {
      m.q.resize(n_blocks * 32);
      m.s.resize(n_blocks * 2);
      const auto* b = reinterpret_cast<const BlockQ8_0*>(data);
      for (size_t i = 0; i < n_blocks; ++i) {
        std::memcpy(&m.q[i * 32], b[i].qs, 32);
        std::memcpy(&m.s[i * 2], &b[i].d, 2);
      }
      return m;
    }
  }
  throw std::invalid_argument("repack_matrix: unsupported type");
}

RepackedMatrix repack_tensor(const GgufTensor& t) {
  return repack_matrix(t.type, t.data, int(t.dims[0]), int(t.n_rows()));
}

RepackedMatrix stack_rows(const std::vector<RepackedMatrix>& parts) {
  RepackedMatrix out;
  if (parts.empty()) return out;
  out.type = parts[0].type;
  out.n_in = parts[0].n_in;
  const bool plain = out.type == GgmlType::F32 || out.type == GgmlType::F16;
  for (const auto& p : parts) {
    if (p.type != out.type || p.n_in != out.n_in) {
      throw std::invalid_argument("stack_rows: matrices differ in type or row length");
    }
    out.rows += p.rows;
    out.q.insert(out.q.end(), p.q.begin(), p.q.end());
    if (!plain) out.s.insert(out.s.end(), p.s.begin(), p.s.end());
  }
  if (plain) out.s.assign(4, 0);
  return out;
}

DeviceMatrix upload_matrix(const ClRuntime& rt, const RepackedMatrix& m) {
  DeviceMatrix d;
  d.type = m.type;
  d.n_in = m.n_in;
  d.rows = m.rows;
  d.q = rt.upload(m.q.data(), m.q.size());
  d.s = rt.upload(m.s.data(), m.s.size());
  d.n_bytes = m.q.size() + m.s.size();
  return d;
}

DeviceMatrix upload_floats(const ClRuntime& rt, const float* data, int n) {
  return upload_matrix(rt,
                       repack_matrix(GgmlType::F32, reinterpret_cast<const uint8_t*>(data), n, 1));
}

}  // namespace clchat
