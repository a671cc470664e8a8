// A model's own sampling recommendation: the general.sampling.* keys that
// llama.cpp's gguf-py writes (general.sampling.temp, top_k, top_p, min_p,
// penalty_repeat, penalty_last_n). The chat starts from them for every field
// the user did not choose (EngineOptions::model_sampling).
#pragma once

#include "engine/gguf/gguf.h"
#include "engine/messages.h"

namespace clchat {

// Sets the fields of `params` that `allowed` names and `file` recommends; a
// value out of its setting's range (a negative temperature, top_p above 1) is
// ignored. Returns the fields it set.
SamplingFields apply_model_sampling(const GgufFile& file, const SamplingFields& allowed,
                                    SamplingParams& params);

}  // namespace clchat
