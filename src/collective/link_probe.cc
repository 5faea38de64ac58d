// Link probing: tournament schedule, per-pair ping-pong and timed streams, row sharing.
#include "collective/link_probe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "collective/small_collectives.h"
#include "collective/stream_rate.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace rt::collective {
namespace {

// kGo carries the acceptor's matrix digest, kDigest the dialer's (8 bytes each).
enum Tag : uint8_t {
  kGo = 1,
  kPing = 2,
  kPong = 3,
  kStream = 4,
  kRate = 5,
  kRtt = 6,
  kAck = 7,
  kDigest = 8
};

// Buffers a probe's writes still read after its link did not close within the
// timeout (an io thread that stopped running): kept for the process's life rather
// than freed under the writer. Never seen; at most a few MB each.
void KeepForWriter(std::vector<uint8_t> payload, std::deque<std::vector<uint8_t>> outbox) {
  static std::mutex mu;
  static auto* kept =
      new std::vector<std::pair<std::vector<uint8_t>, std::deque<std::vector<uint8_t>>>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->emplace_back(std::move(payload), std::move(outbox));
}

// One side of the probe of one pair, over its own link.
class PairProbe {
 public:
  // payload_ is allocated once: queued chunks point into it until they are sent.
  PairProbe(net::Link& link, const ProbeOptions& options)
      : link_(link),
        options_(options),
        payload_(std::max<size_t>(options.max_chunk_bytes, 1024), 0x5a) {}

  // Queued data frames point into payload_ and outbox_ (an unsealed link does not copy
  // them), and a probe that ends early (an abort, a peer that died or stopped reading,
  // a malformed message) leaves its stream queued: the connection's writer thread
  // goes on reading those bytes until the socket is closed, and ~Link only posts the
  // close to the io thread. So the link is closed here, and the buffers are freed
  // only once its socket is (WaitSendsDone then returns the close's error), or kept
  // for the process's life if even that does not happen within the timeout.
  ~PairProbe() {
    net::TcpConnection& conn = link_.connection();
    if (conn.pending_data_messages() == 0) return;  // every frame handed to the kernel
    conn.Close();
    if (absl::IsDeadlineExceeded(conn.WaitSendsDone(options_.timeout))) {
      KeepForWriter(std::move(payload_), std::move(outbox_));
    }
  }
  PairProbe(const PairProbe&) = delete;
  PairProbe& operator=(const PairProbe&) = delete;

  // Dialer side: returns (rtt_s, bandwidth to peer, bandwidth from peer), or *reused
  // when both sides hold the same known matrix (`digest`, LinkMatrixDigest).
  absl::Status RunDialer(uint64_t digest, bool* reused, double* rtt_s, double* bw_out,
                         double* bw_in) {
    uint64_t theirs = 0;
    RETURN_IF_ERROR(ExpectDigest(kGo, &theirs));
    RETURN_IF_ERROR(SendMessage(kDigest, &digest, sizeof(digest)));
    if (digest != 0 && digest == theirs) {
      *reused = true;
      return Flush();
    }
    RETURN_IF_ERROR(MeasureRtt(rtt_s));
    RETURN_IF_ERROR(SendMessage(kRtt, *rtt_s));
    RETURN_IF_ERROR(SendStreams(bw_out));
    RETURN_IF_ERROR(ReceiveStreams(*rtt_s, bw_in));
    RETURN_IF_ERROR(Expect(kAck, nullptr));
    return Flush();
  }

  absl::Status RunAcceptor(uint64_t digest, bool* reused, double* rtt_s, double* bw_out,
                           double* bw_in) {
    RETURN_IF_ERROR(SendMessage(kGo, &digest, sizeof(digest)));
    uint64_t theirs = 0;
    RETURN_IF_ERROR(ExpectDigest(kDigest, &theirs));
    if (digest != 0 && digest == theirs) {
      *reused = true;
      return Flush();
    }
    for (int i = 0; i <= options_.pings; ++i) {
      RETURN_IF_ERROR(Receive());
      RETURN_IF_ERROR(CheckTag(kPing, std::max<size_t>(options_.ping_bytes, 9)));
      in_[0] = kPong;
      RETURN_IF_ERROR(SendBytes(in_));
    }
    RETURN_IF_ERROR(Expect(kRtt, rtt_s));
    RETURN_IF_ERROR(ReceiveStreams(*rtt_s, bw_in));
    RETURN_IF_ERROR(SendStreams(bw_out));
    RETURN_IF_ERROR(SendMessage(kAck, 0));
    return Flush();
  }

