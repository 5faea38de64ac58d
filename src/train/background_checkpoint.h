// BackgroundCheckpoint: one checkpoint write at a time on a thread of its own, reading
// The live training buffers, so that the next step's forward and backward run while it
// writes.
//
// Why no copy is needed: parameters and AdamW moments change only in the optimizer
// step (and when a peer that was behind receives the agreed state), so the trainer
// calls Wait() right before either; forward, backward, the gradient exchange and
// evaluation only read them. The cost a step pays is what is not yet durable when its
// optimizer step begins (`ckpt_wait_ms` in the metrics). A 1B checkpoint takes 30-60 s
// on a VPS disk, a step tens of seconds, so most of the write hides behind compute.
//
// Thread use: Start, Wait and the destructor are called from the training thread only;
// the write function runs on the writer thread and must not touch anything the
// training thread writes before the next Wait().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>

#include "absl/status/status.h"

namespace rt::train {

class BackgroundCheckpoint {
 public:
  struct Result {
    int64_t step = 0;
    absl::Status status;
    double write_ms = 0;  // how long the write itself took
  };

  BackgroundCheckpoint() = default;
  BackgroundCheckpoint(const BackgroundCheckpoint&) = delete;
  BackgroundCheckpoint& operator=(const BackgroundCheckpoint&) = delete;
  // Waits for a write in flight: the buffers it reads must outlive it.
  ~BackgroundCheckpoint();

  // Runs `write` (the checkpoint of `step`) on the writer thread. A write still in flight
  // is waited for first: its result is returned (never dropped), else nullopt.
  [[nodiscard]] std::optional<Result> Start(int64_t step, std::function<absl::Status()> write);
  // True from Start until Wait has collected the result.
  bool pending() const { return thread_.joinable(); }
  // Blocks until the write in flight is done and returns its result (once); nullopt if
  // nothing was started since the last Wait.
  std::optional<Result> Wait();

 private:
  std::thread thread_;
  Result result_;  // written by the writer thread, read after join
};

}  // namespace rt::train
