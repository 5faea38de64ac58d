// Socket buffers and congestion control for ring links (see socket_tuning.h).
#include "net/socket_tuning.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "core/log.h"

namespace rt::net {
namespace {

// The last number of a /proc/sys file ("4096 131072 6291456" -> 6291456); -1 if unreadable.
long long LastNumber(const char* path) {
  std::ifstream f(path);
  long long v = -1, x;
  while (f >> x) v = x;
  return v;
}

std::string ReadWord(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// Sets one direction's buffer; returns the cap in bytes this socket ends up with.
long long TuneOne(int fd, int want, bool send) {
  const int force = send ? SO_SNDBUFFORCE : SO_RCVBUFFORCE;
  const int plain = send ? SO_SNDBUF : SO_RCVBUF;
  // The kernel doubles the value asked for (bookkeeping overhead) and reports that.
  if (setsockopt(fd, SOL_SOCKET, force, &want, sizeof(want)) == 0) return 2LL * want;
  const long long core_max =
      LastNumber(send ? "/proc/sys/net/core/wmem_max" : "/proc/sys/net/core/rmem_max");
  const long long auto_max =
      LastNumber(send ? "/proc/sys/net/ipv4/tcp_wmem" : "/proc/sys/net/ipv4/tcp_rmem");
  if (core_max < 0 || auto_max < 0) return -1;
  const long long explicit_cap = 2 * std::min<long long>(want, core_max);
  if (explicit_cap > auto_max) {
    const int ask = static_cast<int>(std::min<long long>(want, core_max));
    setsockopt(fd, SOL_SOCKET, plain, &ask, sizeof(ask));
    return explicit_cap;
  }
  return auto_max;  // autotuning goes further: leave it on
}

}  // namespace

void TuneSocketBuffers(int fd, int want_bytes) {
  if (want_bytes <= 0) return;
  const long long snd = TuneOne(fd, want_bytes, true);
  const long long rcv = TuneOne(fd, want_bytes, false);
  static std::once_flag once;
  const long long cap = std::min(snd, rcv);
  if (cap >= 0 && cap < want_bytes) {
    std::call_once(once, [&] {
      LogWarning(
          "socket buffers are capped at %.1f MB by the kernel (without CAP_NET_ADMIN): a link "
          "carries at most that per round trip (%.0f Mbit/s at 100 ms RTT). To allow %d MB: "
          "sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d "
          "net.ipv4.tcp_rmem='4096 131072 %d' net.ipv4.tcp_wmem='4096 16384 %d'",
          cap / 1e6, cap * 8 / 0.1 / 1e6, want_bytes >> 20, want_bytes, want_bytes, want_bytes,
          want_bytes);
    });
  }
}

bool SetCongestionControl(int fd, const std::string& name) {
  if (name.empty()) return true;
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                 static_cast<socklen_t>(name.size())) == 0) {
    return true;
  }
  const int err = errno;
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.insert(name).second) {
    LogWarning(
        "TCP congestion control '%s' refused by the kernel (%s): ring links use the default "
        "'%s' (allowed: %s), which slows down under random loss on internet links. To allow it: "
        "modprobe tcp_%s; sysctl -w net.ipv4.tcp_allowed_congestion_control='%s %s' (or "
        "net.ipv4.tcp_congestion_control=%s)",
        name, strerror(err), ReadWord("/proc/sys/net/ipv4/tcp_congestion_control"),
        ReadWord("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), name,
        ReadWord("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), name, name);
  }
  return false;
}

}  // namespace rt::net