  uint64_t bytes_streamed() const { return bytes_streamed_; }

 private:
  absl::Status MeasureRtt(double* rtt_s) {
    std::vector<double> times;
    std::vector<uint8_t> ping(std::max<size_t>(options_.ping_bytes, 9), 0);
    ping[0] = kPing;
    for (int i = 0; i <= options_.pings; ++i) {
      std::memcpy(ping.data() + 1, &i, sizeof(i));
      Stopwatch watch;
      RETURN_IF_ERROR(SendBytes(ping));
      RETURN_IF_ERROR(Receive());
      RETURN_IF_ERROR(CheckTag(kPong, ping.size()));
      if (std::memcmp(in_.data() + 1, ping.data() + 1, ping.size() - 1) != 0) {
        return Problem("echo differs from the ping");
      }
      if (i > 0) times.push_back(watch.ElapsedSeconds());
    }
    if (times.empty()) return absl::InvalidArgumentError("link probe: pings must be >= 1");
    // The minimum: the link's own latency. The median can include queueing behind
    // other pairs' probe streams on a shared pipe (two-site layout: 10-20 ms on a
    // 0.2 ms link), which the planner would then charge to every message.
    *rtt_s = *std::min_element(times.begin(), times.end());
    return absl::OkStatus();
  }

  // The receiver drives each direction: it requests a warm-up stream, then streams
  // sized from the last rate so that their second half lasts about `stream_time` (each
  // at most kGrowth x the one before), until one is steady with a second half of at
  // least 3/4 stream_time, or reaches max_stream_bytes; it reports that stream's rate
  // (over its last three quarters, stream_rate.h) back to the sender (kRate ends the
  // direction). After kMaxStreams without a steady one it reports the median of the
  // last kMedianOf streams' rates.
  //
  // Why not size one stream from the warm-up and take its rate (as version 1 did): a
  // token-bucket shaper (tc tbf, a VPS provider's rate limit) passes its burst at full
  // speed, so a warm-up inside the burst measured a 100 Mbit/s link as fast as loopback,
  // and the stream sized from that (16 MB) took 1.3 s per direction and pair (link
  // recoveries of 5-15 s in the soak); and a stream whose first part passes inside the
  // burst reports a rate several times too high. So each stream is timed after its
  // first quarter, the estimate weighs each rate by the time it held (a burst counts
  // little), and a stream counts only when its last half ran at the rate of its last
  // three quarters (within kSteady): a burst that ran out late inside the stream shows
  // as a slower last half, and the next stream, sized from that slower rate, meets a
  // drained bucket.
  static constexpr double kGrowth = 4;
  static constexpr double kSteady = 0.15;
  static constexpr int kMaxStreams = 8;  // per direction; the sender refuses more

  // With delay (internet links), a timed half shorter than a few round trips sees the
  // sender's window arrive in bursts, one per RTT, and a stream's start is slowed by
  // its window opening: measured at 80 ms RTT and 100 Mbit/s, half the links came out at
  // 5-6 MB/s of 12. So the timed half lasts at least kRttsPerTimedHalf round trips, and
  // max_stream_bytes yields to that (up to kMaxDelayedStreamBytes). 8, not 4: with loss
  // (0.1% at 80 ms RTT: a hole of an RTT about every RTT) the estimate over the last three
  // quarters of a 16-RTT stream erred by at most 10% in simulated streams of harsher loss
  // (stream_rate_test), of an 8-RTT one by up to a third; and since such a stream is
  // steady at once, the probe takes no longer than the 4-RTT streams did (which often ran
  // all 8 streams without a steady one): 19-22 s for 4 peers at 80 ms RTT, was 21-25 s.
  static constexpr double kRttsPerTimedHalf = 8;
  static constexpr double kMaxDelayedStreamBytes = 256.0 * (1 << 20);

