// TcpNode: listener, dialing with backoff, and handing out links once their handshake
// (tcp_handshake.cc) succeeded. The slot table is in tcp_node_hosts.cc, the state both
// share in tcp_node_impl.h.
#include "net/tcp_node.h"

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/log.h"
#include "net/socket_tuning.h"
#include "net/tcp_handshake.h"
#include "net/tcp_node_impl.h"

namespace rt::net {
namespace {

using asio::ip::tcp;

std::chrono::nanoseconds Until(absl::Time deadline) {
  absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
  return absl::ToChronoNanoseconds(left);
}

int BufferBytes(const TcpNodeOptions& options, bool loopback) {
  return loopback ? options.loopback_socket_buffer_bytes : options.socket_buffer_bytes;
}

// Congestion control matters on real links only (loopback has no loss and no queue).
std::string Congestion(const TcpNodeOptions& options, bool loopback) {
  return loopback ? std::string() : options.congestion_control;
}

// Latency and throughput settings every ring socket gets; `congestion` "" = the kernel's.
void ConfigureSocket(tcp::socket& s, int buffer_bytes, const std::string& congestion) {
  asio::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  s.set_option(asio::socket_base::keep_alive(true), ec);
  int fd = s.native_handle();
  TuneSocketBuffers(fd,
                    buffer_bytes);  // socket_tuning.h: explicit only where that beats autotuning
  SetCongestionControl(fd, congestion);
  // Dead peers behind silent links are found in ~1 minute even without heartbeats.
  int idle = 30, interval = 10, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

std::string EndpointString(const tcp::endpoint& ep) {
  const auto a = ep.address();
  return a.is_v6() ? absl::StrFormat("[%s]:%d", a.to_string(), ep.port())
                   : absl::StrFormat("%s:%d", a.to_string(), ep.port());
}

bool IsFatal(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsPermissionDenied(s);
}

// A refusal for a differing fingerprint: NoteMismatch logs those (once each).
bool IsMismatch(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) && absl::StartsWith(s.message(), kFingerprintDiffers);
}

}  // namespace

// One outgoing connection attempt sequence, retried with backoff until the deadline.
struct Dial : std::enable_shared_from_this<Dial> {
  Dial(TcpNode* n, int r, uint64_t ch, absl::Time dl, std::shared_ptr<PendingLink> p)
      : node(n),
        rank(r),
        channel(ch),
        deadline(dl),
        pending(std::move(p)),
        timer(node->impl_->dial_context()) {}

  void Attempt() {
    if (!pending->BeginAttempt()) return;  // cancelled
    if (absl::Now() >= deadline) {
      std::string refused = node->RefusalFor(rank);
      pending->Fulfil(absl::DeadlineExceededError(absl::StrFormat(
          "%s did not accept a connection within the wait (%d attempt(s); last problem: %s)%s",
          node->PeerName(rank), attempts, last_problem.empty() ? "none" : last_problem,
          refused.empty() ? "" : "; its own connection to us was refused: " + refused)));
      return;
    }
    ++attempts;
    if (!node->IsActive(rank)) {
      pending->Fulfil(absl::UnavailableError(node->PeerName(rank) +
                                             " was removed from this peer's hosts list"));
      return;
    }
    HostEntry host = node->Host(rank);
    for (const auto& [endpoint, via] : node->options().dial_via) {
      if (endpoint != host.Endpoint()) continue;
      const size_t colon = via.rfind(':');
      host.address = via.substr(0, colon);
      host.port = static_cast<uint16_t>(std::atoi(via.c_str() + colon + 1));
    }
    asio::error_code ec;
    tcp::endpoint ep(asio::ip::make_address(host.address, ec), host.port);
    if (ec) {
      pending->Fulfil(absl::InvalidArgumentError("bad address " + host.address));
      return;
    }
    socket = std::make_unique<tcp::socket>(node->impl_->dial_context());
    socket->open(ep.protocol(), ec);
    if (ec) return Retry("socket: " + ec.message());
    ConfigureSocket(*socket, BufferBytes(node->options(), host.is_loopback),
                    Congestion(node->options(), host.is_loopback));
    auto self = shared_from_this();
    timer.expires_after(
        std::min<std::chrono::nanoseconds>(std::chrono::seconds(3), Until(deadline)));
    timer.async_wait([self](const asio::error_code& e) {
      if (!e && self->socket) {
        asio::error_code ignored;
        self->socket->close(ignored);
      }
    });
    socket->async_connect(ep, [self](const asio::error_code& e) {
      self->timer.cancel();
      if (e) return self->Retry("connect: " + e.message());
      self->Connected();
    });
  }

