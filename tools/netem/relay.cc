// netem-relay: a user-space packet relay that gives one Ethernet link of the netns test
// bed (tools/netns-cluster) a delay, jitter and random loss, because this kernel has no
// netem qdisc. It joins two interfaces A and B of one network namespace (the ends of two
// veth pairs that nothing else uses): every frame received on A is sent out of B after
// its delay, and every frame received on B out of A. Packets, not connections, are
// delayed, so the senders' TCP sees the round trip and the losses (a relay that
// terminated TCP would hide both from congestion control and windows).
//
//   netem-relay --a IFACE --b IFACE [--delay 20ms] [--jitter 2ms] [--loss 0.05%]
//               [--queue-bytes 16777216] [--seed N] [--realtime 1|0] [--control FILE]
//
// --seed 0 (the default) draws a seed from the kernel's random pool (getrandom), so the
// relays of one cluster draw independent losses and jitters (a seed from the clock gave
// every relay started in the same second the same stream); the seed is printed with the
// counters, and --seed replays it.
//
// Per direction (A->B and B->A alike):
//   - delay: every packet is held `delay` + U(-jitter/2, +jitter/2) after it was read
//     (uniform jitter, never below 0);
//   - order: packets leave in the order they came (a packet is never released before the
//     one read before it: due = max(sampled due, previous due)). So there is no
//     reordering, and at high packet rates the jitter of back-to-back packets is not
//     independent (a burst leaves with the largest delay sampled in it);
//   - loss: each wire packet is dropped with probability `loss` (Bernoulli, independent);
//   - memory: at most `queue-bytes` of packets wait per direction; packets past that are
//     dropped (tail drop), and counted.
// Rate is not the relay's job: tc tbf on the interfaces shapes it (a frame the relay sends
// passes the egress qdisc of the interface it leaves by; a full qdisc drops it, like a
// router's queue, and that is counted).
//
// Limits: frames are read with their virtio-net header (PACKET_VNET_HDR), so a TSO/GSO
// "super-packet" of up to 64 KB passes as one unit and is delayed as one (its segments
// would have left back to back anyway). Loss is drawn per wire segment: a TCP/IPv4 GSO
// packet hit by a loss is split (gso_split.h) and only the lost segments are dropped;
// other GSO packets (IPv6, UDP) hit by a loss are dropped whole, which over-counts their
// losses (counters count segments). One thread per link; the delay's precision is that of the
// scheduler: it runs as a real-time (SCHED_FIFO) process by default so that builds on
// the same cores do not add milliseconds; without that privilege, or when real-time
// processes hold the cores, a descheduled relay delays packets more, never less. IPv4/IPv6
// agnostic: it never parses past the Ethernet header.
//
// On SIGUSR1 it prints one JSON line of counters so far to stderr (tests compare them with
// what a probe measured: every loss they count was drawn here); on exit (SIGTERM, SIGINT)
// it prints the line again and exits 0;
// on SIGHUP it rereads --control FILE, one line "DELAY_NS JITTER_NS LOSS" (what
// `tools/netns-cluster set` writes), and applies it to the frames read from then on: those
// already queued keep their due times, and order is still kept, so a shorter delay lets
// new frames leave only after the old queue has drained (as on a route that changed, no
// reordering); a malformed or out-of-range file is reported on stderr and ignored (the
// link keeps its values: a typo must not cut it). The queue limit stays what it was;
// if an interface disappears (its veth pair deleted) it exits 1 within a second; a link
// set down (tools/netns-partition) only drops the frames sent meanwhile.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "gso_split.h"
#include "netem_args.h"

