// netem-probe: measures what a link of the netns test bed does (there is no `ping` on
// these machines): round-trip time and loss with UDP echoes, TCP goodput and the RTT that
// TCP itself sees (TCP_INFO). Each measuring mode prints one JSON line on stdout.
//
//   netem-probe udp-echo --port P [--seconds 60]       # echo server, exits after S s
//   netem-probe udp-rtt  --to IP:PORT [--count 1000] [--interval 1ms] [--size 64]
//       -> sent, received, loss (fraction of round trips), rtt_ms_{min,mean,p50,p90,max}
//   netem-probe tcp-sink --port P [--seconds 60] [--buffer 16777216]
//       receives one connection to EOF
//       -> bytes, seconds, mbit_s (first byte to EOF), mbit_s_steady (its second half)
//   netem-probe tcp-send --to IP:PORT [--seconds 8] [--cc bbr] [--buffer 16777216]
//       -> bytes, cc (what the socket got), rtt_ms / min_rtt_ms (TCP_INFO), retrans
//
// --buffer: the TCP socket's send and receive buffer, set explicitly as ringtrain's ring
// links do (SO_*BUFFORCE, root), so the probe measures the link and not the kernel's
// autotuning cap (net.ipv4.tcp_wmem's last field, 4 MB here: 4 MB per 80 ms round trip
// is 400 Mbit/s, less the kernel's overhead; a 1 Gbit/s link at 80 ms needs 10 MB in
// flight). 0 leaves the kernel's autotuning.
//
// UDP probes carry a sequence number and send time; a reply that comes after the last
// probe's wait (1 s, or 4x the largest RTT seen) counts as lost; replies that are not
// ours (wrong size or sequence) are ignored.
#include <arpa/inet.h>
#include <linux/tcp.h>  // (not netinet/tcp.h: its tcp_info has no tcpi_min_rtt)
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "netem_args.h"

namespace {

using netem::Die;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

sockaddr_in ParseEndpoint(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) Die("--to must be IPv4:PORT, got '" + text + "'");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, text.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    Die("--to: '" + text.substr(0, colon) + "' is not an IPv4 address");
  addr.sin_port =
      htons(static_cast<uint16_t>(netem::ParseInt(text.substr(colon + 1), 1, 65535, "--to port")));
  return addr;
}

sockaddr_in AnyPort(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int OpenSocket(int type) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) Die(std::string("socket: ") + strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  return fd;
}

void BindOrDie(int fd, int port) {
  sockaddr_in addr = AnyPort(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    Die("bind to port " + std::to_string(port) + ": " + strerror(errno));
}

struct Options {
  std::string to;
  int port = 0;
  double seconds = -1;
  int64_t count = 1000, size = 64;
  int64_t interval_ns = 1000000;
  std::string cc = "bbr";
  int64_t buffer_bytes = 16 << 20;
};

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Die(flag + " needs a value");
    const std::string v = argv[i + 1];
    if (flag == "--to") {
      o.to = v;
    } else if (flag == "--port") {
      o.port = static_cast<int>(netem::ParseInt(v, 1, 65535, "--port"));
    } else if (flag == "--seconds") {
      o.seconds = static_cast<double>(netem::ParseInt(v, 1, 3600, "--seconds"));
    } else if (flag == "--count") {
      o.count = netem::ParseInt(v, 1, 1000000, "--count");
    } else if (flag == "--size") {
      o.size = netem::ParseInt(v, 16, 1400, "--size");
    } else if (flag == "--interval") {
      o.interval_ns = netem::ParseDurationNs(v, "--interval");
    } else if (flag == "--cc") {
      o.cc = v;
    } else if (flag == "--buffer") {
      o.buffer_bytes = netem::ParseInt(v, 0, 1 << 30, "--buffer");
    } else {
      Die("unknown flag '" + flag + "'");
    }
  }
  return o;
}

int UdpEcho(const Options& o) {
  if (o.port == 0) Die("udp-echo needs --port");
  int fd = OpenSocket(SOCK_DGRAM);
  BindOrDie(fd, o.port);
  const int64_t end = NowNs() + static_cast<int64_t>((o.seconds > 0 ? o.seconds : 60) * 1e9);
  char buf[2048];
  for (int64_t now = NowNs(); now < end; now = NowNs()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>((end - now) / 1000000 + 1, 1000))) <= 0)
      continue;
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n > 0) sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
  close(fd);
  return 0;
}

