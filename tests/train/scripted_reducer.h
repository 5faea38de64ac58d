// Test helper: a GradientReducer that forwards everything to another one (an elastic
// ring's ElasticReducer) and lets a test script the faults of a run at fixed step
// counts, so two runs (e.g. sharded and unsharded outer state) go through the same
// schedule of views and their bits can be compared:
//   - at the step boundary after `crash_after` completed steps, AtStepBoundary returns
//     an Internal error (Run ends; the test destroys the trainer, whose sockets close as
//     after kill -9);
//   - at the boundary after each step count in `pauses`, the peer waits on the shared
//     StepGate until the test releases that count, and then (if `then_wait_departure`
//     holds that count) until its reducer heard of a view change (StepAborted), so the
//     departure is installed at that boundary and not some steps later;
//   - every CheckParamHash (round sync: every outer step) is recorded with the ring size;
//   - alone, the token counts of one round can be made 0 (Script::zero_tokens_at).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "train/forwarding_reducer.h"
#include "train/gradient_reducer.h"

namespace rt::train::testing {

// Where peers wait for the test: Pause(n) blocks until Release(n).
class StepGate {
 public:
  void Pause(int64_t step) {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_[step];
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_.count(step) > 0; });
  }
  // Until `n` peers wait at `step`; false after `timeout`.
  bool WaitArrived(int64_t step, int n, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoSeconds(timeout), [&] { return arrived_[step] >= n; });
  }
  void Release(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    released_.insert(step);
    cv_.notify_all();
  }
  // Every pause released (a failing test must not leave peers waiting).
  void ReleaseAll(const std::vector<int64_t>& steps) {
    for (int64_t s : steps) Release(s);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, int> arrived_;
  std::set<int64_t> released_;
};

struct OuterHash {
  int64_t step = 0;
  uint64_t hash = 0;
  int peers = 0;
  bool operator==(const OuterHash& o) const {
    return step == o.step && hash == o.hash && peers == o.peers;
  }
};

struct Script {
  int64_t crash_after = -1;
  std::vector<int64_t> pauses;
  std::set<int64_t> then_wait_departure;
  StepGate* gate = nullptr;
  // One peer alone only: the first AllgatherInt64 of the step that completes this count
  // (round sync: the round's token counts at its outer step) answers 0, as if no peer
  // of the ring had trained in the round.
  int64_t zero_tokens_at = -1;
};

// Forwards to the elastic reducer (ForwardingReducer) except where the script acts.
class ScriptedReducer final : public ForwardingReducer {
 public:
  ScriptedReducer(std::unique_ptr<GradientReducer> inner, Script script,
                  std::vector<OuterHash>* hashes)
      : ForwardingReducer(std::move(inner)), script_(std::move(script)), hashes_(hashes) {}

  absl::StatusOr<BoundaryAction> AtStepBoundary() override {
    if (script_.crash_after >= 0 && completed_ == script_.crash_after) {
      return absl::InternalError("test: this peer crashes here");
    }
    for (int64_t p : script_.pauses) {
      if (p != completed_ || done_.count(p) > 0) continue;
      done_.insert(p);
      script_.gate->Pause(p);
      if (script_.then_wait_departure.count(p) > 0) {
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        while (!inner().StepAborted() && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(5));
        }
      }
    }
    return ForwardingReducer::AtStepBoundary();
  }
  void StepCompleted(int64_t step) override {
    completed_ = step;
    ForwardingReducer::StepCompleted(step);
  }
  void InnerStepCompleted(int64_t step) override {
    completed_ = step;
    ForwardingReducer::InnerStepCompleted(step);
  }
  absl::Status CheckParamHash(int64_t step, uint64_t param_hash) override {
    hashes_->push_back({step, param_hash, inner().peers()});
    return ForwardingReducer::CheckParamHash(step, param_hash);
  }
  absl::StatusOr<std::vector<int64_t>> AllgatherInt64(int64_t mine) override {
    if (completed_ + 1 == script_.zero_tokens_at && !zeroed_) {
      zeroed_ = true;
      return std::vector<int64_t>{0};
    }
    return ForwardingReducer::AllgatherInt64(mine);
  }

 private:
  Script script_;
  std::vector<OuterHash>* hashes_;
  int64_t completed_ = -1;  // the newest step count completed (none yet: -1)
  std::set<int64_t> done_;  // pauses taken
  bool zeroed_ = false;     // zero_tokens_at answered
};

}  // namespace rt::train::testing