  void Connected() {
    auto conn = std::make_shared<TcpConnection>(std::move(*socket), node->PeerName(rank),
                                                node->options().link);
    socket.reset();
    auto self = shared_from_this();
    StartHandshake(*node, conn, /*is_dialer=*/true, rank, channel,
                   [self](const absl::Status& st, const std::shared_ptr<TcpConnection>& c, int,
                          uint64_t, bool, const std::string&) {
                     if (st.ok()) {
                       if (!self->pending->Fulfil(c)) c->Close();
                       return;
                     }
                     // Not listed (yet) by the acceptor: it may be once its hosts file is agreed.
                     if (IsFatal(st) && !absl::StrContains(st.message(), kNotListed) &&
                         !absl::StrContains(st.message(), kStillFetchingData)) {
                       if (!IsMismatch(st)) LogError("%s", std::string(st.message()));
                       self->pending->Fulfil(st);
                       return;
                     }
                     self->Retry(std::string(st.message()));
                   });
  }

  void Retry(const std::string& problem) {
    last_problem = problem;
    pending->BackOff(problem);
    auto self = shared_from_this();
    timer.expires_after(
        std::min<std::chrono::nanoseconds>(absl::ToChronoNanoseconds(backoff), Until(deadline)));
    backoff = std::min(backoff * 2, absl::Seconds(1));
    timer.async_wait([self](const asio::error_code& e) {
      if (!e) self->Attempt();
    });
  }

  // Raw: the node stops and joins its io threads before it is destroyed, so no
  // handler of a dial can run after that (pending ones are destroyed unrun).
  TcpNode* node;
  int rank;
  uint64_t channel;
  absl::Time deadline;
  std::shared_ptr<PendingLink> pending;
  asio::steady_timer timer;
  std::unique_ptr<tcp::socket> socket;
  absl::Duration backoff = absl::Milliseconds(50);
  int attempts = 0;
  std::string last_problem;
};

TcpNode::TcpNode(TcpNodeOptions options)
    : options_(std::move(options)),
      self_endpoint_(options_.observer ? std::string()
                                       : options_.hosts[options_.self_rank].Endpoint()),
      impl_(std::make_unique<Impl>(std::max(1, options_.io_threads))) {
  for (const HostEntry& h : options_.hosts) impl_->slots.push_back({h, true});
}

TcpNode::~TcpNode() {
  for (auto& g : impl_->guards) g.reset();
  for (auto& c : impl_->contexts) c->stop();
  for (auto& t : impl_->threads) t.join();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->arrived.clear();
    impl_->waiting.clear();
  }
  impl_->acceptor.reset();
}

void TcpNode::SetObserverHandler(std::function<void(std::shared_ptr<TcpConnection>)> handler) {
  std::lock_guard<std::mutex> lock(impl_->handler_mu);  // waits for a call in progress
  impl_->observer_handler = std::move(handler);
}

void TcpNode::SetDataFetchHandler(std::function<void(std::shared_ptr<TcpConnection>)> handler) {
  std::lock_guard<std::mutex> lock(impl_->handler_mu);  // waits for a call in progress
  impl_->data_fetch_handler = std::move(handler);
}

std::string TcpNode::RefusalFor(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->refusals.find(rank);
  return it == impl_->refusals.end() ? "" : it->second;
}

void TcpNode::NoteMismatch(const std::string& endpoint, const Fingerprint& theirs,
                           const std::string& refusal) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  FingerprintMismatch& m = impl_->mismatches[endpoint];
  m.endpoint = endpoint;
  m.theirs = theirs;
  m.difference = FingerprintDifference(options_.fingerprint, theirs);
  m.last_refused = absl::Now();
  if (impl_->mismatch_warned.emplace(endpoint, m.difference).second) {
    LogWarning("refused a connection: %s", refusal);
  } else {
    LogDebug("refused a connection again: %s", refusal);
  }
}

std::vector<FingerprintMismatch> TcpNode::FingerprintMismatches() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<FingerprintMismatch> out;
  for (const auto& [endpoint, m] : impl_->mismatches) out.push_back(m);
  return out;
}

