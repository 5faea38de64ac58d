// The data-fetch client (see data_fetcher.h).
#include "fetch/data_fetcher.h"

#include <algorithm>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "fetch/fetch_messages.h"
#include "fetch/partial_file.h"
#include "net/tcp_node.h"

namespace rt::fetch {
namespace {

enum class Outcome { kDone, kRefused, kLinkFailed };

// How long one wait lasts at most before FetcherOptions::stop is asked again.
constexpr absl::Duration kStopPoll = absl::Milliseconds(200);

struct FileResult {
  Outcome outcome = Outcome::kDone;
  std::string why;
};

class Fetcher {
 public:
  Fetcher(const FetcherOptions& o, LocalData& data, FetchReport* report)
      : o_(o), data_(data), report_(report) {}

  absl::Status Run();

 private:
  // Ring order backwards from this peer, this peer excluded.
  std::vector<int> SourceOrder() const;
  // One session with `rank`: manifest, then every missing file it does not refuse.
  // True if anything was fetched.
  bool FetchFrom(net::TcpNode& node, int rank);
  FileResult FetchFile(net::TcpConnection& conn, const std::string& source, const DataFile& f);
  absl::StatusOr<FetchMessage> Receive(net::TcpConnection& conn, const std::string& source);
  bool Refused(int rank, const std::string& file) const;
  // True once options.stop said so (and from then on).
  bool Stopping();
  // Waits for `pending` up to `timeout`, asking Stopping() every kStopPoll.
  bool WaitLink(net::PendingLink& pending, absl::Duration timeout);
  void LogProgress(const std::string& source, bool force);

