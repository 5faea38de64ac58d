// AbortSignal: fail registered connections from any thread (see abort_signal.h).
#include "collective/abort_signal.h"

#include "core/status_copy.h"

namespace rt::collective {

void AbortSignal::Abort(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  why_ = why.ok() ? absl::AbortedError("aborted") : FreshCopy(why);  // read by other threads
  for (auto& [id, conn] : watched_) conn->Fail(why_);
}

bool AbortSignal::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

absl::Status AbortSignal::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_ ? FreshCopy(why_) : absl::OkStatus();
}

uint64_t AbortSignal::Watch(net::TcpConnection* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  watched_[id] = conn;
  if (aborted_) conn->Fail(why_);
  return id;
}

void AbortSignal::Unwatch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  watched_.erase(id);
}

}  // namespace rt::collective
