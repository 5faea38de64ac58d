// The status responder of a ring peer and the observer's query (see status_channel.h).
#include "observe/status_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/byte_codec.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "observe/status_json.h"

namespace rt::observe {
namespace {

constexpr uint32_t kRequestMagic = 0x51535452u;  // "RTSQ" in memory order
constexpr uint8_t kRequestVersion = 1;

std::vector<uint8_t> Request() {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Int<uint32_t>(kRequestMagic);
  w.Int<uint8_t>(kRequestVersion);
  return out;
}

bool IsRequest(const std::vector<uint8_t>& bytes) { return bytes == Request(); }

}  // namespace

StatusResponder::StatusResponder(std::shared_ptr<net::TcpNode> node,
                                 std::shared_ptr<StatusBoard> board, absl::Duration answer_timeout)
    : node_(std::move(node)), board_(std::move(board)), answer_timeout_(answer_timeout) {
  thread_ = std::thread([this] { Loop(); });
  node_->SetObserverHandler([this](std::shared_ptr<net::TcpConnection> conn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || pending_.size() >= kMaxPendingObservers) {
      conn->Close();
      return;
    }
    pending_.push_back(std::move(conn));
    cv_.notify_all();
  });
}

StatusResponder::~StatusResponder() {
  node_->SetObserverHandler(nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& c : pending_) c->Close();
    pending_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void StatusResponder::Loop() {
  while (true) {
    std::shared_ptr<net::TcpConnection> conn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      conn = std::move(pending_.front());
      pending_.pop_front();
    }
    std::vector<uint8_t> request;
    absl::Status st = conn->RecvControl(&request, answer_timeout_);
    if (st.ok() && !IsRequest(request)) {
      st = absl::InvalidArgumentError("not a status request");
    }
    if (st.ok()) {
      StatusJsonOptions o;
      o.history = false;
      o.max_events = 50;
      const std::string json = StatusJson(board_->Snapshot(), o);
      st =
          conn->SendOwned(net::FrameType::kControl, std::vector<uint8_t>(json.begin(), json.end()));
      // Let the answer go out before closing: the client closes once it has read it.
      if (st.ok()) (void)conn->RecvControl(&request, answer_timeout_);
    }
    if (!st.ok())
      LogDebug("status request from %s: %s", conn->peer_name(), std::string(st.message()));
    conn->Close();
  }
}

absl::StatusOr<StatusAnswer> QueryRingStatus(const std::vector<net::HostEntry>& hosts,
                                             const std::string& secret,
                                             const std::string& cluster_id, absl::Duration timeout,
                                             bool encrypt) {
  net::TcpNodeOptions o;
  o.encrypt = encrypt;
  o.hosts = hosts;
  o.observer = true;
  o.secret = secret;
  o.cluster_id = cluster_id;
  o.io_threads = 1;
  o.handshake_timeout = timeout;
  o.socket_buffer_bytes = 0;
  o.loopback_socket_buffer_bytes = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<net::TcpNode> node, net::TcpNode::Start(std::move(o)));
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<net::PendingLink>> dials;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    dials.push_back(node->ConnectTo(r, net::kObserverChannel, deadline));
  }
  std::vector<std::string> problems(hosts.size());
  std::vector<bool> done(hosts.size(), false);
  size_t left = hosts.size();
  while (left > 0 && absl::Now() < deadline + absl::Seconds(1)) {
    for (size_t r = 0; r < dials.size(); ++r) {
      if (done[r] || !dials[r]->Wait(absl::Milliseconds(5))) continue;
      done[r] = true;
      --left;
      absl::StatusOr<std::unique_ptr<net::Link>> link = dials[r]->Take();
      if (!link.ok()) {
        problems[r] = std::string(link.status().message());
        continue;
      }
      net::TcpConnection& c = (*link)->connection();
      std::vector<uint8_t> answer;
      absl::Status st = c.SendOwned(net::FrameType::kControl, Request());
      if (st.ok())
        st = c.RecvControl(&answer, std::max(absl::Milliseconds(100), deadline - absl::Now()));
      if (!st.ok()) {
        problems[r] = absl::StrCat("no answer: ", st.message());
        continue;
      }
      for (auto& d : dials) d->Cancel();
      return StatusAnswer{hosts[r].Endpoint(), std::string(answer.begin(), answer.end())};
    }
  }
  for (auto& d : dials) d->Cancel();
  std::vector<std::string> lines;
  for (size_t r = 0; r < hosts.size(); ++r) {
    lines.push_back(
        absl::StrCat(hosts[r].Endpoint(), ": ",
                     problems[r].empty() ? "no answer within the timeout" : problems[r]));
  }
  return absl::UnavailableError(
      absl::StrCat("no peer of the hosts file answered: ", absl::StrJoin(lines, "; ")));
}

}  // namespace rt::observe