namespace {

volatile sig_atomic_t g_stop = 0, g_report = 0, g_reload = 0;
void OnSignal(int) { g_stop = 1; }
void OnReport(int) { g_report = 1; }
void OnReload(int) { g_reload = 1; }

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Largest frame read: a 64 KB GSO packet, its Ethernet header and the virtio-net header.
// Anything longer is truncated by the kernel, dropped here and counted.
constexpr size_t kMaxFrame = 65536 + 256;
constexpr int kBatch = 32;
// (struct virtio_net_hdr: linux/virtio_net.h cannot be included from C++, a member is
// named `class`; see gso_split.h.)
using netem::kVnetHdrBytes;

struct Packet {
  int64_t due_ns;
  std::vector<uint8_t> bytes;  // virtio_net_hdr then the Ethernet frame
};

struct Counters {
  uint64_t packets = 0, bytes = 0, lost = 0, overflow = 0, truncated = 0, send_drops = 0;
};

// One direction: frames read from `in` wait in `queue` until due, then leave by `out`.
struct Direction {
  const char* name;
  int in = -1, out = -1;
  std::deque<Packet> queue;
  size_t queued_bytes = 0;
  int64_t last_due_ns = 0;
  bool blocked = false;  // the last send would block: wait for POLLOUT on `out`
  Counters c;
};

int OpenPacketSocket(const std::string& iface) {
  const unsigned index = if_nametoindex(iface.c_str());
  if (index == 0) netem::Die("no interface '" + iface + "' in this namespace");
  // Protocol 0 first, then bind with ETH_P_ALL: no frames of other interfaces queue up
  // between socket() and bind().
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) netem::Die("socket(AF_PACKET): " + std::string(strerror(errno)) + " (needs root)");
  int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0)
    netem::Die("PACKET_VNET_HDR: " + std::string(strerror(errno)));
  // Our own sends on this interface must not come back as received frames.
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0)
    netem::Die("PACKET_IGNORE_OUTGOING: " + std::string(strerror(errno)));
  int buf = 16 << 20;  // absorbs bursts while the thread sleeps; FORCE: above rmem_max
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf));
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    netem::Die("bind to '" + iface + "': " + strerror(errno));
  return fd;
}

class Relay {
 public:
  explicit Relay(const netem::RelayArgs& args) : args_(args), rng_(args.seed) {
    buffers_.assign(kBatch, std::vector<uint8_t>(kMaxFrame));
  }

