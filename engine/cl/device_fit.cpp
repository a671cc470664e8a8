// Weight footprint, the fit check and the other-device hint (see device_fit.h).
#include "engine/cl/device_fit.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "engine/cl/block_layout.h"
#include "engine/cl/build_error.h"
#include "engine/cl/weights.h"

namespace clchat {

namespace {

// Bytes of the quant payload buffer that repack_tensor() makes from a tensor
// (the scales go to a second, smaller buffer) in its device_type; floats
// stay whole. (A Q4_K / Q5_K tensor with a scale beyond fp16 keeps its larger
// exact layout: 4 or 8 bytes per 32 values more than sized here.)
uint64_t payload_bytes(const GgufTensor& t, bool cpu) {
  if (!ggml_is_quantized(t.type)) return t.n_bytes;
  return t.n_elements / 32 * uint64_t(device_q_bytes(device_type(t.type, cpu)));
}
// Payloads and scale records together (K-quants take more than in the file).
uint64_t device_bytes(const GgufTensor& t, bool cpu) {
  if (!ggml_is_quantized(t.type)) return t.n_bytes;
  return payload_bytes(t, cpu) +
         t.n_elements / 32 * uint64_t(device_s_bytes(device_type(t.type, cpu)));
}

std::string size_text(uint64_t bytes) {
  if (bytes < 1024 * 1024) return std::to_string(bytes) + " bytes";
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return s;
}

const char* kind_of(const DeviceInfo& d) { return d.is_gpu ? "gpu" : d.is_cpu ? "cpu" : "other"; }

bool another_device_might_help(cl_int code) {
  return code == CL_OUT_OF_RESOURCES || code == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
         code == CL_OUT_OF_HOST_MEMORY || code == CL_BUILD_PROGRAM_FAILURE ||
         code == CL_INVALID_BUFFER_SIZE;
}

}  // namespace

WeightFootprint weight_footprint(const Model& model, bool cpu_device) {
  WeightFootprint f;
  const ModelTensors& t = model.tensors;
  auto add = [&](const GgufTensor* tensor) {
    if (!tensor) return;
    f.total_bytes += device_bytes(*tensor, cpu_device);
    f.largest_buffer_bytes = std::max(f.largest_buffer_bytes, payload_bytes(*tensor, cpu_device));
  };
  add(t.token_embd);
  if (!model.config.tied_embeddings) add(t.output);
  add(t.output_norm);
  for (const LayerTensors& l : t.layers) {
    for (const GgufTensor* m :
         {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down, l.bq,
          l.bk, l.bv, l.q_norm, l.k_norm, l.post_attn_norm, l.post_ffn_norm}) {
      add(m);  // the optional ones are null unless the model has them
    }
    if (qkv_stacked(l, cpu_device)) {  // uploaded as one matrix
      f.largest_buffer_bytes =
          std::max(f.largest_buffer_bytes, payload_bytes(*l.wq, cpu_device) +
                                               payload_bytes(*l.wk, cpu_device) +
                                               payload_bytes(*l.wv, cpu_device));
    }
  }
  return f;
}

void check_model_fits(const Model& model, const DeviceInfo& device) {
  const WeightFootprint f = weight_footprint(model, device.is_cpu);
  if (f.total_bytes > device.global_mem_bytes) {
    throw ModelTooLargeError("the model's weights need " + size_text(f.total_bytes) + " but " +
                             device.name + " has " + size_text(device.global_mem_bytes) +
                             " of memory; use a smaller or more quantized model");
  }
  if (f.largest_buffer_bytes > device.max_alloc_bytes) {
    throw ModelTooLargeError("the model needs a " + size_text(f.largest_buffer_bytes) +
                             " buffer but " + device.name + " allocates at most " +
                             size_text(device.max_alloc_bytes) +
                             " at once; use a smaller or more quantized model");
  }
}

std::string context_reduced_note(int wanted, int got, const std::string& device_name) {
  return "context reduced from " + std::to_string(wanted) + " to " + std::to_string(got) +
         " tokens to fit " + device_name;
}

std::string other_devices_hint(const std::vector<DeviceInfo>& devices, int current) {
  std::string list;
  for (const DeviceInfo& d : devices) {
    if (d.index == current) continue;
    list += (list.empty() ? "" : ", ") + std::to_string(d.index) + ": " + d.name + " (" +
            kind_of(d) + ")";
  }
  if (list.empty()) return "";
  return "; other OpenCL devices: " + list + "; select one with --device INDEX";
}

void rethrow_with_device_hint(const DeviceInfo& current) {
  try {
    throw;
  } catch (const ModelTooLargeError& e) {
    const std::string hint = other_devices_hint(list_devices(), current.index);
    if (hint.empty()) throw;
    throw ModelTooLargeError(e.what() + hint);
  } catch (const ClBuildError& e) {
    const std::string hint = other_devices_hint(list_devices(), current.index);
    if (hint.empty()) throw;
    throw ClBuildError(e.what() + hint, e.code(), e.log());
  } catch (const ClError& e) {
    if (!another_device_might_help(e.code())) throw;
    const std::string hint = other_devices_hint(list_devices(), current.index);
    if (hint.empty()) throw;
    throw ClError(e.what() + hint, e.code());
  }
}

}  // namespace clchat