  const FetcherOptions& o_;
  LocalData& data_;
  FetchReport* report_;
  std::map<std::pair<int, std::string>, absl::Time> refused_;  // (source, file) -> when
  std::map<int, std::string> problems_;
  std::map<std::string, std::unique_ptr<PartialFile>> partial_;
  std::map<std::string, uint64_t> generation_;
  absl::Time start_ = absl::Now();
  absl::Time last_log_ = absl::Now();
  bool stopping_ = false;
};

bool Fetcher::Stopping() {
  if (!stopping_ && o_.stop && o_.stop()) stopping_ = true;
  return stopping_;
}

bool Fetcher::WaitLink(net::PendingLink& pending, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (!Stopping()) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    if (pending.Wait(std::min(left, kStopPoll))) return true;
  }
  return false;
}

std::vector<int> Fetcher::SourceOrder() const {
  std::vector<int> order;
  const int n = static_cast<int>(o_.hosts.size());
  for (int k = 1; k < n; ++k) order.push_back(((o_.self_rank - k) % n + n) % n);
  return order;
}

bool Fetcher::Refused(int rank, const std::string& file) const {
  auto it = refused_.find({rank, file});
  return it != refused_.end() && absl::Now() - it->second < o_.refusal_ttl;
}

void Fetcher::LogProgress(const std::string& source, bool force) {
  if (!force && absl::Now() - last_log_ < absl::Seconds(5)) return;
  last_log_ = absl::Now();
  const double s = absl::ToDoubleSeconds(absl::Now() - start_);
  LogInfo("data fetch: %.1f of %.1f MB here, %.1f MB fetched in %.1f s (%.1f MB/s), %s",
          data_.have_bytes() / 1e6, data_.total_bytes() / 1e6, report_->bytes_fetched / 1e6, s,
          s > 0 ? report_->bytes_fetched / 1e6 / s : 0.0, source);
}

// A message within recv_timeout, in slices of kStopPoll (a timed-out RecvData leaves
// the connection usable): Cancelled as soon as Stopping().
absl::StatusOr<FetchMessage> Fetcher::Receive(net::TcpConnection& conn, const std::string& source) {
  std::vector<uint8_t> bytes;
  const absl::Time until = absl::Now() + o_.recv_timeout;
  while (true) {
    if (Stopping()) return absl::CancelledError("stop requested");
    const absl::Duration left = until - absl::Now();
    absl::Status st = conn.RecvData(&bytes, std::clamp(left, absl::ZeroDuration(), kStopPoll));
    if (st.ok()) return DecodeFetchMessage(bytes, source);
    if (!absl::IsDeadlineExceeded(st)) return st;
    if (absl::Now() >= until) {
      return absl::DeadlineExceededError(absl::StrFormat("%s sent nothing for %d s", source,
                                                         absl::ToInt64Seconds(o_.recv_timeout)));
    }
  }
}

FileResult Fetcher::FetchFile(net::TcpConnection& conn, const std::string& source,
                              const DataFile& f) {
  auto link_failed = [](const absl::Status& st) {
    return FileResult{Outcome::kLinkFailed, std::string(st.message())};
  };
  const std::optional<data::DataManifest> manifest = data_.manifest();
  std::unique_ptr<PartialFile>& part = partial_[f.name];
  if (part == nullptr && f.size != 0) {
    std::string note;
    absl::StatusOr<std::unique_ptr<PartialFile>> p =
        PartialFile::Open(data_.dir(), f.name, f.size, &note);
    if (!p.ok()) return link_failed(p.status());
    part = *std::move(p);
    if (!note.empty()) LogInfo("data fetch: %s: %s", f.name, note);
  }
  FetchMessage req;
  req.kind = FetchKind::kFileRequest;
  req.file = f.name;
  req.offset = part ? part->bytes() : 0;  // a file of unknown size starts over
  if (absl::Status st = conn.SendOwned(net::FrameType::kControl, EncodeFetchMessage(req));
      !st.ok()) {
    return link_failed(st);
  }
  absl::StatusOr<FetchMessage> start = Receive(conn, source);
  if (!start.ok()) return link_failed(start.status());
  if (start->kind == FetchKind::kRefused && start->file == f.name) {
    return {Outcome::kRefused, start->text};
  }
  if (start->kind != FetchKind::kFileStart || start->file != f.name) {
    return link_failed(absl::DataLossError(
        absl::StrFormat("%s answered a request for %s with a %s message for '%s'", source, f.name,
                        FetchKindName(start->kind), start->file)));
  }
  if (f.size != 0 ? start->size != f.size : start->size > kMaxUnlistedSizeBytes) {
    return {Outcome::kRefused,
            absl::StrFormat("it says the file has %d bytes, the manifest gives %d", start->size,
                            f.size)};
  }
  if (part == nullptr || part->size() != start->size) {
    std::string note;
    absl::StatusOr<std::unique_ptr<PartialFile>> p =
        PartialFile::Open(data_.dir(), f.name, start->size, &note);
    if (!p.ok()) return link_failed(p.status());
    part = *std::move(p);
  }
  if (part->bytes() != req.offset) {
    if (absl::Status st = part->Restart(); !st.ok()) return link_failed(st);
    // The source streams from req.offset: take what it sends only from 0.
    if (req.offset != 0) return link_failed(absl::DataLossError("restart"));
  }
  uint64_t& gen = generation_[f.name];
  data_.Progress(f.name, part->size(), part->bytes(), part->part_path(), gen);
  while (part->bytes() < part->size()) {
    absl::StatusOr<FetchMessage> m = Receive(conn, source);
    if (!m.ok()) return link_failed(m.status());
    if (m->kind == FetchKind::kRefused && m->file == f.name) return {Outcome::kRefused, m->text};
    if (m->kind != FetchKind::kChunk || m->file != f.name || m->offset != part->bytes() ||
        m->bytes.size() > part->size() - part->bytes()) {
      return link_failed(absl::DataLossError(absl::StrFormat(
          "%s sent a %s message for '%s' at %d where %s bytes from %d of %d were due", source,
          FetchKindName(m->kind), m->file, m->offset, f.name, part->bytes(), part->size())));
    }
    if (absl::Status st = part->Append(m->bytes); !st.ok()) return link_failed(st);
    report_->bytes_fetched += m->bytes.size();
    report_->bytes_from[source] += m->bytes.size();
    data_.Progress(f.name, part->size(), part->bytes(), part->part_path(), gen);
    LogProgress(absl::StrCat("now from ", source), false);
  }
  absl::Status finished = part->Finish(*manifest);
  if (!finished.ok()) {
    ++gen;  // relays serving these bytes must tell their clients
    data_.Progress(f.name, part->size(), 0, part->part_path(), gen);
    return {Outcome::kRefused, absl::StrCat("failed its check here: ", finished.message())};
  }
  part.reset();
  data_.FileDone(f.name, /*verified=*/true);
  report_->files_fetched++;
  return {};
}

bool Fetcher::FetchFrom(net::TcpNode& node, int rank) {
  const std::string source = o_.hosts[rank].Endpoint();
  if (data_.has_manifest()) {
    bool any = false;
    for (const DataFile& f : data_.missing_files()) any = any || !Refused(rank, f.name);
    if (!any) return false;  // it refused everything still missing, lately
  }
  std::shared_ptr<net::PendingLink> pending =
      node.ConnectTo(rank, net::kDataFetchChannel, absl::Now() + o_.dial_timeout);
  if (!WaitLink(*pending, o_.dial_timeout + absl::Seconds(1))) {
    pending->Cancel();
    if (!stopping_) problems_[rank] = "no answer";
    return false;
  }
  absl::StatusOr<std::unique_ptr<net::Link>> link = pending->Take();
  if (!link.ok()) {
    problems_[rank] = std::string(link.status().message());
    return false;
  }
  net::TcpConnection& conn = (*link)->connection();
  FetchMessage ask;
  ask.kind = FetchKind::kManifestRequest;
  absl::Status st = conn.SendOwned(net::FrameType::kControl, EncodeFetchMessage(ask));
  absl::StatusOr<FetchMessage> answer = st.ok() ? Receive(conn, source) : st;
  if (!answer.ok()) {
    problems_[rank] = std::string(answer.status().message());
    return false;
  }
  if (answer->kind == FetchKind::kNoData) {
    problems_[rank] = absl::StrCat("has no data: ", answer->text);
    return false;
  }
  if (answer->kind != FetchKind::kManifest) {
    problems_[rank] = absl::StrCat("answered with a ", FetchKindName(answer->kind), " message");
    return false;
  }
  const bool had_manifest = data_.has_manifest();
  if (absl::Status adopted = data_.AdoptManifest(answer->text, source); !adopted.ok()) {
    problems_[rank] = std::string(adopted.message());
    LogWarning("data fetch: not using %s: %s", source, adopted.message());
    return false;
  }
  if (!had_manifest) LogInfo("data fetch: manifest from %s", source);
  bool progress = !had_manifest;
  for (const DataFile& f : data_.missing_files()) {
    if (Refused(rank, f.name)) continue;
    const FileResult r = FetchFile(conn, source, f);
    if (Stopping()) return progress;  // what arrived is kept (PartialFile's record)
    if (r.outcome == Outcome::kLinkFailed) {
      problems_[rank] = r.why;
      LogInfo("data fetch: link to %s failed during %s (%s); trying again or another peer", source,
              f.name, r.why);
      return progress;
    }
    if (r.outcome == Outcome::kRefused) {
      refused_[{rank, f.name}] = absl::Now();
      const std::string line = absl::StrFormat("%s from %s: %s", f.name, source, r.why);
      report_->refusals.push_back(line);
      LogWarning("data fetch: refused %s; fetching it from another peer", line);
      // The source streams nothing more for this request; its link stays usable.
      continue;
    }
    progress = true;
  }
  return progress;
}

absl::Status Fetcher::Run() {
  net::TcpNodeOptions no;
  no.hosts = o_.hosts;
  no.observer = true;
  no.secret = o_.secret;
  no.encrypt = o_.encrypt;
  no.cluster_id = o_.cluster_id;
  no.io_threads = 1;
  absl::StatusOr<std::shared_ptr<net::TcpNode>> node = net::TcpNode::Start(std::move(no));
  if (!node.ok()) return node.status();
  const absl::Time deadline = absl::Now() + o_.wait;
  const std::vector<int> order = SourceOrder();
  data_.SetFetching(true);
  LogInfo("data fetch into %s: %s", data_.dir(),
          data_.has_manifest() ? absl::StrFormat("%d files missing", data_.missing_files().size())
                               : std::string("no manifest yet"));
  absl::Status result;
  while (true) {
    if (data_.has_manifest() && data_.missing_files().empty()) {
      result = data_.MarkComplete();
      break;
    }
    if (Stopping()) {
      result = absl::CancelledError(
          data_.has_manifest()
              ? absl::StrFormat("stopped while fetching the data directory %s: %.1f of %.1f MB "
                                "are here and checked (in %s/%s); the next run resumes from them",
                                data_.dir(), data_.have_bytes() / 1e6, data_.total_bytes() / 1e6,
                                data_.dir(), kFetchDirName)
              : absl::StrFormat("stopped while fetching the data directory %s: no peer had "
                                "sent its manifest yet; nothing was written",
                                data_.dir()));
      break;
    }
    if (absl::Now() > deadline) {
      std::vector<std::string> lines;
      for (int r : order) {
        lines.push_back(absl::StrCat(o_.hosts[r].Endpoint(), ": ",
                                     problems_.count(r) ? problems_[r] : "not tried"));
      }
      result = absl::DeadlineExceededError(absl::StrFormat(
          "could not fetch the data directory %s from the peers within %d s (--wait); %s. "
          "Each peer's last problem: %s",
          data_.dir(), absl::ToInt64Seconds(o_.wait),
          data_.has_manifest() ? absl::StrFormat("%d files missing", data_.missing_files().size())
                               : std::string("no peer sent its manifest"),
          absl::StrJoin(lines, "; ")));
      break;
    }
    bool progress = false;
    for (int r : order) {
      if (Stopping() || (data_.has_manifest() && data_.missing_files().empty())) break;
      progress = FetchFrom(**node, r) || progress;
      if (progress) break;  // start again from the nearest source
    }
    if (!progress && !Stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  data_.SetFetching(false);
  report_->seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  if (result.ok()) LogProgress("done", true);
  return result;
}

}  // namespace

absl::Status FetchMissing(const FetcherOptions& options, LocalData& data, FetchReport* report) {
  Fetcher f(options, data, report);
  return f.Run();
}

}  // namespace rt::fetch
