// PendingLink: the eventual result of TcpNode::ConnectTo / AcceptFrom (tcp_node.h),
// fulfilled once by the node's io threads, waited for and taken by its owner. A dial
// also records here whether it is backing off between attempts, so that its owner can
// cancel it then and only then (CancelIfBackingOff). Moved out of tcp_node.cc.
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "net/tcp_node.h"  // declares PendingLink

namespace rt::net {

bool PendingLink::Wait(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return done_; });
}

absl::StatusOr<std::unique_ptr<Link>> PendingLink::Take() {
  std::shared_ptr<TcpNode> node;
  absl::StatusOr<std::shared_ptr<TcpConnection>> result = absl::UnknownError("pending");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) return absl::FailedPreconditionError("PendingLink::Take before it is done");
    if (taken_) return absl::FailedPreconditionError("PendingLink::Take called twice");
    taken_ = true;
    result = std::move(result_);
    node = node_.lock();
  }
  if (!result.ok()) return result.status();
  if (!node) return absl::CancelledError("node stopped");
  return std::make_unique<Link>(node, *std::move(result), peer_rank_);
}

std::string PendingLink::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return note_.empty() ? what_ : what_ + " (" + note_ + ")";
}

void PendingLink::Cancel() {
  std::shared_ptr<TcpConnection> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      CancelPendingLocked();
      return;
    }
    if (!taken_ && result_.ok()) late = *result_;
    taken_ = true;
  }
  if (late) late->Close();
}

bool PendingLink::CancelIfBackingOff() {
  // Under one lock with BeginAttempt: a dial seen backing off starts no attempt after.
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ || !backing_off_) return false;
  CancelPendingLocked();
  return true;
}

void PendingLink::CancelPendingLocked() {
  done_ = true;
  result_ = absl::CancelledError(what_ + ": cancelled");  // what Take() returns
  cv_.notify_all();
}

bool PendingLink::Fulfil(absl::StatusOr<std::shared_ptr<TcpConnection>> result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return false;
  done_ = true;
  result_ = std::move(result);
  cv_.notify_all();
  return true;
}

void PendingLink::Note(const std::string& note) {
  std::lock_guard<std::mutex> lock(mu_);
  note_ = note;
}

void PendingLink::BackOff(const std::string& problem) {
  std::lock_guard<std::mutex> lock(mu_);
  note_ = problem;
  backing_off_ = true;
}

bool PendingLink::BeginAttempt() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return false;
  backing_off_ = false;
  return true;
}

}  // namespace rt::net
