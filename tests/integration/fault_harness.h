// Test harness for process-level fault tests: a loopback job of real
// `ringtrain train --hosts` peers, each with its own hosts-file copy, checkpoint
// directory and metrics file (as on separate machines), that a test can kill -9,
// SIGSTOP/SIGCONT, signal, restart and grow, while the harness follows every peer's
// metrics (each line stamped with the time it was first seen) and logs.
//
// Cleanup: the destructor SIGKILLs every live peer's process group and reaps it;
// the caller's TempDir removes the files. Every wait is bounded.
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
#include <regex>
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
inline std::mt19937_64 SeededRng(const char* test) {
  uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^ getpid();
  if (const char* s = std::getenv("RT_FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
  MESSAGE(std::string(test) << ": random seed " << seed << " (repeat with RT_FAULT_SEED=" << seed
                            << ")");
  return std::mt19937_64(seed);
}

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
  static std::vector<std::string> LoopbackEndpoints(int n, int base_port) {
    std::vector<std::string> e;
    for (int i = 0; i < n; ++i) e.push_back("127.0.0.1:" + std::to_string(base_port + i));
    return e;
  }
  // RT_FAULT_KEEP=DIR keeps a copy of every peer's logs, metrics and hosts files
  // in DIR/<cluster dir name> (for debugging a failure).
  ~FaultCluster() {
    KillAll();
    if (const char* keep = std::getenv("RT_FAULT_KEEP")) {
      std::error_code ec;
      const std::filesystem::path to =
          std::filesystem::path(keep) / std::filesystem::path(dir_).filename();
      std::filesystem::create_directories(to, ec);
      std::filesystem::copy(dir_, to,
                            std::filesystem::copy_options::recursive |
                                std::filesystem::copy_options::overwrite_existing,
                            ec);
    }
  }
  FaultCluster(const FaultCluster&) = delete;
  FaultCluster& operator=(const FaultCluster&) = delete;

  int size() const { return static_cast<int>(peers_.size()); }
  const std::string& Endpoint(int i) const { return peers_[i].endpoint; }
  std::string HostsPath(int i) const { return peers_[i].dir + "/hosts"; }
  std::string CkptDir(int i) const { return peers_[i].dir + "/ckpt"; }

  // Writes peer i's copy of the hosts file: these slots' endpoints, in this order.
  void WriteHosts(int i, const std::vector<int>& entries) {
    std::string text = "# fault test hosts file\n";
    for (int e : entries) text += Endpoint(e) + "\n";
    // Written aside and renamed, as parallel-scp does: a reader never sees half a file.
    const std::string tmp = HostsPath(i) + ".tmp";
    ::rt::testing::WriteFile(tmp, text);
    std::rename(tmp.c_str(), HostsPath(i).c_str());
  }
  void WriteHostsAll(const std::vector<int>& entries) {
    for (int i = 0; i < size(); ++i) WriteHosts(i, entries);
  }

  // From now on every peer starts in a PID namespace of its own (as root), as if on a
  // host of its own: RunOnHost(i, ...) runs a shell command there, where `pkill -x
  // ringtrain` sees only that peer and never another test's processes. Signal() then
  // goes to the peer itself, not to its launcher, whose exit status is the peer's.
  void UsePidNamespaces() { pid_namespaces_ = true; }

  // Starts (or restarts) peer i with its own hosts copy, metrics and checkpoints.
  void Start(int i, const std::vector<std::string>& extra = {}) {
    Peer& p = peers_[i];
    REQUIRE_MESSAGE(p.pid <= 0, "peer " << i << " is still running");
    std::vector<std::string> argv_s;
    if (launch_) argv_s = launch_(i);
    if (pid_namespaces_) {
      for (const char* a : {"unshare", "--pid", "--fork", "--mount-proc", "--"}) {
        argv_s.push_back(a);
      }
    }
    argv_s.push_back(RINGTRAIN_BINARY);
    argv_s.push_back("train");
    argv_s.insert(argv_s.end(), args_.begin(), args_.end());
    for (const std::string& a :
         {std::string("--hosts"), HostsPath(i), std::string("--self"), p.endpoint,
          std::string("--metrics"), p.dir + "/m.jsonl", std::string("--ckpt-dir"), CkptDir(i)}) {
      argv_s.push_back(a);
    }
    argv_s.insert(argv_s.end(), extra.begin(), extra.end());
    const int run = p.runs++;
    const std::string out = p.dir + "/run" + std::to_string(run) + ".out";
    const std::string err = p.dir + "/run" + std::to_string(run) + ".err";
    p.logs.push_back(err);
    p.logs.push_back(out);
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      setenv("OMP_NUM_THREADS", "1", 1);
      for (const std::string& kv : env_) putenv(strdup(kv.c_str()));
      execvp(argv[0], argv.data());
      _exit(127);
    }
    REQUIRE(pid > 0);
    setpgid(pid, pid);
    p.pid = pid;
    p.exit_code.reset();
    p.started_s = NowS();
  }

  // Signals to the peer's process group (kill -9, SIGSTOP, SIGCONT, SIGHUP, SIGTERM);
  // with PID namespaces, to the peer itself (its launcher would die of SIGTERM).
  void Signal(int i, int sig) {
    if (peers_[i].pid <= 0) return;
    if (!pid_namespaces_ || sig == SIGKILL) {
      ::kill(-peers_[i].pid, sig);
    } else if (const pid_t inner = InnerPid(i); inner > 0) {
      ::kill(inner, sig);
    }
  }

  // The pid of peer i's process (its launcher's with PID namespaces); -1 if not running.
  pid_t Pid(int i) const { return peers_[i].pid; }

  // With PID namespaces: the peer's pid (as this process sees it), a child of its
  // `unshare` launcher; -1 if it is not (yet) running.
  pid_t InnerPid(int i) const {
    const pid_t outer = peers_[i].pid;
    if (outer <= 0) return -1;
    const std::string children = ::rt::testing::ReadFile(
        "/proc/" + std::to_string(outer) + "/task/" + std::to_string(outer) + "/children");
    return children.empty() ? -1 : static_cast<pid_t>(std::atoi(children.c_str()));
  }

  // With PID namespaces: runs `sh -c command` on peer i's "host" (in its PID and mount
  // namespaces: its own /proc) and returns the exit status (-1 if it could not run).
  int RunOnHost(int i, const std::string& command) {
    const pid_t inner = InnerPid(i);
    if (inner <= 0) return -1;
    const std::string cmd = "nsenter -t " + std::to_string(inner) + " --pid --mount -- sh -c '" +
                            command + "' </dev/null";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // kill -9 and reap; returns the time of the kill.
  double Kill9(int i) {
    const double t = NowS();
    Signal(i, SIGKILL);
    WaitExit(i, 10);
    return t;
  }

  // kill -9 of several peers at once: every signal is sent before any peer is reaped
  // (microseconds apart), then each is reaped; returns the time of the kills.
  double Kill9Together(const std::vector<int>& peers) {
    const double t = NowS();
    for (int i : peers) Signal(i, SIGKILL);
    for (int i : peers) WaitExit(i, 10);
    return t;
  }

  // True while the peer's process lives (reaps it once it ended).
  bool Running(int i) {
    Peer& p = peers_[i];
    if (p.pid <= 0) return false;
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
      p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      p.pid = -1;
      return false;
    }
    return true;
  }
  // Waits up to timeout_s for the peer to end: its exit code (-signal if killed),
  // or nullopt if it still runs.
  std::optional<int> WaitExit(int i, double timeout_s) {
    const double end = NowS() + timeout_s;
    while (Running(i) && NowS() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Running(i)) return std::nullopt;
    return peers_[i].exit_code;
  }
  std::optional<int> exit_code(int i) const { return peers_[i].exit_code; }

  void KillAll() {
    for (int i = 0; i < size(); ++i) {
      Peer& p = peers_[i];
      if (p.pid <= 0) continue;
      ::kill(-p.pid, SIGCONT);
      ::kill(-p.pid, SIGKILL);
      int status = 0;
      waitpid(p.pid, &status, 0);
      p.pid = -1;
    }
  }

  // Reads the metrics lines every peer wrote since the last call.
  void Poll() {
    for (Peer& p : peers_) {
      DIR* d = opendir(p.dir.c_str());
      if (d == nullptr) continue;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind("m.", 0) != 0 || name.size() < 6 ||
            name.compare(name.size() - 6, 6, ".jsonl") != 0) {
          continue;
        }
        const std::string text = ::rt::testing::ReadFile(p.dir + "/" + name);
        size_t& offset = p.offsets[name];
        const size_t end = text.rfind('\n');
        if (end == std::string::npos || end + 1 <= offset) continue;
        std::istringstream in(text.substr(offset, end + 1 - offset));
        offset = end + 1;
        std::string line;
        const double now = NowS();
        while (std::getline(in, line)) {
          if (line.empty() || line[0] != '{') continue;
          Metric m;
          m.step = static_cast<int64_t>(JsonNumber(line, "step"));
          m.loss = JsonNumber(line, "loss");
          m.epoch = static_cast<uint64_t>(JsonNumber(line, "epoch"));
          m.peers = static_cast<int>(JsonNumber(line, "peers"));
          m.leader = static_cast<int>(JsonNumber(line, "leader"));
          m.hash = JsonString(line, "param_hash");
          m.seen_s = now;
          m.line = line;
          p.metrics.push_back(m);
        }
      }
      closedir(d);
    }
  }
  const std::vector<Metric>& Metrics(int i) const { return peers_[i].metrics; }
  // The newest step peer i reported (0 if none).
  int64_t LastStep(int i) const {
    return peers_[i].metrics.empty() ? 0 : peers_[i].metrics.back().step;
  }
  uint64_t LastEpoch(int i) const {
    return peers_[i].metrics.empty() ? 0 : peers_[i].metrics.back().epoch;
  }
  size_t MetricCount(int i) const { return peers_[i].metrics.size(); }

  // Polls metrics every 20 ms until pred() holds; false after timeout_s.
  bool WaitUntil(const std::function<bool()>& pred, double timeout_s) {
    const double end = NowS() + timeout_s;
    while (NowS() < end) {
      Poll();
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Poll();
    return pred();
  }

  // Every incarnation's stderr and stdout of peer i.
  std::string Logs(int i) const {
    std::string all;
    for (const std::string& f : peers_[i].logs) all += ::rt::testing::ReadFile(f);
    return all;
  }
  // The last `lines` log lines of every peer, for failure messages.
  std::string Dump(int lines = 25) const {
    std::string s;
    for (int i = 0; i < size(); ++i) {
      std::vector<std::string> all;
      std::istringstream in(Logs(i));
      std::string line;
      while (std::getline(in, line)) all.push_back(line);
      s += "---- peer " + std::to_string(i) + " (" + Endpoint(i) + ", last step " +
           std::to_string(LastStep(i)) + ")\n";
      for (size_t k = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
           k < all.size(); ++k) {
        s += all[k] + "\n";
      }
    }
    return s;
  }

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
inline std::optional<double> LogLineTimeS(const std::string& line) {
  static const std::regex re(R"(^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) )");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime("%Y-%m-%d %H:%M:%E3S", m[1].str(), absl::LocalTimeZone(), &t, &err)) {
    return std::nullopt;
  }
  const double wall_minus_mono = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - NowS();
  return absl::ToDoubleSeconds(t - absl::UnixEpoch()) - wall_minus_mono;
}

