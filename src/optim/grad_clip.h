// Global-norm gradient clipping, split in two so that the norm can be summed across
// shards or peers: each holder computes SumOfSquares of its part, the parts are added,
// norm = sqrt(total), and every holder scales its gradients by ClipScale(norm, max).
#pragma once

#include "absl/types/span.h"

namespace rt::optim {

// Sum of x[i]^2 accumulated in double. The result is bit-identical for any thread
// count: fixed-size blocks are summed in parallel, then the block sums in order.
double SumOfSquares(absl::Span<const float> x);

// Factor to multiply gradients by: min(1, max_norm / global_norm); 1 if max_norm <= 0
// (clipping off). A non-finite global_norm gives 0 (the caller should stop training:
// the gradients are garbage).
float ClipScale(double global_norm, float max_norm);

}  // namespace rt::optim
