// Binary encoding of status reports (see peer_report.h).
#include "observe/peer_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/byte_codec.h"

namespace rt::observe {
namespace {

constexpr uint32_t kReportMagic = 0x52505452u;  // "RTPR" in memory order
constexpr uint8_t kReportVersion = 1;

std::string Cut(const std::string& s) {
  return s.size() <= kMaxFieldBytes ? s : s.substr(0, kMaxFieldBytes);
}
std::vector<std::string> CutList(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size() && i < kMaxEventMembers; ++i) out.push_back(Cut(v[i]));
  return out;
}

void WriteFigures(ByteWriter& w, const PeerFigures& f) {
  w.String(Cut(f.peer));
  w.String(Cut(f.version));
  w.String(Cut(f.state));
  w.String(Cut(f.reason));
  w.Int<int64_t>(f.unix_ms);
  w.Int<int64_t>(f.started_unix_ms);
  w.Int<uint64_t>(f.epoch);
  w.Int<int64_t>(f.step);
  w.Int<int64_t>(f.tokens);
  for (double d : {f.loss, f.val_loss, f.val_bpb}) w.Double(d);
  w.Int<int64_t>(f.val_step);
  for (double d : {f.tokens_per_s, f.step_ms, f.compute_ms, f.comm_ms, f.wait_ms}) w.Double(d);
  w.Int<int32_t>(f.slots);
  w.Int<uint64_t>(f.bytes_sent);
  w.Int<int64_t>(f.rss_bytes);
  w.Int<int64_t>(f.mem_available_bytes);
  w.Int<int64_t>(f.mem_total_bytes);
  w.Double(f.cpu_steal);
  w.Double(f.load1);
  w.Int<int32_t>(f.cpus);
  w.Int<int64_t>(f.disk_free_bytes);
  w.Int<int64_t>(f.ckpt_step);
  w.Int<int64_t>(f.ckpt_unix_ms);
  w.String(Cut(f.ckpt_where));
  const size_t links = std::min(f.links.size(), kMaxLinks);
  w.Int<uint32_t>(static_cast<uint32_t>(links));
  for (size_t i = 0; i < links; ++i) {
    w.String(Cut(f.links[i].to));
    w.Double(f.links[i].bytes_per_s);
    w.Double(f.links[i].rtt_s);
  }
}

PeerFigures ReadFigures(ByteReader& r) {
  PeerFigures f;
  f.peer = r.String("peer", kMaxFieldBytes);
  f.version = r.String("version", kMaxFieldBytes);
  f.state = r.String("state", kMaxFieldBytes);
  f.reason = r.String("reason", kMaxFieldBytes);
  f.unix_ms = r.Int<int64_t>("time");
  f.started_unix_ms = r.Int<int64_t>("start time");
  f.epoch = r.Int<uint64_t>("epoch");
  f.step = r.Int<int64_t>("step");
  f.tokens = r.Int<int64_t>("tokens");
  f.loss = r.Double("loss");
  f.val_loss = r.Double("val_loss");
  f.val_bpb = r.Double("val_bpb");
  f.val_step = r.Int<int64_t>("val step");
  f.tokens_per_s = r.Double("tokens_per_s");
  f.step_ms = r.Double("step_ms");
  f.compute_ms = r.Double("compute_ms");
  f.comm_ms = r.Double("comm_ms");
  f.wait_ms = r.Double("wait_ms");
  f.slots = r.Int<int32_t>("slots");
  f.bytes_sent = r.Int<uint64_t>("bytes_sent");
  f.rss_bytes = r.Int<int64_t>("rss");
  f.mem_available_bytes = r.Int<int64_t>("memory available");
  f.mem_total_bytes = r.Int<int64_t>("memory total");
  f.cpu_steal = r.Double("cpu steal");
  f.load1 = r.Double("load");
  f.cpus = r.Int<int32_t>("cpus");
  f.disk_free_bytes = r.Int<int64_t>("disk free");
  f.ckpt_step = r.Int<int64_t>("checkpoint step");
  f.ckpt_unix_ms = r.Int<int64_t>("checkpoint time");
  f.ckpt_where = r.String("checkpoint where", kMaxFieldBytes);
  const uint32_t links = r.Int<uint32_t>("links");
  if (links > kMaxLinks) {
    r.Fail(absl::StrCat("links: ", links, " exceed ", kMaxLinks));
    return f;
  }
  for (uint32_t i = 0; i < links && r.ok(); ++i) {
    LinkFigure l;
    l.to = r.String("link peer", kMaxFieldBytes);
    l.bytes_per_s = r.Double("link speed");
    l.rtt_s = r.Double("link rtt");
    f.links.push_back(std::move(l));
  }
  return f;
}

void WriteEvent(ByteWriter& w, const ClusterEvent& e) {
  w.Int<int64_t>(e.unix_ms);
  w.String(Cut(e.origin));
  w.Int<uint32_t>(e.seq);
  w.String(Cut(e.kind));
  w.Int<uint64_t>(e.epoch);
  w.Int<int64_t>(e.step);
  w.String(Cut(e.message));
  w.String(Cut(e.leader));
  w.Strings(CutList(e.members));
  w.Strings(CutList(e.left));
  w.Strings(CutList(e.joined));
}

ClusterEvent ReadEvent(ByteReader& r) {
  ClusterEvent e;
  e.unix_ms = r.Int<int64_t>("event time");
  e.origin = r.String("event origin", kMaxFieldBytes);
  e.seq = r.Int<uint32_t>("event seq");
  e.kind = r.String("event kind", kMaxFieldBytes);
  e.epoch = r.Int<uint64_t>("event epoch");
  e.step = r.Int<int64_t>("event step");
  e.message = r.String("event message", kMaxFieldBytes);
  e.leader = r.String("event leader", kMaxFieldBytes);
  e.members = r.Strings("event members", kMaxEventMembers, kMaxFieldBytes);
  e.left = r.Strings("event left", kMaxEventMembers, kMaxFieldBytes);
  e.joined = r.Strings("event joined", kMaxEventMembers, kMaxFieldBytes);
  return e;
}

std::vector<uint8_t> Encode(const PeerFigures& f, const std::vector<ClusterEvent>& events,
                            size_t first) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Int<uint32_t>(kReportMagic);
  w.Int<uint8_t>(kReportVersion);
  WriteFigures(w, f);
  w.Int<uint32_t>(static_cast<uint32_t>(events.size() - first));
  for (size_t i = first; i < events.size(); ++i) WriteEvent(w, events[i]);
  return out;
}

}  // namespace

