// The OpenCL forward against a greedy reference file (reference/greedy-*.json,
// float64 NumPy): for each case, greedy ids must match up to the first
// position whose margin (top-1 minus top-2 logit) is below 0.05; there, the
// id must be one of the two tied. Used by test_cl_forward and
// test_cl_persistent.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cl/forward.h"

namespace clchat::test {

inline void expect_greedy_matches_reference(ClForward& cl, const nlohmann::json& ref) {
  ASSERT_GE(ref["cases"].size(), 6u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = c["margins"].get<std::vector<double>>();
    size_t n_check = 0;
    while (n_check < greedy.size() && margins[n_check] >= 0.05) ++n_check;
    int pos = int(prompt.size());
    int32_t id = cl.prefill(prompt, 0);  // each case restarts at position 0
    for (size_t i = 0; i < n_check; ++i) {
      ASSERT_EQ(id, greedy[i]) << "generated position " << i;
      if (i + 1 < greedy.size()) id = cl.decode_argmax(id, pos++);
    }
    if (n_check < greedy.size()) {
      const auto top = c["top_ids"][n_check].get<std::vector<int32_t>>();
      EXPECT_TRUE(id == top[0] || id == top[1]) << "near-tie position " << n_check << ": got " << id
                                                << ", expected " << top[0] << " or " << top[1];
    }
  }
}

}  // namespace clchat::test
