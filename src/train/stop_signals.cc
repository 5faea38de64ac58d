// Signal flags for clean stops and hosts-file reloads (see stop_signals.h).
#include "train/stop_signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <thread>

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
  // The handlers run on a thread of their own, never on a compute thread: oneDNN's
  // AVX2 sgemm kernels (gemm:jit under ONEDNN_MAX_CPU_ISA=AVX2, oneDNN 2.6) corrupt
  // the heap when a handler interrupts them (a SIGHUP every 5 ms aborted a training
  // peer in its first step with "free(): invalid pointer" inside dnnl_primitive_execute;
  // the AVX-512 kernels survived it). So this thread, and every thread it starts from
  // now on (OpenMP workers, the reducer's and the links' threads), blocks the signals;
  // a catcher thread started first keeps them unblocked and takes every delivery.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_set, sig);
  std::thread([stop_set] {
    pthread_sigmask(SIG_UNBLOCK, &stop_set, nullptr);
    for (;;) pause();  // handlers run here; the process's exit ends the thread
  }).detach();
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
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
