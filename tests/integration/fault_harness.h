// Test harness for process-level fault tests: a loopback job of real
// `ringtrain train --hosts` peers, each with its own hosts-file copy, checkpoint
// directory and metrics file (as on separate machines), that a test can kill -9,
// SIGSTOP/SIGCONT, signal, restart and grow, while the harness follows every peer's
// metrics (each line stamped with the time it was first seen) and logs.
//
// Cleanup: the destructor SIGKILLs every live peer's process group and reaps it;
// the caller's TempDir removes the files. Every wait is bounded.
//
// The bodies are in fault_harness.cc, compiled once instead of in each of the ~15 fault
// tests that include this (its <regex> and process code cost seconds per source).
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace rt::integration::fault {

// Seconds on a monotonic clock.
inline double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One metrics line of a peer, and when the harness first saw it.
struct Metric {
  int64_t step = 0;
  double loss = NAN;
  uint64_t epoch = 0;
  int peers = 0;
  int leader = -1;
  std::string hash;
  double seen_s = 0;  // NowS() when read
  std::string line;
};

// A randomness source whose seed is printed, so a failing run can be repeated with
// RT_FAULT_SEED=<seed>.
std::mt19937_64 SeededRng(const char* test);

class FaultCluster {
 public:
  // `slots` endpoints 127.0.0.1:base_port+i; `args` follow `ringtrain train`.
  FaultCluster(std::string dir, int slots, std::vector<std::string> args, int base_port)
      : FaultCluster(std::move(dir), LoopbackEndpoints(slots, base_port), std::move(args)) {}
  // Any endpoints; `launch(i)` is put before the binary of peer i (e.g. `ip netns
  // exec NS`), `env` added to every peer's environment.
  FaultCluster(std::string dir, std::vector<std::string> endpoints, std::vector<std::string> args,
               std::function<std::vector<std::string>(int)> launch = nullptr,
               std::vector<std::string> env = {})
      : dir_(std::move(dir)),
        args_(std::move(args)),
        launch_(std::move(launch)),
        env_(std::move(env)),
        peers_(endpoints.size()) {
    ::mkdir(dir_.c_str(), 0755);
    for (size_t i = 0; i < endpoints.size(); ++i) {
      peers_[i].endpoint = endpoints[i];
      peers_[i].dir = dir_ + "/p" + std::to_string(i);
      ::mkdir(peers_[i].dir.c_str(), 0755);
    }
  }
  static std::vector<std::string> LoopbackEndpoints(int n, int base_port);
  // RT_FAULT_KEEP=DIR keeps a copy of every peer's logs, metrics and hosts files
  // in DIR/<cluster dir name> (for debugging a failure).
  ~FaultCluster();
  FaultCluster(const FaultCluster&) = delete;
  FaultCluster& operator=(const FaultCluster&) = delete;

  int size() const { return static_cast<int>(peers_.size()); }
  const std::string& Endpoint(int i) const { return peers_[i].endpoint; }
  std::string HostsPath(int i) const { return peers_[i].dir + "/hosts"; }
  std::string CkptDir(int i) const { return peers_[i].dir + "/ckpt"; }

  // Writes peer i's copy of the hosts file: these slots' endpoints, in this order.
  void WriteHosts(int i, const std::vector<int>& entries);
  void WriteHostsAll(const std::vector<int>& entries);

  // From now on every peer starts in a PID namespace of its own (as root), as if on a
  // host of its own: RunOnHost(i, ...) runs a shell command there, where `pkill -x
  // ringtrain` sees only that peer and never another test's processes. Signal() then
  // goes to the peer itself, not to its launcher, whose exit status is the peer's.
  void UsePidNamespaces() { pid_namespaces_ = true; }

  // Starts (or restarts) peer i with its own hosts copy, metrics and checkpoints.
  void Start(int i, const std::vector<std::string>& extra = {});

  // Signals to the peer's process group (kill -9, SIGSTOP, SIGCONT, SIGHUP, SIGTERM);
  // with PID namespaces, to the peer itself (its launcher would die of SIGTERM).
  void Signal(int i, int sig);

  // The pid of peer i's process (its launcher's with PID namespaces); -1 if not running.
  pid_t Pid(int i) const { return peers_[i].pid; }

  // With PID namespaces: the peer's pid (as this process sees it), a child of its
  // `unshare` launcher; -1 if it is not (yet) running.
  pid_t InnerPid(int i) const;

  // With PID namespaces: runs `sh -c command` on peer i's "host" (in its PID and mount
  // namespaces: its own /proc) and returns the exit status (-1 if it could not run).
  int RunOnHost(int i, const std::string& command);
  // kill -9 and reap; returns the time of the kill.
  double Kill9(int i);

  // kill -9 of several peers at once: every signal is sent before any peer is reaped
  // (microseconds apart), then each is reaped; returns the time of the kills.
  double Kill9Together(const std::vector<int>& peers);

  // True while the peer's process lives (reaps it once it ended).
  bool Running(int i);
  // Waits up to timeout_s for the peer to end: its exit code (-signal if killed),
  // or nullopt if it still runs.
  std::optional<int> WaitExit(int i, double timeout_s);
  std::optional<int> exit_code(int i) const { return peers_[i].exit_code; }

  void KillAll();

  // Reads the metrics lines every peer wrote since the last call.
  void Poll();
  const std::vector<Metric>& Metrics(int i) const { return peers_[i].metrics; }
  // The newest step peer i reported (0 if none).
  int64_t LastStep(int i) const;
  uint64_t LastEpoch(int i) const;
  size_t MetricCount(int i) const { return peers_[i].metrics.size(); }

  // Polls metrics every 20 ms until pred() holds; false after timeout_s.
  bool WaitUntil(const std::function<bool()>& pred, double timeout_s);

  // Every incarnation's stderr and stdout of peer i.
  std::string Logs(int i) const;
  // The last `lines` log lines of every peer, for failure messages.
  std::string Dump(int lines = 25) const;

 private:
  struct Peer {
    std::string endpoint, dir;
    pid_t pid = -1;
    int runs = 0;
    std::optional<int> exit_code;
    double started_s = 0;
    std::vector<std::string> logs;
    std::map<std::string, size_t> offsets;
    std::vector<Metric> metrics;
  };
  std::string dir_;
  std::vector<std::string> args_;
  std::function<std::vector<std::string>(int)> launch_;
  std::vector<std::string> env_;
  std::vector<Peer> peers_;
  bool pid_namespaces_ = false;
};

// The wall-clock time of a log line "[2026-11-29 23:49:19.035 I] ..." (local time),
// as seconds on NowS()'s clock via the offset between the clocks now; nullopt if the
// line has no time.
std::optional<double> LogLineTimeS(const std::string& line);

// Log lines of `text` containing `part`, with their times (NowS() clock).
std::vector<std::pair<double, std::string>> TimedLines(const std::string& text,
                                                       const std::string& part);

// The training command line every fault test shares: a tiny model on synthetic data.
std::vector<std::string> TinyTrainArgs(const std::string& data_dir, int steps, int global_batch);

// Synthetic data: a repeating pattern with noise, vocab 50, 3 source bytes per token.
void WriteFaultData(const std::string& dir);

// The uninterrupted run: peers 0..n-1 of a fresh cluster in `dir` train to the end;
// returns peer 0's last metric (every peer must exit 0 at the same hash).
Metric ReferenceRun(const std::string& dir, int n, const std::vector<std::string>& args,
                    int base_port, double timeout_s);

// The end of a faulty run: every peer of `live` exits 0 within timeout_s, all at
// step `steps` (or, if steps < 0, at one step) with one param_hash and the reference's loss (1e-4
// relative); and at every (epoch, step) any two peers reported, their param_hash agrees. (ref ==
// nullptr: no loss comparison.)
void CheckFinal(FaultCluster& c, const std::vector<int>& live, int64_t steps, const Metric* ref,
                double timeout_s);

// The steps of a run that a test ends with SIGTERM (any large number).
inline constexpr int kUntilStopped = 1000000;

// Ends a faulty run the way users do (SIGTERM to every peer: they agree on one last
// step, the leader checkpoints, all exit 0), checks that every peer of `live` ends
// at one step with one param_hash (CheckFinal), then trains an uninterrupted run of
// `n` peers in `ref_dir` to exactly that step with args_for(step) and checks that
// the faulty run's final loss equals the uninterrupted one within 1e-4 relative.
// The job's length thereby does not depend on how fast this machine is today.
void StopAndCompareWithUninterrupted(
    FaultCluster& c, const std::vector<int>& live, const std::string& ref_dir, int n,
    const std::function<std::vector<std::string>(int64_t)>& args_for, int base_port);

// Figures of one failure, printed as "fault figure: ..." lines for the closing note.
struct FailureFigures {
  double to_training_s = -1;  // kill -> first step of a new epoch on a survivor
  int64_t steps_lost = -1;    // steps completed before the failure and done again
};

// After a failure at `t_fail` (NowS) in epoch `epoch`, waits until survivor `who`
// reports a step of a newer epoch; the figures of that failure.
FailureFigures WaitTrainingAgain(FaultCluster& c, int who, double t_fail, uint64_t epoch,
                                 double timeout_s);

// Waits (at most 10 s) until another peer than `who` reports `first`'s (step, epoch), then
// checks that every other peer reporting it holds `first`'s param_hash, and that one did.
void CheckOthersHoldHash(FaultCluster& c, int who, const Metric& first);

// Waits until peer `who`, (re)started or reconnected at t_start, reports a step of a
// newer epoch; seconds to that step (start, join, state transfer, first step), -1 on
// timeout. That step's param_hash must equal what the other peers reported for it.
double WaitRejoined(FaultCluster& c, int who, size_t metrics_before, double t_start,
                    double timeout_s);

// Sleeps `s` seconds while following the metrics.
void Pause(FaultCluster& c, double s);

}  // namespace rt::integration::fault
