// Test helper: runs the built `ringtrain` binary (RINGTRAIN_BINARY) with arguments,
// captures exit code, stdout and stderr, and kills it after a timeout. Also a temp dir.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"

namespace rt::integration {

using ::rt::testing::TempDir;

using ::rt::testing::ReadFile;

struct RunResult {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  bool timed_out = false;
  std::string out, err;
};

// Runs `RINGTRAIN_BINARY args...` with stdout/stderr sent to files in `scratch_dir`
// and OMP_NUM_THREADS=1 (tiny models; the machine is shared). Kills it (SIGKILL)
// after timeout_s seconds.
inline RunResult RunRingtrain(const std::vector<std::string>& args, const std::string& scratch_dir,
                              int timeout_s = 120) {
  static int counter = 0;
  const std::string base = scratch_dir + "/run" + std::to_string(counter++);
  const std::string out_path = base + ".out", err_path = base + ".err";
  std::vector<std::string> argv_s = {RINGTRAIN_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  RunResult r;
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    setenv("OMP_NUM_THREADS", "1", 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (true) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

}  // namespace rt::integration
