// WaitFor: a condition-variable wait with an absl::Duration timeout (infinite: no
// deadline), shared by the halves of TcpConnection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace rt::net {

// Waits until pred() holds or `timeout` passes; returns pred() at the end.
template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
             absl::Duration timeout, Pred pred) {
  if (timeout == absl::InfiniteDuration()) {
    cv.wait(lock, pred);
    return true;
  }
  auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  return cv.wait_until(lock, deadline, pred);
}

}  // namespace rt::net
