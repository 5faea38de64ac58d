// Test helper: starts several commands at once (each with stdout/stderr in files),
// waits for all of them with one deadline, and stops what is left on timeout
// (SIGTERM to each child's process group, so tools can clean up, then SIGKILL) or
// kills it on destruction, so tests never leave processes behind. Also small helpers to pick fields
// out of a JSON line.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
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
  size_t Start(const std::vector<std::string>& argv_in, const std::vector<std::string>& env = {}) {
    const size_t index = procs_.size();
    Proc p;
    p.out_path = scratch_ + "/proc" + std::to_string(index) + ".out";
    p.err_path = scratch_ + "/proc" + std::to_string(index) + ".err";
    std::vector<std::string> argv_s = argv_in;
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    p.pid = fork();
    if (p.pid == 0) {
      setpgid(0, 0);  // own group: a timeout kills its children too
      int out = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      for (const std::string& e : env) putenv(strdup(e.c_str()));
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (p.pid > 0) setpgid(p.pid, p.pid);
    procs_.push_back(p);
    return index;
  }

  // Seconds a process stopped at the deadline gets between SIGTERM and SIGKILL (default
  // 10: a tool's trap may tear namespaces down; a test of the grace itself sets less).
  void set_grace_s(int grace_s) { grace_s_ = grace_s; }

  // Waits for every process until `timeout_s` from now; stops the rest on timeout
  // (TerminateAll with the grace period). Returns the results in start order
  // (exit_code -1 and timed_out for stopped ones).
  std::vector<RunResult> WaitAll(int timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    std::vector<RunResult> results(procs_.size());
    size_t left = 0;
    for (const Proc& p : procs_) left += p.pid > 0 && !p.done;
    while (left > 0) {
      for (size_t i = 0; i < procs_.size(); ++i) {
        Proc& p = procs_[i];
        if (p.pid <= 0 || p.done) continue;
        int status = 0;
        if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
          p.done = true;
          p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
          --left;
        }
      }
      if (left > 0 && std::chrono::steady_clock::now() > deadline) {
        for (Proc& p : procs_) {
          if (p.pid > 0 && !p.done) p.timed_out = true;
        }
        TerminateAll(grace_s_);
        break;
      }
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (size_t i = 0; i < procs_.size(); ++i) {
      results[i].exit_code = procs_[i].exit_code;
      results[i].timed_out = procs_[i].timed_out;
      results[i].out = ReadFile(procs_[i].out_path);
      results[i].err = ReadFile(procs_[i].err_path);
    }
    return results;
  }

  // Kills process `index` (and its group) with SIGKILL; WaitAll then reports it.
  void Kill(size_t index) {
    const Proc& p = procs_[index];
    if (p.pid > 0 && !p.done) {
      kill(-p.pid, SIGKILL);
      kill(p.pid, SIGKILL);
    }
  }

  // The pid of process `index` (the leader of its process group).
  pid_t pid(size_t index) const { return procs_[index].pid; }

  // Sends `sig` to process `index` only (not its group), as a user's kill would.
  void Signal(size_t index, int sig) {
    const Proc& p = procs_[index];
    if (p.pid > 0 && !p.done) kill(p.pid, sig);
  }

  // SIGTERM to every live process group, so tools clean up behind them (comm-bench
  // and netns-cluster tear their namespaces down in their traps); SIGKILL for what
  // is left after `grace_s` seconds.
  void TerminateAll(int grace_s) {
    std::vector<pid_t> groups;
    for (Proc& p : procs_) {
      if (p.pid > 0 && !p.done) {
        groups.push_back(p.pid);
        kill(-p.pid, SIGTERM);
        kill(p.pid, SIGTERM);
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
    for (;;) {
      size_t left = 0;
      for (Proc& p : procs_) {
        if (p.pid <= 0 || p.done) continue;
        int status = 0;
        if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
          p.done = true;  // exit_code stays -1: it was stopped
        } else {
          ++left;
        }
      }
      if (left == 0 || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (pid_t group : groups) kill(-group, SIGKILL);  // children left by a stopped leader
    KillAll();                                         // leaders still running
  }

  void KillAll() {
    for (Proc& p : procs_) {
      if (p.pid > 0 && !p.done) {
        kill(-p.pid, SIGKILL);
        kill(p.pid, SIGKILL);
        int status = 0;
        waitpid(p.pid, &status, 0);
        p.done = true;
      }
    }
  }

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
inline RunResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                            int timeout_s, const std::vector<std::string>& env = {}) {
  ProcessGroup group(scratch_dir);
  group.Start(argv, env);
  return group.WaitAll(timeout_s)[0];
}

// The last line of `text` that starts with `prefix` ("" = any), without the prefix.
inline std::string LastLineWithPrefix(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) found = line.substr(prefix.size());
  }
  return found;
}

// The first numeric value of "key": in a JSON line; NaN if absent.
inline double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":(-?[0-9.eE+-]+)");
  if (!std::regex_search(json, m, re)) return std::nan("");
  return std::strtod(m[1].str().c_str(), nullptr);
}

