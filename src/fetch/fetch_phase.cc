// The data phase before training (see fetch_phase.h).
#include "fetch/fetch_phase.h"

#include <set>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "fetch/data_server.h"
#include "fetch/fetch_messages.h"
#include "fetch/local_data.h"
#include "net/tcp_node.h"

namespace rt::fetch {
namespace {

// Asks `rank` whether it is complete; false on any problem.
bool PeerComplete(net::TcpNode& node, int rank, absl::Duration timeout) {
  std::shared_ptr<net::PendingLink> pending =
      node.ConnectTo(rank, net::kDataFetchChannel, absl::Now() + timeout);
  if (!pending->Wait(timeout + absl::Seconds(1))) {
    pending->Cancel();
    return false;
  }
  absl::StatusOr<std::unique_ptr<net::Link>> link = pending->Take();
  if (!link.ok()) return false;
  FetchMessage ask;
  ask.kind = FetchKind::kStatusRequest;
  net::TcpConnection& conn = (*link)->connection();
  if (!conn.SendOwned(net::FrameType::kControl, EncodeFetchMessage(ask)).ok()) return false;
  std::vector<uint8_t> bytes;
  if (!conn.RecvData(&bytes, timeout).ok()) return false;
  absl::StatusOr<FetchMessage> m = DecodeFetchMessage(bytes, (*link)->peer_name());
  return m.ok() && m->kind == FetchKind::kStatus && m->complete;
}

}  // namespace

bool DataDirComplete(const std::string& dir) {
  absl::StatusOr<std::shared_ptr<LocalData>> d = LocalData::Open(dir);
  return d.ok() && (*d)->complete();
}

absl::Status RunFetchPhase(const FetchPhaseOptions& o, FetchReport* report) {
  absl::StatusOr<std::shared_ptr<LocalData>> data = LocalData::Open(o.dir);
  if (!data.ok()) return data.status();
  net::TcpNodeOptions no;
  no.hosts = o.hosts;
  no.self_rank = o.self_rank;
  no.secret = o.secret;
  no.encrypt = o.encrypt;
  no.cluster_id = o.cluster_id;
  // Only data-fetch clients (observers: no fingerprint compared) are served here; a
  // ring peer that dials this port meanwhile is told to retry later.
  no.observers_only = true;
  absl::StatusOr<std::shared_ptr<net::TcpNode>> node = net::TcpNode::Start(std::move(no));
  if (!node.ok()) return node.status();
  DataServer server(*node, *data);
  const absl::Time deadline = absl::Now() + o.wait;
  if ((*data)->complete()) {
    LogInfo("data directory %s is complete here (%.1f MB): serving it", o.dir,
            (*data)->total_bytes() / 1e6);
  } else {
    FetcherOptions fo;
    fo.hosts = o.hosts;
    fo.self_rank = o.self_rank;
    fo.secret = o.secret;
    fo.encrypt = o.encrypt;
    fo.cluster_id = o.cluster_id;
    fo.wait = o.wait;
    fo.stop = o.stop;
    if (absl::Status st = FetchMissing(fo, **data, report); !st.ok()) return st;
  }
  if (!o.serve_until_all_complete) return absl::OkStatus();

  // Every other peer seen complete once (completion never goes back).
  net::TcpNodeOptions co;
  co.hosts = o.hosts;
  co.observer = true;
  co.secret = o.secret;
  co.encrypt = o.encrypt;
  co.cluster_id = o.cluster_id;
  co.io_threads = 1;
  absl::StatusOr<std::shared_ptr<net::TcpNode>> client = net::TcpNode::Start(std::move(co));
  if (!client.ok()) return client.status();
  std::set<int> waiting;
  for (int r = 0; r < static_cast<int>(o.hosts.size()); ++r) {
    if (r != o.self_rank) waiting.insert(r);
  }
  absl::Time last_log = absl::Now();
  while (!waiting.empty()) {
    if (o.stop && o.stop()) {
      return absl::CancelledError("stopped while waiting for the other peers to have the data");
    }
    for (auto it = waiting.begin(); it != waiting.end();) {
      it = PeerComplete(**client, *it, absl::Seconds(2)) ? waiting.erase(it) : std::next(it);
    }
    if (waiting.empty()) break;
    if (absl::Now() > deadline) {
      std::vector<std::string> names;
      for (int r : waiting) names.push_back(o.hosts[r].Endpoint());
      return absl::DeadlineExceededError(absl::StrFormat(
          "this peer has the data, but %s did not report theirs complete within --wait",
          absl::StrJoin(names, ", ")));
    }
    if (absl::Now() - last_log > absl::Seconds(10)) {
      last_log = absl::Now();
      std::vector<std::string> names;
      for (int r : waiting) names.push_back(o.hosts[r].Endpoint());
      LogInfo("serving data; waiting for %s to complete", absl::StrJoin(names, ", "));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  LogInfo("every peer has the data (served %.1f MB); serving %g s more",
          server.bytes_served() / 1e6, absl::ToDoubleSeconds(o.linger));
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(o.linger));
  return absl::OkStatus();
}

}  // namespace rt::fetch
