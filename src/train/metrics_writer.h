// MetricsWriter: one JSON object per line (JSONL) per optimizer step, appended to a
// file (DESIGN "Command-line contract": --metrics). Each line is written with one
// write and flushed, so a crashed run leaves only whole lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace rt::train {

// The figures of one step. Times in milliseconds; `tokens` is the total number of
// tokens trained on so far (all peers), `step` the number of optimizer steps done,
// `bytes_sent` the payload bytes this peer sent during this step, `rank` this peer's
// ring position (0 for a single peer).
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;  // mean train loss of this step (nats per token)
  double lr = 0;
  int64_t tokens = 0;
  double tokens_per_s = 0;
  double step_ms = 0, compute_ms = 0, comm_ms = 0;
  uint64_t bytes_sent = 0;
  double grad_norm = 0;  // before clipping
  int peers = 1;
  int rank = 0;
  uint64_t epoch = 0;
  int leader = 0;
  // Load balancing (train/slot_balancer.h): the slots (sequences) this peer trained
  // on in this step, and how long it waited for the slowest peer's compute at the
  // step's end (the agreed compute times: slowest minus this peer's, at most comm_ms).
  int slots = 0;
  double wait_ms = 0;
  int ckpt_failures = 0;  // consecutive failed checkpoint writes of this peer so far
  // How long this step's optimizer update waited for a checkpoint written in the
  // background (train/background_checkpoint.h): what was not yet durable. 0 mostly.
  double ckpt_wait_ms = 0;
  double rss_mb = -1;      // this process's resident memory at the step's end (-1 unknown)
  std::string param_hash;  // hex
  double time_s = 0;       // when the step ended, unix seconds (0: not written)
  std::optional<double> val_loss, val_bpb;  // only on evaluation steps
  // Round sync (sync/round_sync.h), -1 = not written: outer steps done so far (every
  // line of a round-sync run); on the lines of outer steps also the time the exchange
  // and the outer update took (nothing of it hidden), the bytes this peer sent for
  // them, and the L2 norm of the averaged pseudo-gradient.
  int64_t outer_step = -1;
  double outer_ms = -1;
  int64_t outer_bytes = -1;
  double pseudo_grad_norm = -1;
};

// The JSON object for `m`, without a newline. Non-finite numbers are written as null.
std::string StepMetricsJson(const StepMetrics& m);

class MetricsWriter {
 public:
  // Opens `path` for appending (creating it). Error names the path.
  static absl::StatusOr<MetricsWriter> Open(const std::string& path);
  MetricsWriter(MetricsWriter&& o) noexcept;
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  MetricsWriter(const MetricsWriter&) = delete;
  ~MetricsWriter();

  absl::Status Write(const StepMetrics& m);

 private:
  MetricsWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  std::FILE* file_;
  std::string path_;
};

}  // namespace rt::train
