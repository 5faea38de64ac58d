// TcpNode: this peer's presence on the network — a listener, Asio I/O threads, and
// authenticated links to any other peer of the hosts file.
//
// A node listens on its hosts-file port from Start() on. ConnectTo(rank, channel)
// dials a peer (retrying with backoff until the deadline); AcceptFrom(rank, channel)
// waits for a peer to dial us. Every connection runs the handshake (messages:
// handshake.h; the state machine: tcp_handshake.h) before it is handed out, so a link
// always belongs to a peer that knows the secret and runs the same configuration.
// `channel` tells links apart: a ring uses one channel per formation, so rings in
// another order (probed links) or after a membership change (a new view) never pick
// up a stale link; probes can use their own channels.
// Strangers (garbage, wrong secret, timeouts) are logged and dropped; they never
// disturb other links.
//
// Identity and the run-time host list: a peer is identified by the
// endpoint its hello names (its own hosts-file entry, HostEntry::Endpoint(); covered
// by the HMAC proof), not by its rank in its own file. A connection is accepted only
// from an endpoint in this node's current host list; others are refused (the dialer
// keeps retrying: the peer may list it soon). Node ranks are *slots*, stable for the
// node's life: the start list fills slots 0..n-1 in hosts-file order; SetHosts keeps
// the slot of every endpoint it still names, appends new endpoints as new slots and
// deactivates the rest (a re-added endpoint gets its old slot back). ConnectTo and
// AcceptFrom take slots; a slot that is deactivated fails its dials and waits at once.
// Established links are not closed by SetHosts: their owners drop them.
//
// Observers: a node started with `observer` listens
// nowhere and has no hosts-file entry of its own; it dials peers of its host list on
// kObserverChannel (or kDataFetchChannel) only, proving the shared secret like any peer (its hello
// names no endpoint, and no fingerprint is compared either way: it knows none). A peer hands such
// authenticated connections to its observer handler (SetObserverHandler), never to AcceptFrom, so
// an observer can never take part in a ring.
//
// Threads: `io_threads` Asio threads (dialed connections on the first, accepted ones
// on the last, so a ring's send and receive streams run in parallel). Public methods
// are thread-safe. Links keep their node alive; the node stops its threads when the
// last owner releases it (never release it from an io thread).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/handshake.h"
#include "net/hosts_file.h"
#include "net/tcp_connection.h"

