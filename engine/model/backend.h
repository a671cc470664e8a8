// The interface the generation loop, the chat engine and the benchmarks drive:
// one implementation runs the CPU reference, one the OpenCL engine. Positions
// must be filled in order; a call at `pos` overwrites the cache from `pos` on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/forward_reports.h"
#include "engine/messages.h"
#include "engine/model/model.h"

namespace clchat {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int n_ctx() const = 0;
  // Whether a call at `pos` may follow the calls so far: always, unless
  // the cache keeps only part of the earlier positions (the OpenCL engine's
  // sliding-window rings, after a step back of more than a prefill chunk).
  // When false, run the context again from position 0.
  virtual bool can_resume(int /*pos*/) const { return true; }

  // Runs `tokens` at positions pos.. and returns the greedy next token (the
  // argmax of the last position's logits).
  virtual int32_t prefill(std::span<const int32_t> tokens, int pos) = 0;
  // prefill that asks `stop` prefill_stop_points(tokens.size()) times on
  // the way (between layers): once it says true the call returns nullopt,
  // and the cache holds the positions before pos as before (those from pos
  // on are to be written again). With no stop points it is prefill.
  virtual std::optional<int32_t> prefill_until(std::span<const int32_t> tokens, int pos,
                                               const std::function<bool()>& /*stop*/) {
    return prefill(tokens, pos);
  }
  // How many times prefill_until of n_tokens asks `stop`, evenly spaced
  // through the call (0: never), so that a caller can size its calls for a
  // quick Ctrl-C.
  virtual int prefill_stop_points(size_t /*n_tokens*/) const { return 0; }
  // Same as prefill of one token, but may return the logits (n_vocab) instead.
  virtual int32_t decode_argmax(int32_t token, int pos) = 0;
  virtual std::span<const float> decode_logits(int32_t token, int pos) = 0;
  // Runs `token` at `pos` and chooses the next token with the sampling chain
  // of `params` (engine/chat/sampler.h), draw number `draw` of params.seed.
  // `recent` are the context's tokens up to and including `token` (its last
  // element is the token at pos); the penalties read its last
  // repeat_last_n. Default: decode_logits + sample_token on the host. The
  // OpenCL backend runs the chain on the device where device_samplable()
  // (4 bytes read back) and returns the same id.
  virtual int32_t decode_sample(int32_t token, int pos, const SamplingParams& params, uint64_t draw,
                                std::span<const int32_t> recent);
  // Runs `tokens` at positions pos.. and returns in `out` the logits of every
  // position from tokens[first_out] on ((size - first_out) x n_vocab,
  // row-major), e.g. for perplexity. Default: one decode_logits per token.
  virtual void prefill_logits(std::span<const int32_t> tokens, int pos, int first_out,
                              std::vector<float>& out) {
    if (first_out < 0 || size_t(first_out) >= tokens.size()) {
      throw std::out_of_range("prefill_logits: first output outside the tokens");
    }
    out.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::span<const float> logits = decode_logits(tokens[i], pos + int(i));
      if (i >= size_t(first_out)) out.insert(out.end(), logits.begin(), logits.end());
    }
  }

  // Debug readback mode: per-layer statistics and the top-5 of the last
  // position, refreshed by every call while on. Backends without it ignore it.
  virtual void set_debug(bool /*on*/) {}
  virtual bool debug() const { return false; }
  virtual const DebugReport* debug_report() const { return nullptr; }
  // Device times per kernel and per layer of the last call, when supported.
  virtual void set_profiling(bool /*on*/) {}
  virtual const ProfileReport* profile_report() const { return nullptr; }

 protected:
  // The host chain's penalised copy of the logits (decode_sample).
  std::vector<float> sample_scratch_;
};

// The CPU reference forward pass behind the Backend interface.
std::unique_ptr<Backend> make_reference_backend(const Model& model, int n_ctx);

}  // namespace clchat