absl::StatusOr<std::shared_ptr<TcpNode>> TcpNode::Start(TcpNodeOptions options) {
  if (options.observer) options.self_rank = -1;
  if (!options.observer &&
      (options.self_rank < 0 || options.self_rank >= static_cast<int>(options.hosts.size()))) {
    return absl::InvalidArgumentError(absl::StrFormat("self rank %d is not in the hosts list of %d",
                                                      options.self_rank, options.hosts.size()));
  }
  if (options.secret.empty() && !AllLoopback(options.hosts)) {
    return absl::FailedPreconditionError(
        "a shared secret is required unless every host is loopback (--secret-file or "
        "RINGTRAIN_SECRET)");
  }
  if (options.secret.empty() && options.encrypt) {
    return absl::FailedPreconditionError(
        "--encrypt on needs a shared secret (--secret-file or RINGTRAIN_SECRET)");
  }
  if (options.dial_via.empty()) {
    if (const char* via = std::getenv("RINGTRAIN_TEST_DIAL_VIA")) {
      for (absl::string_view pair : absl::StrSplit(via, ',', absl::SkipEmpty())) {
        std::vector<std::string> parts = absl::StrSplit(pair, '=');
        if (parts.size() != 2) {
          return absl::InvalidArgumentError("RINGTRAIN_TEST_DIAL_VIA: expected ENDPOINT=HOST:PORT");
        }
        options.dial_via.emplace_back(parts[0], parts[1]);
      }
    }
  }
  std::shared_ptr<TcpNode> node(new TcpNode(std::move(options)));
  if (!node->options_.observer) {
    absl::Status st = node->Listen();
    if (!st.ok()) return st;
  }
  for (auto& ctx : node->impl_->contexts) {
    asio::io_context* c = ctx.get();
    node->impl_->threads.emplace_back([c] { c->run(); });
  }
  return node;
}

absl::Status TcpNode::Listen() {
  const HostEntry& self = options_.hosts[options_.self_rank];
  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(self.address, ec);
  if (ec) return absl::InvalidArgumentError("bad address " + self.address);
  // Behind NAT the hosts-file address may not be local: listen on all interfaces
  // then. Loopback rings bind their exact address so several can share a machine.
  bool exact = self.is_loopback;
  if (!exact)
    address = self.is_ipv6 ? asio::ip::address(asio::ip::address_v6::any())
                           : asio::ip::address(asio::ip::address_v4::any());
  tcp::endpoint ep(address, self.port);
  tcp::acceptor& acc = *impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && ep.protocol() == tcp::v6() && !exact) acc.set_option(asio::ip::v6_only(false), ec);
  // A loopback listener only ever accepts loopback peers.
  const int buffer_bytes = BufferBytes(options_, exact);
  // Set before listen() so accepted sockets inherit it (and a matching window scale).
  if (!ec) TuneSocketBuffers(acc.native_handle(), buffer_bytes);
  if (!ec) acc.bind(ep, ec);
  if (ec == asio::error::address_in_use) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (rank %d, hosts file line %d): port %d is already in use — is "
        "another ringtrain or another program using it? Stop it or pick another port",
        self.Endpoint(), options_.self_rank, self.line, self.port));
  }
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (rank %d): %s", self.Endpoint(), options_.self_rank, ec.message()));
  }
  listen_port_ = acc.local_endpoint().port();
  AcceptNext();
  return absl::OkStatus();
}

void TcpNode::AcceptNext() {
  impl_->acceptor->async_accept(impl_->accept_context(),
                                [this](const asio::error_code& ec, tcp::socket socket) {
                                  if (ec == asio::error::operation_aborted) return;
                                  if (!ec) OnIncoming(std::move(socket));
                                  AcceptNext();
                                });
}

void TcpNode::OnIncoming(tcp::socket socket) {
  asio::error_code ec;
  tcp::endpoint remote = socket.remote_endpoint(ec);
  const std::string from = ec ? std::string("unknown address") : EndpointString(remote);
  const bool loopback = !ec && remote.address().is_loopback();
  ConfigureSocket(socket, BufferBytes(options_, loopback), Congestion(options_, loopback));
  auto conn =
      std::make_shared<TcpConnection>(std::move(socket), "connection from " + from, options_.link);
  // Runs on the accepted socket's io thread: post there.
  asio::post(impl_->accept_context(), [this, conn, from] {
    StartHandshake(
        *this, conn, /*is_dialer=*/false, -1, 0,
        [this, from](const absl::Status& st, const std::shared_ptr<TcpConnection>& c, int rank,
                     uint64_t channel, bool authenticated, const std::string& claimed) {
          OnHandshakeDone(st, c, rank, channel, authenticated, from, claimed);
        });
  });
}