  absl::Status ReceiveStreams(double rtt_s, double* bw) {
    const double target_s =
        std::max(absl::ToDoubleSeconds(options_.stream_time), kRttsPerTimedHalf * rtt_s);
    const double lo = static_cast<double>(options_.min_stream_bytes);
    const double hi_base =
        static_cast<double>(std::max(options_.min_stream_bytes, options_.max_stream_bytes));
    double hi = hi_base;
    size_t bytes = options_.warmup_bytes;
    std::vector<double> rates;  // of the streams after the warm-up
    for (int stream = 0;; ++stream) {
      StreamRates t;
      RETURN_IF_ERROR(ReceiveStream(bytes, &t));
      const bool steady = std::abs(t.last_half_bps / t.window_bps - 1) <= kSteady;
      if (stream > 0) rates.push_back(t.window_bps);
      // The warm-up (stream 0: a new connection's slow start) never counts. The timed
      // window (the last three quarters) is planned at 1.5 target_s: 3/4 of it is enough.
      const bool steady_done = stream > 0 && steady && t.window_s >= 0.75 * 1.5 * target_s;
      const bool last =
          stream > 0 && (static_cast<double>(bytes) >= hi || stream + 1 == kMaxStreams);
      // A direction that never ran steady takes the median of its last kMedianOf streams
      // (a link whose rate wanders, or an estimate off by a hole, is not the last stream's
      // luck); one that reached max_stream_bytes takes that stream (the earlier, smaller
      // ones may have run inside a token bucket's burst).
      double rate = t.window_bps;
      if (!steady_done && stream + 1 == kMaxStreams) {
        rate = MedianOf(std::vector<double>(
            rates.end() - std::min<ptrdiff_t>(kMedianOf, static_cast<ptrdiff_t>(rates.size())),
            rates.end()));
      }
      LogDebug(
          "link probe with %s: stream %d of %d bytes: last 3/4 %.2f MB/s in %.1f ms, "
          "last half %.2f MB/s%s",
          link_.peer_name(), stream, bytes, t.window_bps / 1e6, t.window_s * 1e3,
          t.last_half_bps / 1e6,
          steady_done ? " (taken)"
          : last      ? absl::StrFormat(" (taken: %.2f MB/s)", rate / 1e6)
                      : "");
      if (steady_done || last) {
        *bw = rate;
        return SendMessage(kRate, *bw);
      }
      const double want =
          std::min(t.last_half_bps * 2 * target_s, kGrowth * static_cast<double>(bytes));
      if (target_s > absl::ToDoubleSeconds(options_.stream_time)) {  // sized by the RTT
        hi = std::clamp(t.last_half_bps * 2 * target_s, hi_base, kMaxDelayedStreamBytes);
      }
      bytes = static_cast<size_t>(std::clamp(want, lo, hi));
    }
  }

  // Receives one stream of about `bytes` (at least 4 chunks) and reads its rates from
  // the arrival times of its chunks (stream_rate.h: the upper hull of bytes received
  // over time, robust to the RTT-long holes that lost packets leave, and to a late
  // wake-up of this thread, which only delays arrivals).
  static constexpr uint64_t kChunksPerStream = 64;
  static constexpr ptrdiff_t kMedianOf = 3;

  absl::Status ReceiveStream(size_t bytes, StreamRates* t) {
    const uint64_t chunk = std::clamp<size_t>(bytes / kChunksPerStream, 1024, payload_.size());
    const uint64_t chunks = std::max<uint64_t>(4, (bytes + chunk - 1) / chunk);
    const uint64_t request[2] = {chunks, chunk};
    RETURN_IF_ERROR(SendMessage(kStream, request, sizeof(request)));
    std::vector<int64_t> arrival_ns(chunks);  // when chunk c had been received
    for (uint64_t c = 0; c < chunks; ++c) {
      RETURN_IF_ERROR(Receive());
      if (in_.size() != chunk) {
        return Problem(absl::StrFormat("stream chunk of %d bytes, expected %d", in_.size(), chunk));
      }
      arrival_ns[c] = NowNs();
    }
    *t = ReadStreamRates(arrival_ns, chunk);
    return absl::OkStatus();
  }