namespace rt::net {

// The channel observers dial ("STAT" + 1) and the rank their connections carry.
inline constexpr uint64_t kObserverChannel = 0x54415453'00000001ull;
inline constexpr int kObserverRank = -2;
// The channel of data-fetch clients ("DATA" + 1, src/fetch/): observers too (no
// endpoint, no fingerprint: a peer still fetching its data has none to compare), but
// handed to the data-fetch handler instead of the status one.
inline constexpr uint64_t kDataFetchChannel = 0x41544144'00000001ull;
inline bool IsObserverChannel(uint64_t channel) {
  return channel == kObserverChannel || channel == kDataFetchChannel;
}

struct TcpNodeOptions {
  std::vector<HostEntry> hosts;  // rank order
  int self_rank = -1;            // -1 with `observer`
  bool observer = false;         // a status client (see the file comment)
  std::string secret;            // "" only when every host is loopback
  // Seal every link after the handshake (AES-256-GCM, frame_cipher.h); needs a secret.
  // Peers that differ are refused (handshake.h).
  bool encrypt = false;
  std::string cluster_id = "ringtrain";  // hosts-file independent job name
  Fingerprint fingerprint;               // must equal on every peer
  LinkOptions link;
  int io_threads = 2;
  absl::Duration handshake_timeout = absl::Seconds(10);  // per connection
  // Per direction, the most a link may hold in flight: 16 MB is 1 Gbit/s at 128 ms RTT.
  // Set explicitly only where that beats the kernel's autotuning (socket_tuning.h);
  // 0 = kernel default.
  int socket_buffer_bytes = 16 << 20;
  // TCP congestion control of links to other machines ("" = the kernel's default).
  // bbr holds its rate under random loss; where the kernel refuses it the default is
  // used and logged once (socket_tuning.h).
  std::string congestion_control = "bbr";
  // The same for links to loopback peers: there the kernel's "network" is a copy
  // between processes, and small buffers keep those bytes in cache (measured on
  // 2 local peers: busbw 1.7 -> 2.2 GB/s best case for 496 MB allreduces).
  int loopback_socket_buffer_bytes = 256 << 10;
  // Tests: dial the peer whose endpoint is `first` at `second` instead ("HOST:PORT" of
  // a relay that forwards to it). Empty: $RINGTRAIN_TEST_DIAL_VIA, "E=A,E=A", if set.
  std::vector<std::pair<std::string, std::string>> dial_via;
  // Serve observers only (a peer's data phase, src/fetch/fetch_phase.h: it has no data
  // fingerprint yet). Ring peers that dial it are refused before the proof with a
  // reason containing kStillFetchingData, on which dialers keep retrying quietly, and
  // nothing is recorded as a fingerprint mismatch on either side.
  bool observers_only = false;
};

inline constexpr char kStillFetchingData[] = "is still fetching its data directory";

class TcpNode;

// A peer whose handshake was refused because its fingerprint differs from this
// node's (its settings differ), as last seen.
struct FingerprintMismatch {
  std::string endpoint;    // the peer's hosts-file entry, "10.0.0.2:29500"
  Fingerprint theirs;      // its whole fingerprint
  std::string difference;  // FingerprintDifference(ours, theirs)
  absl::Time last_refused;
};

// An authenticated link to one peer (thread-safe; see TcpConnection for semantics).
// Keeps its node alive; destroying it closes the connection.
class Link {
 public:
  Link(std::shared_ptr<TcpNode> node, std::shared_ptr<TcpConnection> connection, int peer_rank)
      : node_(std::move(node)), conn_(std::move(connection)), peer_rank_(peer_rank) {}
  ~Link() { conn_->Close(); }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer_rank() const { return peer_rank_; }
  std::string peer_name() const { return conn_->peer_name(); }
  TcpConnection& connection() { return *conn_; }

 private:
  std::shared_ptr<TcpNode> node_;
  std::shared_ptr<TcpConnection> conn_;
  int peer_rank_;
};

// The eventual result of ConnectTo / AcceptFrom.
class PendingLink {
 public:
  // Waits up to `timeout`; true once a result is ready.
  bool Wait(absl::Duration timeout);
  // The link or the error; only after Wait() returned true.
  absl::StatusOr<std::unique_ptr<Link>> Take();
  // What we are waiting for and the latest problem, for progress logs.
  std::string Describe() const;
  // Gives up; a link that arrives later is closed.
  void Cancel();
  // ConnectTo only: cancels the dial if it is waiting out the backoff between two
  // attempts, and says whether it did. A dial that is connecting or handshaking (or
  // done) is left alone: cancelling it would close a connection the peer may already
  // have accepted as its link from us, which the peer sees as a broken link.
  bool CancelIfBackingOff();

 private:
  friend class TcpNode;
  friend struct Dial;
  bool Fulfil(absl::StatusOr<std::shared_ptr<TcpConnection>> result);  // false if already done
  void Note(const std::string& note);
  // Dial: an attempt failed with `problem` and the next waits out the backoff.
  void BackOff(const std::string& problem);
  // Dial: false if done (cancelled); else the next attempt starts now.
  bool BeginAttempt();
  // Under mu_, not done: gives the link up (Cancel, CancelIfBackingOff).
  void CancelPendingLocked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool taken_ = false;
  bool backing_off_ = false;  // a dial between attempts (no connection of it is open)
  absl::StatusOr<std::shared_ptr<TcpConnection>> result_ = absl::UnknownError("pending");
  std::string what_;
  std::string note_;
  std::weak_ptr<TcpNode> node_;  // weak: the node holds pending links too
  int peer_rank_ = -1;
};

class TcpNode : public std::enable_shared_from_this<TcpNode> {
 public:
  // Binds and listens on the hosts-file port of self_rank. Errors: port in use, bad options.
  static absl::StatusOr<std::shared_ptr<TcpNode>> Start(TcpNodeOptions options);
  ~TcpNode();
  TcpNode(const TcpNode&) = delete;
  TcpNode& operator=(const TcpNode&) = delete;

