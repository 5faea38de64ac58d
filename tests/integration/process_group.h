// Test helper: starts several commands at once (each with stdout/stderr in files),
// waits for all of them with one deadline, and stops what is left on timeout
// (SIGTERM to each child's process group, so tools can clean up, then SIGKILL) or
// kills it on destruction, so tests never leave processes behind. Also small helpers to pick fields
// out of a JSON line. The bodies are in process_group.cc, compiled once for the ~20
// integration sources that include this (they used <regex>, costly in each).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_runner.h"

namespace rt::integration {

class ProcessGroup {
 public:
  explicit ProcessGroup(std::string scratch_dir) : scratch_(std::move(scratch_dir)) {}
  ~ProcessGroup() { KillAll(); }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv (argv[0] a path) with extra environment `env` ("NAME=value").
  // Returns the index of the process.
  size_t Start(const std::vector<std::string>& argv_in, const std::vector<std::string>& env = {});

  // Seconds a process stopped at the deadline gets between SIGTERM and SIGKILL (default
  // 10: a tool's trap may tear namespaces down; a test of the grace itself sets less).
  void set_grace_s(int grace_s) { grace_s_ = grace_s; }

  // Waits for every process until `timeout_s` from now; stops the rest on timeout
  // (TerminateAll with the grace period). Returns the results in start order
  // (exit_code -1 and timed_out for stopped ones).
  std::vector<RunResult> WaitAll(int timeout_s);

  // Kills process `index` (and its group) with SIGKILL; WaitAll then reports it.
  void Kill(size_t index);

  // The pid of process `index` (the leader of its process group).
  pid_t pid(size_t index) const { return procs_[index].pid; }

  // Sends `sig` to process `index` only (not its group), as a user's kill would.
  void Signal(size_t index, int sig);

  // SIGTERM to every live process group, so tools clean up behind them (comm-bench
  // and netns-cluster tear their namespaces down in their traps); SIGKILL for what
  // is left after `grace_s` seconds.
  void TerminateAll(int grace_s);

  void KillAll();

 private:
  struct Proc {
    pid_t pid = -1;
    bool done = false, timed_out = false;
    int exit_code = -1;
    std::string out_path, err_path;
  };
  std::string scratch_;
  std::vector<Proc> procs_;
  int grace_s_ = 10;
};

// Runs one shell-free command to completion (bounded); returns its result.
RunResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                     int timeout_s, const std::vector<std::string>& env = {});

// The last line of `text` that starts with `prefix` ("" = any), without the prefix.
std::string LastLineWithPrefix(const std::string& text, const std::string& prefix);

// The first numeric value of "key": in a JSON line; NaN if absent.
double JsonNumber(const std::string& json, const std::string& key);

// The first string value of "key": in a JSON line; "" if absent.
std::string JsonString(const std::string& json, const std::string& key);

// The value of "key":"..." (without quotes) or "key":number in one flat JSON line, as
// written; "" if absent. Compare hashes and floats exactly as printed.
std::string JsonField(const std::string& json, const std::string& key);

// The non-empty lines of `text` (e.g. a metrics JSONL file).
std::vector<std::string> NonEmptyLines(const std::string& text);

// Waits (bounded) until `path` has at least `n` non-empty lines; returns whether it did.
bool WaitForLines(const std::string& path, size_t n, int timeout_s = 60);

// Ports a test process may use: [TestBasePort(), TestBasePort() + kTestPortsPerProcess).
inline constexpr int kTestPortsPerProcess = 100;

// The first of kTestPortsPerProcess loopback ports this process owns until it exits:
// block b of 200 (10000 + 100 b; all below the kernel's ephemeral range, 32768-60999
// here, where any outgoing connection could hold a port). Blocks are handed out by an
// flock on /tmp/ringtrain-test-ports/<b>.lock, held while the process lives and freed
// by the kernel when it ends, so concurrent test processes (ctest -j, other worktrees)
// never share one; the search starts at pid % 200 and takes the next free block.
int TestBasePort();

// `tools/local-ring N --base-port P --timeout T --` with T = timeout_s - 10, so the tool
// stops its peers before the caller's own timeout kills it; append the ringtrain args.
std::vector<std::string> LocalRingArgv(int peers, int base_port, int timeout_s);

// The pid of the ringtrain process whose command line holds both `a` and `b` (the
// ProcessGroup knows only the pids it started; this finds a peer by its arguments).
pid_t PidWithArgs(const std::string& a, const std::string& b);

}  // namespace rt::integration
