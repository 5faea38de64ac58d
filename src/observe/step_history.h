// The curves of a run as a status page draws them: one point per optimizer step
// (loss, tokens/s, time shares) and per evaluation (val loss, bits per byte), kept in
// bounded memory for a run of any length: when full, every other point is dropped
// and from then on only every 2nd (4th, ...) step is kept, so the whole run stays
// covered at a coarser resolution. Not thread-safe (the status board serialises).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace rt::observe {

struct StepPoint {
  int64_t step = 0;
  int64_t unix_ms = 0;
  int64_t tokens = 0;  // trained so far, all peers
  double loss = NAN;
  double tokens_per_s = NAN;
  double step_ms = NAN, compute_ms = NAN, comm_ms = NAN, wait_ms = NAN;
  double val_loss = NAN, val_bpb = NAN;  // evaluation steps only
};

class StepHistory {
 public:
  explicit StepHistory(size_t capacity = 2048) : capacity_(capacity < 4 ? 4 : capacity) {}

  // Steps come in growing order; a step at or below the last one (a redone step, a
  // state transfer that moved this peer back) replaces the points from there on.
  // Evaluation points are always kept.
  void Add(const StepPoint& p);
  const std::vector<StepPoint>& points() const { return points_; }
  int64_t stride() const { return stride_; }

 private:
  size_t capacity_;
  int64_t stride_ = 1;  // keep steps that are multiples of it
  std::vector<StepPoint> points_;
};

}  // namespace rt::observe