// The first string value of "key": in a JSON line; "" if absent.
inline std::string JsonString(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":\"([^\"]*)\"");
  return std::regex_search(json, m, re) ? m[1].str() : std::string();
}

// The value of "key":"..." (without quotes) or "key":number in one flat JSON line, as
// written; "" if absent. Compare hashes and floats exactly as printed.
inline std::string JsonField(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t pos = json.find(k);
  if (pos == std::string::npos) return "";
  pos += k.size();
  const size_t end = json.find_first_of(",}", pos);
  std::string v = json.substr(pos, end - pos);
  if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

// The non-empty lines of `text` (e.g. a metrics JSONL file).
inline std::vector<std::string> NonEmptyLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Waits (bounded) until `path` has at least `n` non-empty lines; returns whether it did.
inline bool WaitForLines(const std::string& path, size_t n, int timeout_s = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (NonEmptyLines(ReadFile(path)).size() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Ports a test process may use: [TestBasePort(), TestBasePort() + kTestPortsPerProcess).
inline constexpr int kTestPortsPerProcess = 100;

// The first of kTestPortsPerProcess loopback ports this process owns until it exits:
// block b of 200 (10000 + 100 b; all below the kernel's ephemeral range, 32768-60999
// here, where any outgoing connection could hold a port). Blocks are handed out by an
// flock on /tmp/ringtrain-test-ports/<b>.lock, held while the process lives and freed
// by the kernel when it ends, so concurrent test processes (ctest -j, other worktrees)
// never share one; the search starts at pid % 200 and takes the next free block.
inline int TestBasePort() {
  static const int base = [] {
    constexpr int kBlocks = 200;
    const std::string dir = "/tmp/ringtrain-test-ports";
    if (mkdir(dir.c_str(), 01777) == 0) chmod(dir.c_str(), 01777);  // any user's tests
    const int first = static_cast<int>(getpid() % kBlocks);
    for (int k = 0; k < kBlocks; ++k) {
      const int b = (first + k) % kBlocks;
      const std::string path = dir + "/" + std::to_string(b) + ".lock";
      const int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) continue;  // another user's lock file: not ours to take
      if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return 10000 + kTestPortsPerProcess * b;  // fd stays open
      close(fd);
    }
    return 10000 + kTestPortsPerProcess * first;  // all taken: the old pid rule
  }();
  return base;
}

// `tools/local-ring N --base-port P --timeout T --` with T = timeout_s - 10, so the tool
// stops its peers before the caller's own timeout kills it; append the ringtrain args.
inline std::vector<std::string> LocalRingArgv(int peers, int base_port, int timeout_s) {
  return {"/bin/bash",
          std::string(RINGTRAIN_SOURCE_DIR) + "/tools/local-ring",
          std::to_string(peers),
          "--base-port",
          std::to_string(base_port),
          "--timeout",
          std::to_string(timeout_s - 10),
          "--"};
}

// The pid of the ringtrain process whose command line holds both `a` and `b` (the
// ProcessGroup knows only the pids it started; this finds a peer by its arguments).
inline pid_t PidWithArgs(const std::string& a, const std::string& b) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find("ringtrain") != std::string::npos && cmdline.find(a) != std::string::npos &&
        cmdline.find(b) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

}  // namespace rt::integration