// Log lines of `text` containing `part`, with their times (NowS() clock).
inline std::vector<std::pair<double, std::string>> TimedLines(const std::string& text,
                                                              const std::string& part) {
  std::vector<std::pair<double, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(part) == std::string::npos) continue;
    if (auto t = LogLineTimeS(line)) out.emplace_back(*t, line);
  }
  return out;
}

// The training command line every fault test shares: a tiny model on synthetic data.
inline std::vector<std::string> TinyTrainArgs(const std::string& data_dir, int steps,
                                              int global_batch) {
  return {"--data",
          data_dir,
          "--layers=2",
          "--heads=2",
          "--dim=32",
          "--seq-len=16",
          "--batch=2",
          "--threads=1",
          "--warmup=0",
          "--lr=1e-3",
          "--min-lr=1e-3",
          "--precision=fp32",
          "--eval-every=0",
          "--seed=7",
          "--wait=60",
          "--steps=" + std::to_string(steps),
          "--global-batch=" + std::to_string(global_batch)};
}

// Synthetic data: a repeating pattern with noise, vocab 50, 3 source bytes per token.
inline void WriteFaultData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 800;
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

// The uninterrupted run: peers 0..n-1 of a fresh cluster in `dir` train to the end;
// returns peer 0's last metric (every peer must exit 0 at the same hash).
inline Metric ReferenceRun(const std::string& dir, int n, const std::vector<std::string>& args,
                           int base_port, double timeout_s) {
  FaultCluster c(dir, n, args, base_port);
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  c.WriteHostsAll(all);
  const double start = NowS();
  for (int i = 0; i < n; ++i) c.Start(i);
  for (int i = 0; i < n; ++i) {
    const double left = std::max(1.0, timeout_s - (NowS() - start));
    std::optional<int> code = c.WaitExit(i, left);
    REQUIRE_MESSAGE(code.has_value(), "reference run timed out\n" << c.Dump());
    REQUIRE_MESSAGE(*code == 0, "reference peer " << i << " failed\n" << c.Dump());
  }
  c.Poll();
  REQUIRE(c.MetricCount(0) > 0);
  for (int i = 1; i < n; ++i) {
    REQUIRE(c.MetricCount(i) > 0);
    CHECK(c.Metrics(i).back().hash == c.Metrics(0).back().hash);
  }
  MESSAGE("reference run of " << n << " peers: " << c.LastStep(0) << " steps in " << NowS() - start
                              << " s, final loss " << c.Metrics(0).back().loss);
  return c.Metrics(0).back();
}

