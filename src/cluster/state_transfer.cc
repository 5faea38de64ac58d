// State transfer between two peers: wire messages, the serving and the fetching side.
#include "cluster/state_transfer.h"

#include <algorithm>
#include <cstring>
#include <deque>
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

// Waits for a link, bounded; the pending attempt is cancelled on timeout, or as soon
// as options.superseded says so.
absl::StatusOr<std::unique_ptr<net::Link>> AwaitLink(std::shared_ptr<net::PendingLink> p,
                                                     absl::Duration timeout,
                                                     const TransferOptions& options,
                                                     const std::string& what) {
  const absl::Time end = absl::Now() + timeout + absl::Milliseconds(200);
  while (!p->Wait(options.superseded ? std::min(kSupersededPoll, Left(end)) : Left(end))) {
    if (options.superseded && options.superseded()) {
      p->Cancel();
      return SupersededError(what);
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

  std::deque<std::vector<uint8_t>> altered;  // test hook copies, alive until sent
  absl::Status st;
  int chunks = 0;
  for (size_t si = 0; si < source.sections.size() && st.ok(); ++si) {
    const absl::Span<const uint8_t> bytes = source.sections[si].bytes;
    for (size_t off = 0; off < bytes.size() && st.ok(); off += options.chunk_bytes) {
      if (options.test_close_after_chunks >= 0 && chunks == options.test_close_after_chunks) {
        (void)conn.WaitSendsDone(Left(deadline));
        link.reset();
        return absl::AbortedError(what + ": closed by the test hook");
      }
      absl::Span<const uint8_t> chunk =
          bytes.subspan(off, std::min<size_t>(options.chunk_bytes, bytes.size() - off));
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
      ++chunks;
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
  if (!st.ok()) return absl::Status(st.code(), absl::StrFormat("%s: %s", what, st.message()));

  RETURN_IF_ERROR(RecvControl(*link, &msg, options.idle_timeout, deadline, what));
  ASSIGN_OR_RETURN(const StateAck ack, DecodeStateAck(msg, what));
  if (!ack.ok) return absl::DataLossError(what + ": the fetcher refused the copy: " + ack.reason);
  if (options.stats != nullptr) {
    options.stats->seconds = watch.ElapsedSeconds();
    for (const auto& sec : source.sections) options.stats->bytes += sec.bytes.size();
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- fetching side

namespace {

absl::Status ReceiveSections(net::Link& link, StateSnapshot* out, uint32_t chunk_bytes,
                             const std::vector<uint32_t>& crcs, const TransferOptions& options,
                             absl::Time deadline, const std::string& what, const Stopwatch& watch,
                             double* first_chunk_s) {
  std::vector<uint8_t> msg, data;
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
      absl::Status st =
          link.connection().RecvData(&data, std::min(options.idle_timeout, Left(deadline)));
      if (!st.ok()) return absl::Status(st.code(), absl::StrFormat("%s: %s", what, st.message()));
      if (data.size() != n) {
        return absl::DataLossError(
            absl::StrFormat("%s: chunk of section '%s' at %d has %d bytes, "
                            "its header says %d",
                            what, s.name, off, data.size(), n));
      }
      const uint32_t got = Crc32c(data.data(), data.size());
      if (got != chunk_crc) {
        return absl::DataLossError(absl::StrFormat(
            "%s: corrupt chunk of section '%s' at offset %d (crc32c 0x%08x, expected 0x%08x)", what,
            s.name, off, got, chunk_crc));
      }
      std::memcpy(s.bytes.data() + off, data.data(), n);
      crc = Crc32cExtend(crc, data.data(), n);
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
  RETURN_IF_ERROR(conn.SendOwned(net::FrameType::kControl, EncodeStateRequest({want})));

  std::vector<uint8_t> msg;
  RETURN_IF_ERROR(RecvFirstControl(*link, &msg, options, deadline, what));
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
  for (StateManifestEntry& e : manifest.sections) {
    crcs.push_back(e.crc32c);
    snap.sections.push_back({std::move(e.name), std::vector<uint8_t>(e.bytes)});
  }

  double first_chunk_s = -1;
  absl::Status st = ReceiveSections(*link, &snap, chunk_bytes, crcs, options, deadline, what, watch,
                                    &first_chunk_s);
  if (conn.status().ok()) {
    (void)conn.SendOwned(net::FrameType::kControl,
                         EncodeStateAck({st.ok(), st.ok() ? "" : std::string(st.message())}));
    LingerUntilPeerCloses(*link, std::min(options.idle_timeout, absl::Seconds(2)));
  }
  if (!st.ok()) return st;
  if (options.stats != nullptr) {
    options.stats->seconds = watch.ElapsedSeconds();
    options.stats->first_chunk_s = first_chunk_s;
    for (const auto& sec : snap.sections) options.stats->bytes += sec.bytes.size();
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