int UdpRtt(const Options& o) {
  sockaddr_in to = ParseEndpoint(o.to);
  int fd = OpenSocket(SOCK_DGRAM);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0)
    Die(std::string("connect: ") + strerror(errno));
  struct Probe {
    uint64_t seq;
    int64_t sent_ns;
  };
  std::vector<double> rtts_ms;
  std::vector<char> seen(static_cast<size_t>(o.count), 0);
  std::vector<char> buf(static_cast<size_t>(o.size), 0);
  int64_t sent = 0, next_send = NowNs(), deadline = -1, max_rtt_ns = 0;
  while (true) {
    const int64_t now = NowNs();
    if (sent < o.count && now >= next_send) {
      Probe p{static_cast<uint64_t>(sent), now};
      memcpy(buf.data(), &p, sizeof(p));
      if (send(fd, buf.data(), buf.size(), 0) < 0 && errno != ECONNREFUSED)
        Die(std::string("send: ") + strerror(errno));
      ++sent;
      next_send += o.interval_ns;
      if (sent == o.count) deadline = now + std::max<int64_t>(1000000000, 4 * max_rtt_ns);
      continue;
    }
    if (deadline >= 0 && now >= deadline) break;
    const int64_t until = sent < o.count ? next_send : deadline;
    timespec t{static_cast<time_t>((until - now) / 1000000000),
               static_cast<long>((until - now) % 1000000000)};
    pollfd pfd{fd, POLLIN, 0};
    if (ppoll(&pfd, 1, &t, nullptr) <= 0) continue;
    char in[2048];
    const ssize_t n = recv(fd, in, sizeof(in), 0);
    if (n != o.size) continue;
    Probe p;
    memcpy(&p, in, sizeof(p));
    if (p.seq >= static_cast<uint64_t>(o.count) || seen[p.seq]) continue;
    seen[p.seq] = 1;
    const int64_t rtt = NowNs() - p.sent_ns;
    max_rtt_ns = std::max(max_rtt_ns, rtt);
    rtts_ms.push_back(static_cast<double>(rtt) / 1e6);
  }
  close(fd);
  std::sort(rtts_ms.begin(), rtts_ms.end());
  auto pct = [&](double q) {
    return rtts_ms.empty()
               ? -1.0
               : rtts_ms[static_cast<size_t>(q * static_cast<double>(rtts_ms.size() - 1))];
  };
  double mean = 0;
  for (double r : rtts_ms) mean += r;
  mean = rtts_ms.empty() ? -1 : mean / static_cast<double>(rtts_ms.size());
  printf(
      "{\"sent\":%lld,\"received\":%zu,\"loss\":%.5f,\"rtt_ms_min\":%.3f,\"rtt_ms_mean\":%.3f,"
      "\"rtt_ms_p50\":%.3f,\"rtt_ms_p90\":%.3f,\"rtt_ms_max\":%.3f}\n",
      static_cast<long long>(sent), rtts_ms.size(),
      1.0 - static_cast<double>(rtts_ms.size()) / static_cast<double>(sent), pct(0), mean, pct(0.5),
      pct(0.9), pct(1));
  return 0;
}

// Sets fd's send and receive buffers to `bytes` (0: autotuning); a refusal is said once.
void SetBuffers(int fd, int64_t bytes) {
  if (bytes == 0) return;
  const int v = static_cast<int>(bytes);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) != 0)
    fprintf(stderr, "netem-probe: --buffer %d refused (%s): the kernel's autotuning is used\n", v,
            strerror(errno));
}

