// A naive GPT-2 or llama forward (by config.arch) in double precision (plain loops), used as the
// reference the oneDNN model is checked against. Its gradients are taken by central differences in
// double, which are exact to ~1e-8 relative for these tiny models.
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_layout.h"

namespace rt::model::testing {

// Sum over B*T positions of cross-entropy; params use `layout`. If logits is not
// null it receives (B,T,V) logits.
double ReferenceLoss(const GptConfig& cfg, const ParamLayout& layout,
                     const std::vector<double>& params, const int32_t* tokens,
                     const int32_t* targets, int B, int T, std::vector<double>* logits = nullptr);

}  // namespace rt::model::testing
