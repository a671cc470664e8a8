// Backend over CpuForward: every call is one token at a time.
#include <stdexcept>

#include "engine/cpu/forward.h"
#include "engine/cpu/ops.h"
#include "engine/model/backend.h"

namespace clchat {

namespace {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(const Model& model, int n_ctx) : forward_(model, n_ctx) {}
  std::string name() const override { return "reference (CPU, float64 accumulation)"; }
  int n_ctx() const override { return forward_.n_ctx(); }

  int32_t prefill(std::span<const int32_t> tokens, int pos) override {
    if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
    for (size_t i = 0; i + 1 < tokens.size(); ++i) forward_.forward(tokens[i], pos + int(i));
    return decode_argmax(tokens.back(), pos + int(tokens.size()) - 1);
  }
  int32_t decode_argmax(int32_t token, int pos) override {
    return cpu::argmax(decode_logits(token, pos));
  }
  std::span<const float> decode_logits(int32_t token, int pos) override {
    return forward_.forward(token, pos);
  }

 private:
  CpuForward forward_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const Model& model, int n_ctx) {
  return std::make_unique<ReferenceBackend>(model, n_ctx);
}

}  // namespace clchat
