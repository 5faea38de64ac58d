// Signal flags for clean stops and hosts-file reloads (see stop_signals.h).
#include "train/stop_signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace rt::train {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
std::atomic<bool> g_installed{false};
constexpr int64_t kRepeatGraceNs = 3000000000;  // 3 s

std::atomic<int64_t> g_first_ns{0};

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void OnStop(int sig) {
  const int64_t now = MonotonicNs();
  if (g_stop.exchange(true)) {
    // A second signal soon after the first is the same request delivered twice (e.g.
    // Ctrl-C reaches tools/local-ring and the peers, which then forwards SIGTERM);
    // later, the user insists: exit at once.
    if (now - g_first_ns.load() > kRepeatGraceNs) _exit(128 + sig);
    return;
  }
  g_first_ns.store(now);
  g_stop_signal.store(sig);
  static const char kMsg[] =
      "ringtrain: stop requested: stopping at the next step boundary, or now if not "
      "training yet (send again after 3 s to exit at once)\n";
  ssize_t ignored = write(2, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
}

void OnHup(int) { g_reload.store(true); }

}  // namespace

void InstallStopSignalHandlers() {
  if (g_installed.exchange(true)) return;
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = OnHup;
  sigaction(SIGHUP, &sa, nullptr);
}

bool StopRequested() { return g_stop.load(); }
int StopSignal() { return g_stop_signal.load(); }
void RequestStop() { g_stop.store(true); }
void ClearStopRequest() {
  g_stop.store(false);
  g_stop_signal.store(0);
}
bool TakeHostsReloadRequest() { return g_reload.exchange(false); }

}  // namespace rt::train
