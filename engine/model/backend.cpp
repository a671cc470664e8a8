// The Backend calls with a default: the host sampling chain.
#include "engine/model/backend.h"

#include "engine/chat/sampler.h"

namespace clchat {

int32_t Backend::decode_sample(int32_t token, int pos, const SamplingParams& params, uint64_t draw,
                               std::span<const int32_t> recent) {
  const std::span<const float> logits = decode_logits(token, pos);
  return sample_token(params, logits, recent, draw, sample_scratch_);
}

}  // namespace clchat