  // Sends the streams the receiver asks for until it reports the rate (kRate).
  absl::Status SendStreams(double* bw) {
    for (int stream = 0;; ++stream) {
      RETURN_IF_ERROR(Receive());
      if (!in_.empty() && in_[0] == kRate) break;
      if (stream == kMaxStreams) {
        return Problem(absl::StrFormat("asked for more than %d streams", kMaxStreams));
      }
      uint64_t request[2];
      RETURN_IF_ERROR(CheckTag(kStream, 1 + sizeof(request)));
      std::memcpy(request, in_.data() + 1, sizeof(request));
      const uint64_t chunks = request[0], chunk = request[1];
      if (chunks == 0 || chunks > 4096 || chunk == 0 || chunk > payload_.size()) {
        return Problem(
            absl::StrFormat("requested an invalid stream (%d chunks of %d bytes)", chunks, chunk));
      }
      for (uint64_t c = 0; c < chunks; ++c) {
        RETURN_IF_ERROR(
            link_.connection().SendData(absl::MakeConstSpan(payload_.data(), chunk), 0));
      }
      bytes_streamed_ += chunks * chunk;
    }
    return ParseValue(kRate, bw);
  }

  absl::Status SendMessage(Tag tag, double value) {
    return SendMessage(tag, &value, sizeof(value));
  }
  absl::Status SendMessage(Tag tag, const void* body, size_t size) {
    std::vector<uint8_t> m(1 + size);
    m[0] = tag;
    std::memcpy(m.data() + 1, body, size);
    return SendBytes(std::move(m));
  }
  // Data frames must stay valid until the sends are flushed: keep them in outbox_
  // (a deque never moves its elements).
  absl::Status SendBytes(std::vector<uint8_t> m) {
    outbox_.push_back(std::move(m));
    return link_.connection().SendData(outbox_.back(), 0);
  }
  absl::Status Flush() { return link_.connection().WaitSendsDone(options_.timeout); }

  absl::Status Receive() { return link_.connection().RecvData(&in_, options_.timeout); }

  absl::Status CheckTag(Tag tag, size_t size) {
    if (in_.empty() || in_[0] != tag || in_.size() != size) {
      return Problem(
          absl::StrFormat("unexpected message (tag %d, %d bytes) where tag %d of %d "
                          "bytes belongs",
                          in_.empty() ? -1 : in_[0], in_.size(), tag, size));
    }
    return absl::OkStatus();
  }

  // Receives a message carrying one double (or none when value is null).
  absl::Status Expect(Tag tag, double* value) {
    RETURN_IF_ERROR(Receive());
    return ParseValue(tag, value);
  }
  // Receives a message carrying a matrix digest (any 64 bits).
  absl::Status ExpectDigest(Tag tag, uint64_t* digest) {
    RETURN_IF_ERROR(Receive());
    RETURN_IF_ERROR(CheckTag(tag, 1 + sizeof(uint64_t)));
    std::memcpy(digest, in_.data() + 1, sizeof(uint64_t));
    return absl::OkStatus();
  }
  // Checks the message in in_ and reads its double.
  absl::Status ParseValue(Tag tag, double* value) {
    RETURN_IF_ERROR(CheckTag(tag, 1 + sizeof(double)));
    double v;
    std::memcpy(&v, in_.data() + 1, sizeof(v));
    if (!std::isfinite(v) || v < 0) return Problem(absl::StrFormat("sent a bad value %g", v));
    if (value) *value = v;
    return absl::OkStatus();
  }