// The end of a faulty run: every peer of `live` exits 0 within timeout_s, all at
// step `steps` (or, if steps < 0, at one step) with one param_hash and the reference's loss (1e-4
// relative); and at every (epoch, step) any two peers reported, their param_hash agrees. (ref ==
// nullptr: no loss comparison.)
inline void CheckFinal(FaultCluster& c, const std::vector<int>& live, int64_t steps,
                       const Metric* ref, double timeout_s) {
  const double start = NowS();
  for (int i : live) {
    const double left = std::max(1.0, timeout_s - (NowS() - start));
    std::optional<int> code = c.WaitExit(i, left);
    REQUIRE_MESSAGE(code.has_value(), "peer " << i << " did not finish\n" << c.Dump());
    CHECK_MESSAGE(*code == 0, "peer " << i << " exit " << *code << "\n" << c.Dump());
  }
  c.Poll();
  const std::string hash = c.Metrics(live[0]).empty() ? "" : c.Metrics(live[0]).back().hash;
  for (int i : live) {
    REQUIRE_MESSAGE(c.MetricCount(i) > 0, c.Dump());
    const Metric& last = c.Metrics(i).back();
    // steps < 0: stopped by a signal; every peer at the same step.
    const int64_t want = steps >= 0 ? steps : c.Metrics(live[0]).back().step;
    CHECK_MESSAGE(last.step == want, "peer " << i << ": " << last.line);
    CHECK_MESSAGE(last.hash == hash, "peer " << i << ": " << last.line);
    if (ref == nullptr) continue;
    const double rel = std::fabs(last.loss - ref->loss) / std::max(1e-12, std::fabs(ref->loss));
    CHECK_MESSAGE(rel <= 1e-4, "peer " << i << " final loss " << last.loss << " vs uninterrupted "
                                       << ref->loss << " (relative " << rel << ")");
  }
  std::map<std::pair<uint64_t, int64_t>, std::pair<int, std::string>> seen;
  int compared = 0;
  for (int i = 0; i < c.size(); ++i) {
    for (const Metric& m : c.Metrics(i)) {
      auto [it, fresh] = seen.emplace(std::make_pair(m.epoch, m.step), std::make_pair(i, m.hash));
      if (fresh) continue;
      ++compared;
      CHECK_MESSAGE(it->second.second == m.hash, "epoch " << m.epoch << " step " << m.step
                                                          << ": peer " << it->second.first
                                                          << " and peer " << i << " differ");
    }
  }
  CHECK(compared > 0);
}

