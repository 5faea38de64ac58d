// The bodies of fault_harness.h: the loopback fault-test cluster (start, signal, reap,
// follow metrics and logs) and the checks every fault test shares.
#include "fault_harness.h"

#include <regex>

namespace rt::integration::fault {

std::mt19937_64 SeededRng(const char* test) {
  uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^ getpid();
  if (const char* s = std::getenv("RT_FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
  MESSAGE(std::string(test) << ": random seed " << seed << " (repeat with RT_FAULT_SEED=" << seed
                            << ")");
  return std::mt19937_64(seed);
}

std::vector<std::string> FaultCluster::LoopbackEndpoints(int n, int base_port) {
  std::vector<std::string> e;
  for (int i = 0; i < n; ++i) e.push_back("127.0.0.1:" + std::to_string(base_port + i));
  return e;
}

FaultCluster::~FaultCluster() {
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

void FaultCluster::WriteHosts(int i, const std::vector<int>& entries) {
  std::string text = "# fault test hosts file\n";
  for (int e : entries) text += Endpoint(e) + "\n";
  // Written aside and renamed, as parallel-scp does: a reader never sees half a file.
  const std::string tmp = HostsPath(i) + ".tmp";
  ::rt::testing::WriteFile(tmp, text);
  std::rename(tmp.c_str(), HostsPath(i).c_str());
}

void FaultCluster::WriteHostsAll(const std::vector<int>& entries) {
  for (int i = 0; i < size(); ++i) WriteHosts(i, entries);
}

void FaultCluster::Start(int i, const std::vector<std::string>& extra) {
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

void FaultCluster::Signal(int i, int sig) {
  if (peers_[i].pid <= 0) return;
  if (!pid_namespaces_ || sig == SIGKILL) {
    ::kill(-peers_[i].pid, sig);
  } else if (const pid_t inner = InnerPid(i); inner > 0) {
    ::kill(inner, sig);
  }
}

pid_t FaultCluster::InnerPid(int i) const {
  const pid_t outer = peers_[i].pid;
  if (outer <= 0) return -1;
  const std::string children = ::rt::testing::ReadFile("/proc/" + std::to_string(outer) + "/task/" +
                                                       std::to_string(outer) + "/children");
  return children.empty() ? -1 : static_cast<pid_t>(std::atoi(children.c_str()));
}

int FaultCluster::RunOnHost(int i, const std::string& command) {
  const pid_t inner = InnerPid(i);
  if (inner <= 0) return -1;
  const std::string cmd = "nsenter -t " + std::to_string(inner) + " --pid --mount -- sh -c '" +
                          command + "' </dev/null";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double FaultCluster::Kill9(int i) {
  const double t = NowS();
  Signal(i, SIGKILL);
  WaitExit(i, 10);
  return t;
}

double FaultCluster::Kill9Together(const std::vector<int>& peers) {
  const double t = NowS();
  for (int i : peers) Signal(i, SIGKILL);
  for (int i : peers) WaitExit(i, 10);
  return t;
}

bool FaultCluster::Running(int i) {
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

std::optional<int> FaultCluster::WaitExit(int i, double timeout_s) {
  const double end = NowS() + timeout_s;
  while (Running(i) && NowS() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (Running(i)) return std::nullopt;
  return peers_[i].exit_code;
}

void FaultCluster::KillAll() {
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

void FaultCluster::Poll() {
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

int64_t FaultCluster::LastStep(int i) const {
  return peers_[i].metrics.empty() ? 0 : peers_[i].metrics.back().step;
}

uint64_t FaultCluster::LastEpoch(int i) const {
  return peers_[i].metrics.empty() ? 0 : peers_[i].metrics.back().epoch;
}

bool FaultCluster::WaitUntil(const std::function<bool()>& pred, double timeout_s) {
  const double end = NowS() + timeout_s;
  while (NowS() < end) {
    Poll();
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Poll();
  return pred();
}

std::string FaultCluster::Logs(int i) const {
  std::string all;
  for (const std::string& f : peers_[i].logs) all += ::rt::testing::ReadFile(f);
  return all;
}

std::string FaultCluster::Dump(int lines) const {
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

std::optional<double> LogLineTimeS(const std::string& line) {
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

std::vector<std::pair<double, std::string>> TimedLines(const std::string& text,
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

std::vector<std::string> TinyTrainArgs(const std::string& data_dir, int steps, int global_batch) {
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

void WriteFaultData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 800;
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

Metric ReferenceRun(const std::string& dir, int n, const std::vector<std::string>& args,
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

void CheckFinal(FaultCluster& c, const std::vector<int>& live, int64_t steps, const Metric* ref,
                double timeout_s) {
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

void StopAndCompareWithUninterrupted(
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

FailureFigures WaitTrainingAgain(FaultCluster& c, int who, double t_fail, uint64_t epoch,
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

void CheckOthersHoldHash(FaultCluster& c, int who, const Metric& first) {
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

double WaitRejoined(FaultCluster& c, int who, size_t metrics_before, double t_start,
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

void Pause(FaultCluster& c, double s) {
  c.WaitUntil([] { return false; }, s);
}

}  // namespace rt::integration::fault