  std::shared_ptr<PendingLink> ConnectTo(int rank, uint64_t channel, absl::Time deadline);
  std::shared_ptr<PendingLink> AcceptFrom(int rank, uint64_t channel, absl::Time deadline);

  // options().hosts is the START list; the current one is ActiveHosts().
  const TcpNodeOptions& options() const { return options_; }
  int self_rank() const { return options_.self_rank; }
  const std::string& self_endpoint() const { return self_endpoint_; }
  // Number of slots (active or not); only grows.
  int num_hosts() const;
  std::string PeerName(int rank) const;  // "rank 2 (10.0.0.3:29500)"

  // Replaces the host list (see the file comment). `hosts` must name this node's own
  // endpoint and no endpoint twice; without a secret every host must be loopback.
  // Pending dials and waits of deactivated slots fail (Unavailable), unclaimed
  // connections from them close. Errors change nothing.
  absl::Status SetHosts(const std::vector<HostEntry>& hosts);
  // The active slot of `endpoint` ("10.0.0.2:29500"), or -1.
  int RankOf(const std::string& endpoint) const;
  bool IsActive(int rank) const;
  // The entry of a slot (active or not); a default entry if out of range.
  HostEntry Host(int rank) const;
  // The active entries in slot order.
  std::vector<HostEntry> ActiveHosts() const;
  uint16_t listen_port() const { return listen_port_; }
  // Why the last incoming connection claiming `rank` was refused ("" if none was).
  std::string RefusalFor(int rank) const;
  // Receives every authenticated observer connection (on an io thread: hand it off,
  // never block); nullptr closes them. Without a handler they are closed. Once this
  // returns, the handler it replaced is neither running nor called again (the caller
  // may destroy what it captured); never call it from inside a handler.
  void SetObserverHandler(std::function<void(std::shared_ptr<TcpConnection>)> handler);
  // The same for observers that dialed kDataFetchChannel (src/fetch/data_server.h).
  void SetDataFetchHandler(std::function<void(std::shared_ptr<TcpConnection>)> handler);

  // Every peer refused for a differing fingerprint since Start (dialled or
  // accepted), one entry per endpoint with its newest fingerprint, in endpoint order.
  // The first refusal of each (endpoint, difference) is logged as a warning, repeats
  // at debug level (peers redial every few seconds).
  std::vector<FingerprintMismatch> FingerprintMismatches() const;

 private:
  struct Impl;
  explicit TcpNode(TcpNodeOptions options);
  absl::Status Listen();
  void AcceptNext();
  void OnIncoming(asio::ip::tcp::socket socket);
  // The handshake with `endpoint` found `theirs` differing (const: a record of what
  // was seen, like a log).
  void NoteMismatch(const std::string& endpoint, const Fingerprint& theirs,
                    const std::string& refusal) const;
  void OnHandshakeDone(const absl::Status& st, const std::shared_ptr<TcpConnection>& conn, int rank,
                       uint64_t channel, bool authenticated, const std::string& from,
                       const std::string& claimed_endpoint);

  TcpNodeOptions options_;
  std::string self_endpoint_;
  uint16_t listen_port_ = 0;
  std::unique_ptr<Impl> impl_;
  friend struct Dial;
  friend struct Handshake;
};

}  // namespace rt::net
