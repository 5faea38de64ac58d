// State transfer between two peers: wire messages, the serving and the fetching side.
#include "cluster/state_transfer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_format.h"
#include "cluster/state_messages.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/status_macros.h"

namespace rt::cluster {
namespace {

absl::Duration Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::ZeroDuration());
}

constexpr absl::Duration kSupersededPoll = absl::Milliseconds(100);

absl::Status SupersededError(const std::string& what) {
  return absl::CancelledError(what + ": a newer view superseded this transfer");
}

absl::Status StopError(const std::string& what) {
  return absl::CancelledError(what + ": stop requested (signal)");
}

bool StopAsked(const TransferOptions& options) { return options.stop && options.stop(); }

// While alive, polls options.stop every kSupersededPoll on a thread of its own and, once
// it says so, fails `conn` with StopError: every receive or send wait of the transfer
// then returns at once. Destroy it before the connection.
class StopWatcher {
 public:
  StopWatcher(const TransferOptions& options, net::TcpConnection* conn, const std::string& what) {
    if (!options.stop) return;
    thread_ = std::thread([this, stop = options.stop, conn, what] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!done_) {
        if (stop()) {
          fired_ = true;
          conn->Fail(StopError(what));
          return;
        }
        cv_.wait_for(lock, absl::ToChronoNanoseconds(kSupersededPoll));
      }
    });
  }
  ~StopWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  StopWatcher(const StopWatcher&) = delete;
  StopWatcher& operator=(const StopWatcher&) = delete;
  bool fired() {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread thread_;
};

// Waits for a link, bounded; the pending attempt is cancelled on timeout, or as soon
// as options.superseded says so.
absl::StatusOr<std::unique_ptr<net::Link>> AwaitLink(std::shared_ptr<net::PendingLink> p,
                                                     absl::Duration timeout,
                                                     const TransferOptions& options,
                                                     const std::string& what) {
  const absl::Time end = absl::Now() + timeout + absl::Milliseconds(200);
  const bool poll = options.superseded || options.stop;
  while (!p->Wait(poll ? std::min(kSupersededPoll, Left(end)) : Left(end))) {
    if (options.superseded && options.superseded()) {
      p->Cancel();
      return SupersededError(what);
    }
    if (StopAsked(options)) {
      p->Cancel();
      return StopError(what);
    }
    if (absl::Now() >= end) {
      p->Cancel();
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s: no link within %s (%s)", what, absl::FormatDuration(timeout), p->Describe()));
    }
  }
  return p->Take();
}

// Receives one control message within min(idle, what is left of the total).
absl::Status RecvControl(net::Link& link, std::vector<uint8_t>* msg, absl::Duration idle,
                         absl::Time deadline, const std::string& what) {
  absl::Status st = link.connection().RecvControl(msg, std::min(idle, Left(deadline)));
  if (absl::IsDeadlineExceeded(st)) {
    return absl::DeadlineExceededError(
        absl::StrFormat("%s: %s went silent (%s)", what, link.peer_name(), st.message()));
  }
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrFormat("%s: %s", what, st.message()));
  }
  return absl::OkStatus();
}

// The other side's first message (the request, or the manifest), like RecvControl but
// given up as soon as options.superseded says so (the frames queue whole, so waiting
// in slices loses nothing).
absl::Status RecvFirstControl(net::Link& link, std::vector<uint8_t>* msg,
                              const TransferOptions& options, absl::Time deadline,
                              const std::string& what) {
  if (!options.superseded) return RecvControl(link, msg, options.idle_timeout, deadline, what);
  const absl::Time end = std::min(absl::Now() + options.idle_timeout, deadline);
  while (true) {
    const absl::Duration slice = std::min(kSupersededPoll, Left(end));
    absl::Status st = RecvControl(link, msg, slice, end, what);
    if (!absl::IsDeadlineExceeded(st) || absl::Now() >= end) return st;
    if (options.superseded()) return SupersededError(what);
  }
}

// After our last message, wait (bounded) for the peer to close: closing first could
// discard that message before it was written.
void LingerUntilPeerCloses(net::Link& link, absl::Duration timeout) {
  std::vector<uint8_t> ignored;
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    absl::Status st = link.connection().RecvControl(&ignored, Left(end));
    if (!st.ok()) return;
  }
}

}  // namespace