// The steps of a run that a test ends with SIGTERM (any large number).
inline constexpr int kUntilStopped = 1000000;

// Ends a faulty run the way users do (SIGTERM to every peer: they agree on one last
// step, the leader checkpoints, all exit 0), checks that every peer of `live` ends
// at one step with one param_hash (CheckFinal), then trains an uninterrupted run of
// `n` peers in `ref_dir` to exactly that step with args_for(step) and checks that
// the faulty run's final loss equals the uninterrupted one within 1e-4 relative.
// The job's length thereby does not depend on how fast this machine is today.
inline void StopAndCompareWithUninterrupted(
    FaultCluster& c, const std::vector<int>& live, const std::string& ref_dir, int n,
    const std::function<std::vector<std::string>(int64_t)>& args_for, int base_port) {
  for (int i : live) c.Signal(i, SIGTERM);
  CheckFinal(c, live, -1, nullptr, 120);
  c.Poll();
  REQUIRE(c.MetricCount(live[0]) > 0);
  const int64_t last = c.Metrics(live[0]).back().step;
  const Metric ref = ReferenceRun(ref_dir, n, args_for(last), base_port, 150);
  REQUIRE(ref.step == last);
  for (int i : live) {
    const Metric& m = c.Metrics(i).back();
    const double rel = std::fabs(m.loss - ref.loss) / std::max(1e-12, std::fabs(ref.loss));
    CHECK_MESSAGE(rel <= 1e-4, "peer " << i << " loss " << m.loss << " at step " << m.step
                                       << " vs uninterrupted " << ref.loss << " (relative " << rel
                                       << ")");
  }
  std::printf("fault figure: final loss at step %lld: faulty run %.9g, uninterrupted %.9g\n",
              static_cast<long long>(last), c.Metrics(live[0]).back().loss, ref.loss);
}