  absl::Status Problem(const std::string& what) {
    return absl::DataLossError(absl::StrFormat("link probe with %s: %s", link_.peer_name(), what));
  }

  net::Link& link_;
  const ProbeOptions& options_;
  std::deque<std::vector<uint8_t>> outbox_;
  std::vector<uint8_t> payload_;
  std::vector<uint8_t> in_;
  uint64_t bytes_streamed_ = 0;
};

absl::StatusOr<std::vector<int>> ResolvePeers(const net::TcpNode& node,
                                              const ProbeOptions& options) {
  std::vector<int> peers = options.peers;
  if (peers.empty()) {
    for (int r = 0; r < node.num_hosts(); ++r) peers.push_back(r);
  }
  std::vector<int> sorted = peers;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= node.num_hosts()) {
    return absl::InvalidArgumentError(
        "link probe: peers must be distinct hosts-file ranks of this node's hosts");
  }
  if (!std::binary_search(sorted.begin(), sorted.end(), node.self_rank())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "link probe: this peer (rank %d) is not among the probed peers", node.self_rank()));
  }
  return sorted;
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> ProbeSchedule(int n) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  if (n < 2) return rounds;
  const int m = n % 2 == 0 ? n : n + 1;  // index m-1 is a dummy when n is odd
  for (int r = 0; r < m - 1; ++r) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < m / 2; ++i) {
      int a = i == 0 ? m - 1 : (r + i) % (m - 1);
      int b = (r + m - 1 - i) % (m - 1);
      if (a >= n || b >= n) continue;  // the dummy: this peer sits out
      pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
    std::sort(pairs.begin(), pairs.end());
    rounds.push_back(std::move(pairs));
  }
  return rounds;
}

absl::StatusOr<LinkMatrix> ShareLinkRows(net::RingTransport& ring, const LinkMatrix& mine,
                                         int self_index, absl::Duration timeout) {
  const int n = mine.size();
  if (ring.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("link probe: the ring has %d peers but %d are probed", ring.size(), n));
  }
  ASSIGN_OR_RETURN(auto rows, AllgatherBytes(&ring, EncodeLinkRow(mine, self_index), timeout));
  LinkMatrix all;
  all.peers = mine.peers;
  all.bandwidth_bps.assign(n, std::vector<double>(n, 0.0));
  all.rtt_s.assign(n, std::vector<double>(n, 0.0));
  std::vector<bool> seen(n, false);
  for (int pos = 0; pos < n; ++pos) {
    const auto& row = rows[pos];
    uint32_t index = 0;
    if (row.size() >= 12) std::memcpy(&index, row.data() + 8, sizeof(index));
    if (index >= static_cast<uint32_t>(n) || seen[index]) {
      return absl::DataLossError(absl::StrFormat(
          "link probe: ring position %d sent row %d, missing or already received", pos, index));
    }
    seen[index] = true;
    RETURN_IF_ERROR(DecodeLinkRow(row, static_cast<int>(index),
                                  absl::StrFormat("ring position %d", pos), &all));
  }
  return all;
}

uint64_t LinkMatrixDigest(const LinkMatrix* m, int self_rank) {
  if (m == nullptr || m->IndexOf(self_rank) < 0) return 0;
  // FNV-1a over the peers and the doubles' bits: all members hold the same bytes.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  for (int peer : m->peers) mix(&peer, sizeof(peer));
  for (const auto& row : m->bandwidth_bps) mix(row.data(), row.size() * sizeof(double));
  for (const auto& row : m->rtt_s) mix(row.data(), row.size() * sizeof(double));
  return h == 0 ? 1 : h;
}