const StateSection* StateSnapshot::Find(const std::string& name) const {
  for (const auto& s : sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

StateSource StateSnapshot::AsSource() const {
  StateSource src;
  src.version = version;
  for (const auto& s : sections) src.sections.push_back({s.name, s.bytes});
  return src;
}

// ---------------------------------------------------------------- source side

absl::Status ServeState(const std::shared_ptr<net::TcpNode>& node, int fetcher_rank,
                        uint64_t channel, const StateSource& source,
                        const TransferOptions& options) {
  const std::string what =
      absl::StrFormat("serving %s to %s", source.version.ToString(), node->PeerName(fetcher_rank));
  Stopwatch watch;
  const absl::Time deadline = absl::Now() + options.total_timeout;
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError(what + ": chunk_bytes is 0");
  ASSIGN_OR_RETURN(
      std::unique_ptr<net::Link> link,
      AwaitLink(node->AcceptFrom(fetcher_rank, channel, absl::Now() + options.connect_timeout),
                options.connect_timeout, options, what));
  net::TcpConnection& conn = link->connection();
  StopWatcher stop(options, &conn, what);
  std::vector<uint8_t> msg;
  RETURN_IF_ERROR(RecvFirstControl(*link, &msg, options, deadline, what));
  ASSIGN_OR_RETURN(const StateRequest request, DecodeStateRequest(msg, what));
  const StateVersion want = request.want;

  StateManifest manifest;
  if (want != source.version) {
    manifest.reason = absl::StrFormat("this peer holds %s, not the requested %s",
                                      source.version.ToString(), want.ToString());
    (void)conn.SendOwned(net::FrameType::kControl, EncodeStateManifest(manifest));
    LingerUntilPeerCloses(*link, std::min(options.idle_timeout, absl::Seconds(2)));
    return absl::FailedPreconditionError(what + ": refused: " + manifest.reason);
  }
  manifest.ok = true;
  manifest.version = source.version;
  manifest.chunk_bytes = options.chunk_bytes;
  for (const auto& s : source.sections) {
    manifest.sections.push_back({s.name, s.bytes.size(), Crc32c(s.bytes.data(), s.bytes.size())});
  }
  RETURN_IF_ERROR(conn.SendOwned(net::FrameType::kControl, EncodeStateManifest(manifest)));

  // Chunks queued on the link at once (file comment): the next one is queued once
  // the kernel took all but window - 1 of them.
  const size_t window =
      std::max<uint64_t>(2, options.window_bytes / std::max<uint32_t>(1, options.chunk_bytes));
  std::deque<std::vector<uint8_t>> altered;  // test hook copies, alive until sent
  absl::Status st;
  int chunks = 0;
  uint64_t bytes_sent = 0;
  size_t peak_queued = 0;
  for (size_t si = 0; si < source.sections.size() && st.ok(); ++si) {
    const absl::Span<const uint8_t> bytes = source.sections[si].bytes;
    for (size_t off = 0; off < bytes.size() && st.ok(); off += options.chunk_bytes) {
      if (options.test_close_after_chunks >= 0 && chunks == options.test_close_after_chunks) {
        (void)conn.WaitSendsDone(Left(deadline));
        link.reset();
        return absl::AbortedError(what + ": closed by the test hook");
      }
      if (options.test_stall_after_chunks >= 0 && chunks == options.test_stall_after_chunks) {
        (void)conn.WaitSendsDone(Left(deadline));
        LingerUntilPeerCloses(*link, Left(deadline));
        return absl::AbortedError(what + ": stalled by the test hook");
      }
      absl::Span<const uint8_t> chunk =
          bytes.subspan(off, std::min<size_t>(options.chunk_bytes, bytes.size() - off));
      if (chunks++ == options.test_skip_chunk) continue;
      // Bounded by the total only, like the wait for the last chunks below: on a slow
      // link one writer batch (the whole window) may take longer than idle_timeout to
      // hand over; a fetcher that fails closes the link, which ends the wait at once.
      st = conn.WaitSendsAtMost(window - 1, Left(deadline));
      if (!st.ok()) break;
      const StateChunkHeader header{static_cast<uint32_t>(si), off,
                                    static_cast<uint32_t>(chunk.size()),
                                    Crc32c(chunk.data(), chunk.size())};
      const int64_t flip = options.test_flip_byte_at;
      if (si == 0 && flip >= static_cast<int64_t>(off) &&
          flip < static_cast<int64_t>(off + chunk.size())) {
        altered.emplace_back(chunk.begin(), chunk.end());
        altered.back()[flip - off] ^= 0x01;
        chunk = altered.back();
      }
      st = conn.SendOwned(net::FrameType::kControl, EncodeStateChunkHeader(header));
      if (st.ok()) st = conn.SendData(chunk, 0);
      if (st.ok()) bytes_sent += chunk.size();
      peak_queued = std::max(peak_queued, conn.pending_data_messages());
    }
  }
  // Every data frame refers to the caller's bytes: wait until they are handed over
  // (or the socket is closed) before returning, whatever happened.
  absl::Status sent = conn.WaitSendsDone(Left(deadline));
  if (!sent.ok() && !absl::IsDeadlineExceeded(sent) && st.ok()) st = sent;
  if (absl::IsDeadlineExceeded(sent)) {
    conn.Fail(absl::DeadlineExceededError(what + ": the fetcher did not take the bytes in time"));
    (void)conn.WaitSendsDone(absl::Seconds(5));
    st = sent;
  }
  if (stop.fired()) return StopError(what);
  if (!st.ok()) return absl::Status(st.code(), absl::StrFormat("%s: %s", what, st.message()));

  RETURN_IF_ERROR(RecvControl(*link, &msg, options.idle_timeout, deadline, what));
  ASSIGN_OR_RETURN(const StateAck ack, DecodeStateAck(msg, what));
  if (!ack.ok) return absl::DataLossError(what + ": the fetcher refused the copy: " + ack.reason);
  if (options.stats != nullptr) {
    options.stats->seconds = watch.ElapsedSeconds();
    options.stats->bytes = bytes_sent;
    options.stats->peak_queued_chunks = peak_queued;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- fetching side

namespace {

// Receives every chunk straight into its place in out's sections (no copy), checking
// order, sizes and checksums. *first_chunk_s: when the first chunk's header arrived
// (watch's seconds), -1 if none did.
absl::Status ReceiveSections(net::Link& link, StateSnapshot* out, uint32_t chunk_bytes,
                             const std::vector<uint32_t>& crcs, const TransferOptions& options,
                             absl::Time deadline, const std::string& what, const Stopwatch& watch,
                             double* first_chunk_s) {
  std::vector<uint8_t> msg;
  for (size_t si = 0; si < out->sections.size(); ++si) {
    StateSection& s = out->sections[si];
    uint32_t crc = 0;
    for (size_t off = 0; off < s.bytes.size();) {
      RETURN_IF_ERROR(RecvControl(link, &msg, options.idle_timeout, deadline, what));
      if (*first_chunk_s < 0) *first_chunk_s = watch.ElapsedSeconds();
      ASSIGN_OR_RETURN(const StateChunkHeader chunk, DecodeStateChunkHeader(msg, what));
      const uint32_t section = chunk.section, n = chunk.bytes, chunk_crc = chunk.crc32c;
      const uint64_t offset = chunk.offset;
      const size_t expect = std::min<size_t>(chunk_bytes, s.bytes.size() - off);
      if (section != si || offset != off || n != expect) {
        return absl::DataLossError(absl::StrFormat(
            "%s: chunk out of order: got section %d offset %d (%d bytes), expected section %d "
            "offset %d (%d bytes)",
            what, section, offset, n, si, off, expect));
      }
      // The header's size equals the place's: a data frame of another size is refused
      // (DataLoss) before any of it is written there.
      uint8_t* place = s.bytes.data() + off;
      absl::Status st = link.connection().RecvDataInto(
          absl::MakeSpan(place, n), std::min(options.idle_timeout, Left(deadline)));
      if (!st.ok()) return absl::Status(st.code(), absl::StrFormat("%s: %s", what, st.message()));
      const uint32_t got = Crc32c(place, n);
      if (got != chunk_crc) {
        return absl::DataLossError(absl::StrFormat(
            "%s: corrupt chunk of section '%s' at offset %d (crc32c 0x%08x, expected 0x%08x)", what,
            s.name, off, got, chunk_crc));
      }
      crc = Crc32cExtend(crc, place, n);
      off += n;
    }
    if (crc != crcs[si]) {
      return absl::DataLossError(
          absl::StrFormat("%s: section '%s' (%d bytes) has crc32c 0x%08x, the manifest says 0x%08x",
                          what, s.name, s.bytes.size(), crc, crcs[si]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StateSnapshot> FetchState(const std::shared_ptr<net::TcpNode>& node, int source_rank,
                                         uint64_t channel, StateVersion want,
                                         const TransferOptions& options) {
  const std::string what =
      absl::StrFormat("fetching %s from %s", want.ToString(), node->PeerName(source_rank));
  Stopwatch watch;
  const absl::Time deadline = absl::Now() + options.total_timeout;
  ASSIGN_OR_RETURN(
      std::unique_ptr<net::Link> link,
      AwaitLink(node->ConnectTo(source_rank, channel, absl::Now() + options.connect_timeout),
                options.connect_timeout, options, what));
  net::TcpConnection& conn = link->connection();
  StopWatcher stop(options, &conn, what);
  RETURN_IF_ERROR(conn.SendOwned(net::FrameType::kControl, EncodeStateRequest({want})));

  std::vector<uint8_t> msg;
  absl::Status first = RecvFirstControl(*link, &msg, options, deadline, what);
  if (stop.fired()) return StopError(what);
  RETURN_IF_ERROR(first);
  ASSIGN_OR_RETURN(StateManifest manifest, DecodeStateManifest(msg, options.max_total_bytes, what));
  if (!manifest.ok) {
    return absl::FailedPreconditionError(what + ": the source refused: " + manifest.reason);
  }
  if (manifest.version != want) {
    return absl::DataLossError(
        absl::StrFormat("%s: malformed message: it describes %s instead of %s", what,
                        manifest.version.ToString(), want.ToString()));
  }
  StateSnapshot snap;
  snap.version = manifest.version;
  const uint32_t chunk_bytes = manifest.chunk_bytes;
  std::vector<uint32_t> crcs;
  uint64_t total = 0;
  for (StateManifestEntry& e : manifest.sections) {
    crcs.push_back(e.crc32c);
    total += e.bytes;
    snap.sections.push_back({std::move(e.name), std::vector<uint8_t>(e.bytes)});
  }

  double first_chunk_s = -1;
  absl::Status st = ReceiveSections(*link, &snap, chunk_bytes, crcs, options, deadline, what, watch,
                                    &first_chunk_s);
  if (stop.fired()) return StopError(what);
  if (conn.status().ok()) {
    (void)conn.SendOwned(net::FrameType::kControl,
                         EncodeStateAck({st.ok(), st.ok() ? "" : std::string(st.message())}));
    LingerUntilPeerCloses(*link, std::min(options.idle_timeout, absl::Seconds(2)));
  }
  if (!st.ok()) return st;
  if (options.stats != nullptr) {
    options.stats->seconds = watch.ElapsedSeconds();
    options.stats->first_chunk_s = first_chunk_s;
    options.stats->bytes = total;
  }
  return snap;
}

// ---------------------------------------------------------------- per view

int NodeRankOf(const net::TcpNode& node, const PeerId& peer) { return node.RankOf(peer); }

absl::Status ServeAgreedState(const std::shared_ptr<net::TcpNode>& node, const Decision& install,
                              const StateSource& source, const TransferOptions& options) {
  const std::vector<PeerId>& fetchers = install.agreement.need_state;
  std::vector<absl::Status> results(fetchers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fetchers.size(); ++i) {
    const int rank = NodeRankOf(*node, fetchers[i]);
    if (rank < 0) {
      results[i] = absl::NotFoundError("cannot serve state to " + fetchers[i] +
                                       ": not in this node's hosts list");
      continue;
    }
    threads.emplace_back([&, i, rank] {
      results[i] = ServeState(node, rank, StateChannel(install.view.epoch), source, options);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : results) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<StateSnapshot> FetchAgreedState(const std::shared_ptr<net::TcpNode>& node,
                                               const Decision& install,
                                               const TransferOptions& options) {
  const int rank = NodeRankOf(*node, install.agreement.source);
  if (rank < 0 || rank == node->self_rank()) {
    return absl::InvalidArgumentError("cannot fetch state from '" + install.agreement.source +
                                      "': not another peer of this node's hosts list");
  }
  return FetchState(node, rank, StateChannel(install.view.epoch), install.agreement.resume,
                    options);
}

}  // namespace rt::cluster
