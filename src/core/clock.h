// Monotonic time for measuring steps and links. Units are in the names.
#pragma once

#include <chrono>
#include <cstdint>

namespace rt {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t NowMs() { return NowNs() / 1000000; }
inline double NowSeconds() { return static_cast<double>(NowNs()) * 1e-9; }

// Stopwatch: elapsed time since construction or the last Restart().
class Stopwatch {
 public:
  Stopwatch() : start_ns_(NowNs()) {}
  void Restart() { start_ns_ = NowNs(); }
  int64_t ElapsedNs() const { return NowNs() - start_ns_; }
  double ElapsedMs() const { return static_cast<double>(ElapsedNs()) * 1e-6; }
  double ElapsedSeconds() const { return static_cast<double>(ElapsedNs()) * 1e-9; }

 private:
  int64_t start_ns_;
};

}  // namespace rt