std::vector<uint8_t> EncodePeerReport(const PeerReport& report, size_t max_bytes) {
  size_t first =
      report.events.size() > kMaxEventsPerReport ? report.events.size() - kMaxEventsPerReport : 0;
  std::vector<uint8_t> out = Encode(report.figures, report.events, first);
  while (out.size() > max_bytes && first < report.events.size()) {
    out = Encode(report.figures, report.events, ++first);
  }
  return out;
}

absl::StatusOr<PeerReport> DecodePeerReport(absl::Span<const uint8_t> bytes,
                                            const std::string& from) {
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("status report from ", from, ": ", what));
  };
  ByteReader r(bytes);
  if (r.Int<uint32_t>("magic") != kReportMagic) return bad("bad magic");
  const uint8_t version = r.Int<uint8_t>("version");
  if (!r.ok()) return bad(r.error());
  if (version != kReportVersion) {
    return bad(
        absl::StrCat("unsupported version ", version, " (this binary reads ", kReportVersion, ")"));
  }
  PeerReport report;
  report.figures = ReadFigures(r);
  const uint32_t events = r.Int<uint32_t>("event count");
  if (events > kMaxEventsPerReport) {
    return bad(absl::StrCat(events, " events exceed ", kMaxEventsPerReport));
  }
  for (uint32_t i = 0; i < events && r.ok(); ++i) report.events.push_back(ReadEvent(r));
  if (!r.ok()) return bad(r.error());
  if (!r.AtEnd()) return bad("trailing bytes after the report");
  return report;
}

}  // namespace rt::observe