absl::StatusOr<LinkMatrix> ProbeLinks(net::TcpNode& node, net::RingTransport& ring,
                                      const ProbeOptions& options, ProbeStats* stats) {
  Stopwatch watch;
  ASSIGN_OR_RETURN(std::vector<int> peers, ResolvePeers(node, options));
  const int n = static_cast<int>(peers.size());
  if (ring.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "link probe: the sharing ring has %d peers but %d are probed", ring.size(), n));
  }
  const int self = static_cast<int>(std::lower_bound(peers.begin(), peers.end(), node.self_rank()) -
                                    peers.begin());
  LinkMatrix mine;
  mine.peers = peers;
  mine.bandwidth_bps.assign(n, std::vector<double>(n, 0.0));
  mine.rtt_s.assign(n, std::vector<double>(n, 0.0));

  // Pairs whose two peers hold the same matrix keep their figures (link_probe.h
  // "Reuse"): the two exchange their digests at the start of the pair.
  const uint64_t digest = LinkMatrixDigest(options.known, peers[self]);
  int pairs_probed = 0, pairs_reused = 0;

  const auto schedule = ProbeSchedule(n);
  uint64_t streamed = 0;
  for (size_t r = 0; r < schedule.size(); ++r) {
    int partner = -1;
    for (const auto& [a, b] : schedule[r]) {
      if (a == self) partner = b;
      if (b == self) partner = a;
    }
    if (partner < 0) continue;
    const bool dialer = self < partner;
    const absl::Time deadline = absl::Now() + options.timeout;
    auto pending = dialer ? node.ConnectTo(peers[partner], options.channel, deadline)
                          : node.AcceptFrom(peers[partner], options.channel, deadline);
    // Wait in slices so an abort is noticed within ~0.1 s.
    const absl::Time give_up = deadline + absl::Seconds(1);
    while (!pending->Wait(absl::Milliseconds(100))) {
      if (options.abort != nullptr && options.abort->aborted()) {
        pending->Cancel();
        return options.abort->status();
      }
      if (absl::Now() >= give_up) {
        pending->Cancel();
        return absl::DeadlineExceededError(absl::StrFormat(
            "link probe: no link to %s within %s (%s)", node.PeerName(peers[partner]),
            absl::FormatDuration(options.timeout), pending->Describe()));
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<net::Link> link, pending->Take());
    AbortWatch abort_watch(options.abort, &link->connection());
    PairProbe probe(*link, options);
    double rtt = 0, bw_out = 0, bw_in = 0;
    bool reused = false;
    RETURN_IF_ERROR(dialer ? probe.RunDialer(digest, &reused, &rtt, &bw_out, &bw_in)
                           : probe.RunAcceptor(digest, &reused, &rtt, &bw_out, &bw_in));
    if (reused) {
      // Equal digests: both hold this matrix, and it has both of them.
      const int i = options.known->IndexOf(peers[self]);
      const int j = options.known->IndexOf(peers[partner]);
      if (i < 0 || j < 0) return absl::InternalError("link probe: reused pair not in the matrix");
      mine.bandwidth_bps[self][partner] = options.known->bandwidth_bps[i][j];
      mine.rtt_s[self][partner] = options.known->rtt_s[i][j];
      ++pairs_reused;
      LogDebug("link probe round %d: reused the figures of the link to %s", r,
               node.PeerName(peers[partner]));
      continue;
    }
    ++pairs_probed;
    streamed += probe.bytes_streamed();
    mine.bandwidth_bps[self][partner] = bw_out;
    mine.rtt_s[self][partner] = rtt;
    LogDebug("link probe round %d: to %s %.1f MB/s, from it %.1f MB/s, rtt %.3f ms", r,
             node.PeerName(peers[partner]), bw_out / 1e6, bw_in / 1e6, rtt * 1e3);
  }
  ASSIGN_OR_RETURN(LinkMatrix all, ShareLinkRows(ring, mine, self, options.timeout));
  LogInfo(
      "link probe: %d peers in %d rounds took %.1f ms (this peer's links: %d measured, %d "
      "reused from the previous probe)",
      n, schedule.size(), watch.ElapsedMs(), pairs_probed, pairs_reused);
  if (stats) {
    stats->seconds = watch.ElapsedSeconds();
    stats->rounds = static_cast<int>(schedule.size());
    stats->bytes_streamed = streamed;
    stats->pairs_probed = pairs_probed;
    stats->pairs_reused = pairs_reused;
  }
  return all;
}

}  // namespace rt::collective