  int Run(int a, int b) {
    dirs_[0] = Direction{"a_to_b", a, b, {}, 0, 0, false, {}};
    dirs_[1] = Direction{"b_to_a", b, a, {}, 0, 0, false, {}};
    sigset_t run_mask;  // signals are blocked except inside ppoll: no lost wake-up
    sigprocmask(SIG_BLOCK, nullptr, &run_mask);
    sigdelset(&run_mask, SIGTERM);
    sigdelset(&run_mask, SIGINT);
    sigdelset(&run_mask, SIGUSR1);
    sigdelset(&run_mask, SIGHUP);
    int64_t last_check_ns = NowNs();
    while (!g_stop) {
      if (g_report) {
        g_report = 0;
        PrintCounters();
      }
      if (g_reload) {
        g_reload = 0;
        Reload();
      }
      int64_t next_due = -1;
      for (Direction& d : dirs_) {
        if (!Release(d)) return 1;
        if (!d.queue.empty() && !d.blocked && (next_due < 0 || d.queue.front().due_ns < next_due))
          next_due = d.queue.front().due_ns;
      }
      pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      // Direction 0 sends on b, direction 1 on a.
      if (dirs_[1].blocked) fds[0].events |= POLLOUT;
      if (dirs_[0].blocked) fds[1].events |= POLLOUT;
      timespec timeout{1, 0};
      if (next_due >= 0) {
        const int64_t wait = std::max<int64_t>(0, next_due - NowNs());
        timeout = {static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
      }
      const int n = ppoll(fds, 2, &timeout, &run_mask);
      if (n < 0) {
        if (errno == EINTR) continue;
        netem::Die("ppoll: " + std::string(strerror(errno)));
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents & POLLNVAL) netem::Die("ppoll: invalid socket");
        if (fds[i].revents & POLLERR) {
          // ENETDOWN when a link is set down (tools/netns-partition): reading SO_ERROR
          // clears it; frames sent meanwhile are dropped, as on a pulled cable.
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
      if (NowNs() - last_check_ns > 1000000000) {  // an interface deleted: nothing to relay
        last_check_ns = NowNs();
        for (const std::string* iface : {&args_.a, &args_.b}) {
          if (if_nametoindex(iface->c_str()) == 0) {
            fprintf(stderr, "netem-relay: interface %s is gone\n", iface->c_str());
            PrintCounters();
            return 1;
          }
        }
      }
      if (fds[1].revents & POLLOUT) dirs_[0].blocked = false;
      if (fds[0].revents & POLLOUT) dirs_[1].blocked = false;
      if ((fds[0].revents & POLLIN) && !Receive(dirs_[0])) return 1;
      if ((fds[1].revents & POLLIN) && !Receive(dirs_[1])) return 1;
    }
    PrintCounters();
    return 0;
  }

 private:
  // Reads what is waiting on d.in (up to one batch) into d's queue.
  bool Receive(Direction& d) {
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    for (int i = 0; i < kBatch; ++i) {
      iov[i] = {buffers_[i].data(), buffers_[i].size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = recvmmsg(d.in, msgs, kBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return true;
      fprintf(stderr, "netem-relay: recv (%s): %s\n", d.name, strerror(errno));
      PrintCounters();
      return false;
    }
    const int64_t now = NowNs();
    for (int i = 0; i < n; ++i) {
      const size_t len = msgs[i].msg_len;
      if (len > kMaxFrame || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
        ++d.c.truncated;
        continue;
      }
      if (len <= kVnetHdrBytes) continue;
      const uint8_t* frame = buffers_[i].data();
      const size_t segments = netem::GsoSegments(frame, len);
      d.c.packets += segments;
      d.c.bytes += len - kVnetHdrBytes;
      // Loss acts on wire packets: a GSO packet hit by a loss is split and only the lost
      // segments are dropped (TCP/IPv4; others are dropped whole if any segment is).
      split_.clear();
      bool whole = true;
      if (args_.loss > 0) {
        keep_.assign(segments, true);
        size_t lost = 0;
        for (size_t s = 0; s < segments; ++s) {
          if (uniform_(rng_) < args_.loss) keep_[s] = false, ++lost;
        }
        if (lost == segments ||
            (lost > 0 && (segments == 1 || !netem::SplitTcp4Gso(frame, len, keep_, &split_)))) {
          d.c.lost += segments;
          continue;
        }
        d.c.lost += lost;
        whole = lost == 0;
      }
      if (d.queued_bytes + len > args_.queue_bytes) {
        d.c.overflow += segments;
        continue;
      }
      int64_t delay = args_.delay_ns;
      if (args_.jitter_ns > 0)
        delay +=
            static_cast<int64_t>((uniform_(rng_) - 0.5) * static_cast<double>(args_.jitter_ns));
      int64_t due = now + std::max<int64_t>(0, delay);
      if (due < d.last_due_ns) due = d.last_due_ns;  // keep the order packets came in
      d.last_due_ns = due;
      if (whole) {
        d.queue.push_back(Packet{due, std::vector<uint8_t>(frame, frame + len)});
        d.queued_bytes += len;
      } else {
        for (std::vector<uint8_t>& seg : split_) {
          d.queued_bytes += seg.size();
          d.queue.push_back(Packet{due, std::move(seg)});
        }
      }
    }
    return true;
  }

  // Sends every due packet of d, until one would block.
  bool Release(Direction& d) {
    if (d.blocked) return true;
    const int64_t now = NowNs();
    while (!d.queue.empty() && d.queue.front().due_ns <= now) {
      Packet& p = d.queue.front();
      const ssize_t sent = send(d.out, p.bytes.data(), p.bytes.size(), MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          d.blocked = true;
          return true;
        }
        if (errno == EINTR) continue;
        if (errno == ENOBUFS || errno == EMSGSIZE || errno == EINVAL || errno == ENETDOWN ||
            errno == ENXIO) {
          // The egress qdisc (tbf) was full, a frame the device refuses, or the link is
          // down: dropped, as a router would.
          ++d.c.send_drops;
        } else {
          fprintf(stderr, "netem-relay: send (%s): %s\n", d.name, strerror(errno));
          PrintCounters();
          return false;
        }
      }
      d.queued_bytes -= p.bytes.size();
      d.queue.pop_front();
    }
    return true;
  }

  // Applies --control's "DELAY_NS JITTER_NS LOSS" (see the file comment), or says why not.
  void Reload() {
    if (args_.control.empty()) {
      fprintf(stderr, "netem-relay: SIGHUP without --control: nothing to reload\n");
      return;
    }
    FILE* f = fopen(args_.control.c_str(), "r");
    if (f == nullptr) {
      fprintf(stderr, "netem-relay: control file %s: %s; values kept\n", args_.control.c_str(),
              strerror(errno));
      return;
    }
    long long delay = -1, jitter = -1;
    double loss = -1;
    char extra = 0;
    const int n = fscanf(f, "%lld %lld %lf %c", &delay, &jitter, &loss, &extra);
    fclose(f);
    if (n != 3 || delay < 0 || delay > 10'000'000'000LL || jitter < 0 || jitter > 2 * delay ||
        !(loss >= 0 && loss <= 0.5)) {
      fprintf(stderr,
              "netem-relay: control file %s must hold \"DELAY_NS JITTER_NS LOSS\" (delay <= 10 "
              "s, jitter <= 2 x delay, loss in 0..0.5); ignored, values kept\n",
              args_.control.c_str());
      return;
    }
    args_.delay_ns = delay;
    args_.jitter_ns = jitter;
    args_.loss = loss;
    fprintf(stderr, "netem-relay: now delay %lld us, jitter %lld us, loss %.6f\n", delay / 1000,
            jitter / 1000, loss);
  }

  void PrintCounters() const {
    std::string line =
        "{\"relay\":\"" + args_.a + "<->" + args_.b + "\",\"seed\":" + std::to_string(args_.seed);
    for (const Direction& d : dirs_) {
      char buf[256];
      snprintf(buf, sizeof(buf),
               ",\"%s\":{\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"lost\":%" PRIu64
               ",\"overflow\":%" PRIu64 ",\"truncated\":%" PRIu64 ",\"send_drops\":%" PRIu64
               ",\"queued\":%zu}",
               d.name, d.c.packets, d.c.bytes, d.c.lost, d.c.overflow, d.c.truncated,
               d.c.send_drops, d.queue.size());
      line += buf;
    }
    fprintf(stderr, "%s}\n", line.c_str());
    fflush(stderr);
  }

  netem::RelayArgs args_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<bool> keep_;                   // per segment of the packet at hand
  std::vector<std::vector<uint8_t>> split_;  // its kept segments, when split
  Direction dirs_[2];
};

}  // namespace

int main(int argc, char** argv) {
  const netem::RelayArgs args = netem::ParseRelayArgs(argc, argv);
  // Block the stop signals (ppoll unblocks them while it waits), then handle them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGUSR1);
  sigaddset(&stop, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = OnReport;
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = OnReload;
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (args.realtime) netem::TryRealtime("netem-relay");
  prctl(PR_SET_TIMERSLACK, 1000UL);  // wake within ~1 us of a packet's due time, not 50 us
  const int a = OpenPacketSocket(args.a);
  const int b = OpenPacketSocket(args.b);
  Relay relay(args);
  const int rc = relay.Run(a, b);
  close(a);
  close(b);
  return rc;
}
