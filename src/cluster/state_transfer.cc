// State transfer between two peers: wire messages, the serving and the fetching side.
#include "cluster/state_transfer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/crc32c.h"
#include "core/status_macros.h"

namespace rt::cluster {
namespace {

constexpr uint32_t kMagic = 0x54535452u;  // "RTST" in memory order
enum MsgType : uint8_t { kRequest = 1, kManifest = 2, kChunk = 3, kAck = 4 };
constexpr size_t kMaxSections = 4096;
constexpr size_t kMaxName = 256;
constexpr size_t kMaxReason = 4096;

class Writer {
 public:
  explicit Writer(MsgType t) {
    U32(kMagic);
    U8(t);
  }
  void U8(uint8_t v) { b_.push_back(v); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  std::vector<uint8_t> Take() { return std::move(b_); }

 private:
  void Raw(const void* p, size_t n) {  // little-endian hosts only (x86-64, arm64)
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  std::vector<uint8_t> b_;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, std::string where) : b_(b), where_(std::move(where)) {}
  absl::Status Header(MsgType want) {
    uint32_t magic = 0;
    uint8_t type = 0;
    if (!U32(&magic) || !U8(&type) || magic != kMagic) return Bad("not a state-transfer message");
    if (type != want) {
      return Bad(absl::StrFormat("message type %d where %d was expected", type, want));
    }
    return absl::OkStatus();
  }
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool Str(std::string* s, size_t max) {
    uint32_t n = 0;
    if (!U32(&n) || n > max || b_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  absl::Status End() { return pos_ == b_.size() ? absl::OkStatus() : Bad("trailing bytes"); }
  absl::Status Bad(const std::string& what) const {
    return absl::DataLossError(absl::StrFormat("%s: malformed message: %s", where_, what));
  }

 private:
  bool Raw(void* p, size_t n) {
    if (b_.size() - pos_ < n) return false;
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  const std::vector<uint8_t>& b_;
  std::string where_;
  size_t pos_ = 0;
};

absl::Duration Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::ZeroDuration());
}

// Waits for a link, bounded; the pending attempt is cancelled on timeout.
absl::StatusOr<std::unique_ptr<net::Link>> AwaitLink(std::shared_ptr<net::PendingLink> p,
                                                     absl::Duration timeout,
                                                     const std::string& what) {
  if (!p->Wait(timeout + absl::Milliseconds(200))) {
    p->Cancel();
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s: no link within %s (%s)", what, absl::FormatDuration(timeout), p->Describe()));
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

std::vector<uint8_t> EncodeAck(bool ok, const std::string& reason) {
  Writer w(kAck);
  w.U8(ok ? 1 : 0);
  w.Str(reason.substr(0, kMaxReason));
  return w.Take();
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
  const absl::Time deadline = absl::Now() + options.total_timeout;
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError(what + ": chunk_bytes is 0");
  ASSIGN_OR_RETURN(
      std::unique_ptr<net::Link> link,
      AwaitLink(node->AcceptFrom(fetcher_rank, channel, absl::Now() + options.connect_timeout),
                options.connect_timeout, what));
  net::TcpConnection& conn = link->connection();
  std::vector<uint8_t> msg;
  RETURN_IF_ERROR(RecvControl(*link, &msg, options.idle_timeout, deadline, what));
  Reader r(msg, what);
  RETURN_IF_ERROR(r.Header(kRequest));
  StateVersion want;
  uint64_t step = 0;
  if (!r.U64(&want.epoch) || !r.U64(&step)) return r.Bad("short request");
  want.step = static_cast<int64_t>(step);
  RETURN_IF_ERROR(r.End());

  Writer m(kManifest);
  if (want != source.version) {
    const std::string reason = absl::StrFormat("this peer holds %s, not the requested %s",
                                               source.version.ToString(), want.ToString());
    m.U8(0);
    m.Str(reason);
    (void)conn.SendOwned(net::FrameType::kControl, m.Take());
    LingerUntilPeerCloses(*link, std::min(options.idle_timeout, absl::Seconds(2)));
    return absl::FailedPreconditionError(what + ": refused: " + reason);
  }
  m.U8(1);
  m.Str("");
  m.U64(source.version.epoch);
  m.U64(static_cast<uint64_t>(source.version.step));
  m.U32(options.chunk_bytes);
  m.U32(static_cast<uint32_t>(source.sections.size()));
  for (const auto& s : source.sections) {
    m.Str(s.name);
    m.U64(s.bytes.size());
    m.U32(Crc32c(s.bytes.data(), s.bytes.size()));
  }
  RETURN_IF_ERROR(conn.SendOwned(net::FrameType::kControl, m.Take()));

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
      Writer h(kChunk);
      h.U32(static_cast<uint32_t>(si));
      h.U64(off);
      h.U32(static_cast<uint32_t>(chunk.size()));
      h.U32(Crc32c(chunk.data(), chunk.size()));
      const int64_t flip = options.test_flip_byte_at;
      if (si == 0 && flip >= static_cast<int64_t>(off) &&
          flip < static_cast<int64_t>(off + chunk.size())) {
        altered.emplace_back(chunk.begin(), chunk.end());
        altered.back()[flip - off] ^= 0x01;
        chunk = altered.back();
      }
      st = conn.SendOwned(net::FrameType::kControl, h.Take());
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
  Reader a(msg, what);
  RETURN_IF_ERROR(a.Header(kAck));
  uint8_t ok = 0;
  std::string reason;
  if (!a.U8(&ok) || !a.Str(&reason, kMaxReason)) return a.Bad("short acknowledgement");
  if (!ok) return absl::DataLossError(what + ": the fetcher refused the copy: " + reason);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- fetching side

namespace {

absl::Status ReceiveSections(net::Link& link, StateSnapshot* out, uint32_t chunk_bytes,
                             const std::vector<uint32_t>& crcs, const TransferOptions& options,
                             absl::Time deadline, const std::string& what) {
  std::vector<uint8_t> msg, data;
  for (size_t si = 0; si < out->sections.size(); ++si) {
    StateSection& s = out->sections[si];
    uint32_t crc = 0;
    for (size_t off = 0; off < s.bytes.size();) {
      RETURN_IF_ERROR(RecvControl(link, &msg, options.idle_timeout, deadline, what));
      Reader r(msg, what);
      RETURN_IF_ERROR(r.Header(kChunk));
      uint32_t section = 0, n = 0, chunk_crc = 0;
      uint64_t offset = 0;
      if (!r.U32(&section) || !r.U64(&offset) || !r.U32(&n) || !r.U32(&chunk_crc)) {
        return r.Bad("short chunk header");
      }
      RETURN_IF_ERROR(r.End());
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
  const absl::Time deadline = absl::Now() + options.total_timeout;
  ASSIGN_OR_RETURN(
      std::unique_ptr<net::Link> link,
      AwaitLink(node->ConnectTo(source_rank, channel, absl::Now() + options.connect_timeout),
                options.connect_timeout, what));
  net::TcpConnection& conn = link->connection();
  Writer req(kRequest);
  req.U64(want.epoch);
  req.U64(static_cast<uint64_t>(want.step));
  RETURN_IF_ERROR(conn.SendOwned(net::FrameType::kControl, req.Take()));

  std::vector<uint8_t> msg;
  RETURN_IF_ERROR(RecvControl(*link, &msg, options.idle_timeout, deadline, what));
  Reader r(msg, what);
  RETURN_IF_ERROR(r.Header(kManifest));
  uint8_t ok = 0;
  std::string reason;
  if (!r.U8(&ok) || !r.Str(&reason, kMaxReason)) return r.Bad("short manifest");
  if (!ok) return absl::FailedPreconditionError(what + ": the source refused: " + reason);
  StateSnapshot snap;
  uint64_t step = 0;
  uint32_t chunk_bytes = 0, count = 0;
  if (!r.U64(&snap.version.epoch) || !r.U64(&step) || !r.U32(&chunk_bytes) || !r.U32(&count)) {
    return r.Bad("short manifest");
  }
  snap.version.step = static_cast<int64_t>(step);
  if (snap.version != want) {
    return r.Bad("it describes " + snap.version.ToString() + " instead of " + want.ToString());
  }
  if (chunk_bytes == 0) return r.Bad("chunk size 0");
  if (count > kMaxSections) return r.Bad(absl::StrFormat("%d sections", count));
  std::vector<uint32_t> crcs(count);
  std::set<std::string> names;
  uint64_t total = 0;
  std::vector<uint64_t> sizes(count);
  snap.sections.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (!r.Str(&snap.sections[i].name, kMaxName) || !r.U64(&sizes[i]) || !r.U32(&crcs[i])) {
      return r.Bad("short section list");
    }
    if (snap.sections[i].name.empty() || !names.insert(snap.sections[i].name).second) {
      return r.Bad("empty or repeated section name '" + snap.sections[i].name + "'");
    }
    if (sizes[i] > options.max_total_bytes || total + sizes[i] > options.max_total_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: the manifest announces more than the limit of %d bytes", what,
                          options.max_total_bytes));
    }
    total += sizes[i];
  }
  RETURN_IF_ERROR(r.End());
  for (uint32_t i = 0; i < count; ++i) snap.sections[i].bytes.resize(sizes[i]);

  absl::Status st = ReceiveSections(*link, &snap, chunk_bytes, crcs, options, deadline, what);
  if (conn.status().ok()) {
    (void)conn.SendOwned(net::FrameType::kControl,
                         EncodeAck(st.ok(), st.ok() ? "" : std::string(st.message())));
    LingerUntilPeerCloses(*link, std::min(options.idle_timeout, absl::Seconds(2)));
  }
  if (!st.ok()) return st;
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
