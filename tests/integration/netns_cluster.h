// Test helper: a tools/netns-cluster cluster that exists for the lifetime of the
// object (torn down in the destructor, also when a check fails), with a per-process
// prefix so runs in parallel and leftovers of killed runs do not collide; and why a
// machine cannot run netns tests (not root, no `ip netns` / `tc`).
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "cli_runner.h"
#include "process_group.h"

namespace rt::integration {

inline const std::string kNetnsClusterTool =
    std::string(RINGTRAIN_SOURCE_DIR) + "/tools/netns-cluster";

class NetnsCluster {
 public:
  // `tag`: 1-2 lowercase letters/digits telling clusters of one test binary apart.
  NetnsCluster(const TempDir& tmp, const std::string& tag, const std::vector<std::string>& up_args)
      : tmp_(tmp), prefix_(tag + std::to_string(getpid() % 1000)), dir_(tmp / ("netns-" + tag)) {
    Down();  // leftovers of an earlier run that was killed with this prefix
    std::vector<std::string> argv = {"/bin/bash", kNetnsClusterTool, "up"};
    argv.insert(argv.end(), up_args.begin(), up_args.end());
    up_ = RunCommand(argv, tmp_.path(), 60, Env());
  }
  ~NetnsCluster() { Down(); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const RunResult& up_result() const { return up_; }
  std::string hosts() const { return dir_ + "/hosts"; }
  std::string dir() const { return dir_; }
  const std::string& prefix() const { return prefix_; }
  std::vector<std::string> Env() const {
    return {"RT_NETNS_PREFIX=" + prefix_, "RT_NETNS_DIR=" + dir_,
            std::string("NETEM_RELAY=") + NETEM_RELAY_BINARY};
  }
  // `netns-cluster set ARGS...` (change running links: I:delay=...,loss=...).
  RunResult Set(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {"/bin/bash", kNetnsClusterTool, "set"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, tmp_.path(), 60, Env());
  }
  // Name of peer i's network namespace (for `ip netns exec NAME cmd`).
  std::string Namespace(int i) const { return prefix_ + std::to_string(i); }
  // argv to run `cmd` as peer i.
  std::vector<std::string> Exec(int i, const std::vector<std::string>& cmd) const {
    std::vector<std::string> argv = {"/bin/bash", kNetnsClusterTool, "exec", std::to_string(i),
                                     "--"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return argv;
  }

 private:
  void Down() { RunCommand({"/bin/bash", kNetnsClusterTool, "down"}, tmp_.path(), 60, Env()); }
  const TempDir& tmp_;
  std::string prefix_, dir_;
  RunResult up_;
};

// Why this machine cannot run netns tests ("" = it can).
inline std::string NetnsUnavailable(const TempDir& tmp) {
  if (geteuid() != 0) return "not root";
  RunResult r = RunCommand({"/bin/sh", "-c", "ip netns list && command -v tc"}, tmp.path(), 20);
  if (r.exit_code != 0) return "`ip netns` or `tc` unavailable: " + r.err;
  return "";
}

}  // namespace rt::integration
