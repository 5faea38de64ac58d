// BackgroundCheckpoint (see background_checkpoint.h): a thread per write, joined by Wait.
// A thread per checkpoint (every --ckpt-every steps) costs microseconds against a write
// of seconds, and a joined thread is the simplest happens-before there is.
#include "train/background_checkpoint.h"

#include <utility>

#include "core/clock.h"

namespace rt::train {

BackgroundCheckpoint::~BackgroundCheckpoint() {
  if (thread_.joinable()) thread_.join();
}

std::optional<BackgroundCheckpoint::Result> BackgroundCheckpoint::Start(
    int64_t step, std::function<absl::Status()> write) {
  std::optional<Result> previous = Wait();
  result_ = Result{step, absl::OkStatus(), 0};
  thread_ = std::thread([this, write = std::move(write)] {
    Stopwatch watch;
    result_.status = write();
    result_.write_ms = watch.ElapsedMs();
  });
  return previous;
}

std::optional<BackgroundCheckpoint::Result> BackgroundCheckpoint::Wait() {
  if (!thread_.joinable()) return std::nullopt;
  thread_.join();
  return result_;
}

}  // namespace rt::train