// Figures of one failure, printed as "fault figure: ..." lines for the closing note.
struct FailureFigures {
  double to_training_s = -1;  // kill -> first step of a new epoch on a survivor
  int64_t steps_lost = -1;    // steps completed before the failure and done again
};

// After a failure at `t_fail` (NowS) in epoch `epoch`, waits until survivor `who`
// reports a step of a newer epoch; the figures of that failure.
inline FailureFigures WaitTrainingAgain(FaultCluster& c, int who, double t_fail, uint64_t epoch,
                                        double timeout_s) {
  FailureFigures f;
  std::optional<Metric> resumed;
  c.WaitUntil(
      [&] {
        for (const Metric& m : c.Metrics(who)) {
          if (m.epoch > epoch && m.seen_s >= t_fail) {
            resumed = m;
            return true;
          }
        }
        return false;
      },
      timeout_s);
  if (!resumed) return f;
  f.to_training_s = resumed->seen_s - t_fail;
  int64_t done_before = 0;
  for (int i = 0; i < c.size(); ++i) {
    for (const Metric& m : c.Metrics(i)) {
      if (m.epoch <= epoch) done_before = std::max(done_before, m.step);
    }
  }
  f.steps_lost = std::max<int64_t>(0, done_before - (resumed->step - 1));
  return f;
}

// Waits (at most 10 s) until another peer than `who` reports `first`'s (step, epoch), then
// checks that every other peer reporting it holds `first`'s param_hash, and that one did.
inline void CheckOthersHoldHash(FaultCluster& c, int who, const Metric& first) {
  c.WaitUntil(
      [&] {
        for (int i = 0; i < c.size(); ++i) {
          if (i == who) continue;
          for (const Metric& m : c.Metrics(i)) {
            if (m.step == first.step && m.epoch == first.epoch) return true;
          }
        }
        return false;
      },
      10);
  bool compared = false;
  for (int i = 0; i < c.size(); ++i) {
    if (i == who) continue;
    for (const Metric& m : c.Metrics(i)) {
      if (m.step != first.step || m.epoch != first.epoch) continue;
      compared = true;
      CHECK_MESSAGE(m.hash == first.hash, "rejoined peer " << who << " step " << first.step
                                                           << " hash " << first.hash << " vs peer "
                                                           << i << " " << m.hash);
    }
  }
  CHECK_MESSAGE(compared, "no other peer reported step " << first.step << " epoch " << first.epoch);
}

// Waits until peer `who`, (re)started or reconnected at t_start, reports a step of a
// newer epoch; seconds to that step (start, join, state transfer, first step), -1 on
// timeout. That step's param_hash must equal what the other peers reported for it.
inline double WaitRejoined(FaultCluster& c, int who, size_t metrics_before, double t_start,
                           double timeout_s) {
  // The first step of a newer epoch than the peer's last one before: a step that was
  // in flight when a partition began may still complete in the old view once the
  // link is back (with every peer's gradient; the next view resumes from it).
  const uint64_t old_epoch = metrics_before > 0 ? c.Metrics(who)[metrics_before - 1].epoch : 0;
  size_t index = 0;
  const auto found = [&] {
    for (size_t k = metrics_before; k < c.MetricCount(who); ++k) {
      if (c.Metrics(who)[k].epoch > old_epoch) {
        index = k;
        return true;
      }
    }
    return false;
  };
  if (!c.WaitUntil(found, timeout_s)) return -1;
  const Metric first = c.Metrics(who)[index];
  // Others report that step a moment later at most.
  CheckOthersHoldHash(c, who, first);
  return first.seen_s - t_start;
}

// Sleeps `s` seconds while following the metrics.
inline void Pause(FaultCluster& c, double s) {
  c.WaitUntil([] { return false; }, s);
}

}  // namespace rt::integration::fault