void TcpNode::OnHandshakeDone(const absl::Status& st, const std::shared_ptr<TcpConnection>& conn,
                              int rank, uint64_t channel, bool authenticated,
                              const std::string& from, const std::string& claimed_endpoint) {
  if (st.ok() && rank == kObserverRank) {
    std::lock_guard<std::mutex> lock(impl_->handler_mu);  // held during the call (see Impl)
    const std::function<void(std::shared_ptr<TcpConnection>)>& handler =
        channel == kDataFetchChannel ? impl_->data_fetch_handler : impl_->observer_handler;
    if (handler) {
      handler(conn);
    } else {
      conn->Close();
    }
    return;
  }
  auto key = std::make_pair(rank, channel);
  std::shared_ptr<PendingLink> pending;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->waiting.find(key);
  if (it != impl_->waiting.end()) pending = it->second;
  if (st.ok() && !IsActive(rank)) {
    // SetHosts removed the peer while its handshake ran.
    conn->Close();
    LogInfo("dropped connection from %s: %s left the hosts list during the handshake", from,
            claimed_endpoint);
    return;
  }
  if (!st.ok()) {
    // An unlisted peer retries about once a second: warn once per endpoint.
    const bool unlisted = rank < 0 && absl::IsUnavailable(st) && !claimed_endpoint.empty();
    if (IsMismatch(st) || options_.observers_only) {
      LogDebug("refused connection from %s: %s", from, std::string(st.message()));
    } else if (!unlisted || impl_->unlisted_warned.insert(claimed_endpoint).second) {
      LogWarning("refused connection from %s%s: %s", from,
                 authenticated ? "" : " (unauthenticated)", std::string(st.message()));
    } else {
      LogDebug("refused connection from %s: %s", from, std::string(st.message()));
    }
    if (rank >= 0) {
      impl_->refusals[rank] = std::string(st.message());
      if (pending) {
        pending->Note("refused an attempt: " + std::string(st.message()));
        // A peer with another secret or configuration will not change its mind: fail
        // now instead of at the deadline. (Garbage and timeouts are not fatal: a
        // stranger cannot stop a ring from forming by sending junk.)
        if (IsFatal(st)) {
          pending->Fulfil(st);
          impl_->waiting.erase(it);
        }
      }
    }
    return;
  }
  if (pending) {
    impl_->waiting.erase(it);
    if (pending->Fulfil(conn)) return;
  }
  auto old = impl_->arrived.find(key);
  if (old != impl_->arrived.end()) old->second->Close();  // the peer reconnected
  impl_->arrived[key] = conn;
}

std::shared_ptr<PendingLink> TcpNode::ConnectTo(int rank, uint64_t channel, absl::Time deadline) {
  auto pending = std::make_shared<PendingLink>();
  pending->node_ = weak_from_this();
  pending->peer_rank_ = rank;
  pending->what_ = "connecting to " + PeerName(rank);
  if (!IsActive(rank) || rank == self_rank()) {
    pending->Fulfil(absl::InvalidArgumentError(absl::StrFormat("cannot connect to rank %d", rank)));
    return pending;
  }
  auto dial = std::make_shared<Dial>(this, rank, channel, deadline, pending);
  asio::post(impl_->dial_context(), [dial] { dial->Attempt(); });
  return pending;
}

std::shared_ptr<PendingLink> TcpNode::AcceptFrom(int rank, uint64_t channel, absl::Time deadline) {
  auto pending = std::make_shared<PendingLink>();
  pending->node_ = weak_from_this();
  pending->peer_rank_ = rank;
  pending->what_ = "waiting for " + PeerName(rank) + " to connect";
  if (!IsActive(rank) || rank == self_rank()) {
    pending->Fulfil(
        absl::InvalidArgumentError(absl::StrFormat("cannot accept from rank %d", rank)));
    return pending;
  }
  auto key = std::make_pair(rank, channel);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!IsActive(rank)) {  // SetHosts removed it just now
      pending->Fulfil(absl::UnavailableError(PeerName(rank) + " is not in the hosts list"));
      return pending;
    }
    auto it = impl_->arrived.find(key);
    if (it != impl_->arrived.end()) {
      pending->Fulfil(it->second);
      impl_->arrived.erase(it);
      return pending;
    }
    auto old = impl_->waiting.find(key);
    if (old != impl_->waiting.end()) old->second->Cancel();
    impl_->waiting[key] = pending;
  }
  auto timer = std::make_shared<asio::steady_timer>(impl_->dial_context(), Until(deadline));
  std::weak_ptr<PendingLink> weak = pending;
  timer->async_wait([this, timer, weak, key, rank](const asio::error_code& ec) {
    auto p = weak.lock();
    if (ec || !p) return;
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::string why;
    auto r = impl_->refusals.find(rank);
    if (r != impl_->refusals.end()) why = "; its last attempt was refused: " + r->second;
    if (p->Fulfil(absl::DeadlineExceededError(
            absl::StrFormat("%s never connected within the wait%s", PeerName(rank), why)))) {
      auto it = impl_->waiting.find(key);
      if (it != impl_->waiting.end() && it->second == p) impl_->waiting.erase(it);
    }
  });
  return pending;
}

}  // namespace rt::net
