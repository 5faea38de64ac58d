// Signal flags for clean stops and hosts-file reloads (see stop_signals.h).
#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace rt::train {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
std::atomic<bool> g_installed{false};

void OnStop(int sig) {
  if (g_stop.exchange(true)) _exit(128 + sig);  // the second one: the user insists
  g_stop_signal.store(sig);
  static const char kMsg[] =
      "ringtrain: stop requested: stopping at the next step boundary "
      "(send again to exit at once)\n";
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