int TcpSink(const Options& o) {
  if (o.port == 0) Die("tcp-sink needs --port");
  int lfd = OpenSocket(SOCK_STREAM);
  BindOrDie(lfd, o.port);
  SetBuffers(lfd, o.buffer_bytes);  // before listen: the window scale is chosen at SYN
  listen(lfd, 1);
  pollfd p{lfd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>((o.seconds > 0 ? o.seconds : 60) * 1000)) <= 0)
    Die("tcp-sink: no connection in time");
  int fd = accept(lfd, nullptr, nullptr);
  if (fd < 0) Die(std::string("accept: ") + strerror(errno));
  std::vector<char> buf(1 << 20);
  // (time, bytes so far) every ~10 ms, to take the rate of the second half.
  std::vector<std::pair<int64_t, uint64_t>> marks;
  uint64_t total = 0;
  while (true) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Die(std::string("recv: ") + strerror(errno));
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    const int64_t now = NowNs();
    if (marks.empty() || now - marks.back().first > 10000000) marks.emplace_back(now, total);
  }
  const int64_t end = NowNs();
  marks.emplace_back(end, total);
  const int64_t start = marks.front().first;
  const int64_t half = start + (end - start) / 2;
  auto mid = std::lower_bound(marks.begin(), marks.end(), std::make_pair(half, uint64_t{0}));
  const double whole_s = static_cast<double>(end - start) / 1e9;
  const double half_s = static_cast<double>(end - mid->first) / 1e9;
  printf("{\"bytes\":%llu,\"seconds\":%.3f,\"mbit_s\":%.2f,\"mbit_s_steady\":%.2f}\n",
         static_cast<unsigned long long>(total), whole_s,
         whole_s > 0 ? static_cast<double>(total) * 8 / whole_s / 1e6 : 0.0,
         half_s > 0 ? static_cast<double>(total - mid->second) * 8 / half_s / 1e6 : 0.0);
  close(fd);
  close(lfd);
  return 0;
}

int TcpSend(const Options& o) {
  sockaddr_in to = ParseEndpoint(o.to);
  int fd = OpenSocket(SOCK_STREAM);
  SetBuffers(fd, o.buffer_bytes);
  // Ask for the congestion control before connecting; say what the socket got.
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o.cc.data(),
                 static_cast<socklen_t>(o.cc.size())) != 0)
    fprintf(stderr, "netem-probe: TCP_CONGESTION %s: %s (kernel default used)\n", o.cc.c_str(),
            strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0)
    Die(std::string("connect: ") + strerror(errno));
  std::vector<char> buf(1 << 20, 'x');
  const int64_t end = NowNs() + static_cast<int64_t>((o.seconds > 0 ? o.seconds : 8) * 1e9);
  uint64_t total = 0;
  while (NowNs() < end) {
    const ssize_t n = send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Die(std::string("send: ") + strerror(errno));
    total += static_cast<uint64_t>(n);
  }
  tcp_info info{};
  socklen_t len = sizeof(info);
  getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len);
  char cc[16] = {};
  len = sizeof(cc) - 1;
  getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len);
  shutdown(fd, SHUT_WR);
  char sink[256];
  while (recv(fd, sink, sizeof(sink), 0) > 0) {
  }
  close(fd);
  printf("{\"bytes\":%llu,\"cc\":\"%s\",\"rtt_ms\":%.3f,\"min_rtt_ms\":%.3f,\"retrans\":%u}\n",
         static_cast<unsigned long long>(total), cc, info.tcpi_rtt / 1e3, info.tcpi_min_rtt / 1e3,
         info.tcpi_total_retrans);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    Die("usage: netem-probe udp-echo|udp-rtt|tcp-sink|tcp-send [flags] (see the source's first "
        "comment)");
  const std::string mode = argv[1];
  const Options o = ParseOptions(argc, argv);
  // Echo timing must not include waiting for a time slice (see TryRealtime).
  if (mode == "udp-echo" || mode == "udp-rtt") netem::TryRealtime("netem-probe");
  if (mode == "udp-echo") return UdpEcho(o);
  if (mode == "udp-rtt") {
    if (o.to.empty()) Die("udp-rtt needs --to IP:PORT");
    return UdpRtt(o);
  }
  if (mode == "tcp-sink") return TcpSink(o);
  if (mode == "tcp-send") {
    if (o.to.empty()) Die("tcp-send needs --to IP:PORT");
    return TcpSend(o);
  }
  Die("unknown mode '" + mode + "' (udp-echo, udp-rtt, tcp-sink, tcp-send)");
}
