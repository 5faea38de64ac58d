// The bodies of process_group.h: starting, waiting for and stopping test processes,
// JSON-line fields, test ports. Compiled once instead of in every integration source.
#include "process_group.h"

#include <regex>

namespace rt::integration {

size_t ProcessGroup::Start(const std::vector<std::string>& argv_in,
                           const std::vector<std::string>& env) {
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

std::vector<RunResult> ProcessGroup::WaitAll(int timeout_s) {
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

void ProcessGroup::Kill(size_t index) {
  const Proc& p = procs_[index];
  if (p.pid > 0 && !p.done) {
    kill(-p.pid, SIGKILL);
    kill(p.pid, SIGKILL);
  }
}

void ProcessGroup::Signal(size_t index, int sig) {
  const Proc& p = procs_[index];
  if (p.pid > 0 && !p.done) kill(p.pid, sig);
}

void ProcessGroup::TerminateAll(int grace_s) {
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

void ProcessGroup::KillAll() {
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

RunResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                     int timeout_s, const std::vector<std::string>& env) {
  ProcessGroup group(scratch_dir);
  group.Start(argv, env);
  return group.WaitAll(timeout_s)[0];
}

std::string LastLineWithPrefix(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) found = line.substr(prefix.size());
  }
  return found;
}

double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":(-?[0-9.eE+-]+)");
  if (!std::regex_search(json, m, re)) return std::nan("");
  return std::strtod(m[1].str().c_str(), nullptr);
}

std::string JsonString(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":\"([^\"]*)\"");
  return std::regex_search(json, m, re) ? m[1].str() : std::string();
}

std::string JsonField(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t pos = json.find(k);
  if (pos == std::string::npos) return "";
  pos += k.size();
  const size_t end = json.find_first_of(",}", pos);
  std::string v = json.substr(pos, end - pos);
  if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

std::vector<std::string> NonEmptyLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

bool WaitForLines(const std::string& path, size_t n, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (NonEmptyLines(ReadFile(path)).size() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int TestBasePort() {
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

std::vector<std::string> LocalRingArgv(int peers, int base_port, int timeout_s) {
  return {"/bin/bash",
          std::string(RINGTRAIN_SOURCE_DIR) + "/tools/local-ring",
          std::to_string(peers),
          "--base-port",
          std::to_string(base_port),
          "--timeout",
          std::to_string(timeout_s - 10),
          "--"};
}

pid_t PidWithArgs(const std::string& a, const std::string& b) {
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
