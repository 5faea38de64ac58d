// The handshake state machine every new TcpNode connection runs before it is handed
// out (dialed and accepted alike): hello, proof of the shared secret, fingerprint, in
// the order and format of handshake.h, plus the checks a node makes of the peer's
// hello (cluster id, --encrypt, role, the endpoint dialed or listed, observers-only),
// sealing the link (--encrypt) between hello and proof, and the handshake timeout.
//
// Internal to net/: TcpNode starts it (tcp_node.cc) and decides what a result means
// (hand the link out, retry the dial, log the refusal). It runs on the connection's io
// thread and holds the connection weakly: pending socket operations keep it alive,
// and no reference cycle outlives a failed handshake.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "net/tcp_connection.h"

namespace rt::net {

class TcpNode;

// In the reason an acceptor sends to a dialer it does not list: the dialer keeps
// retrying (the acceptor may list it once its edited hosts file is agreed).
inline constexpr char kNotListed[] = "is not in the hosts list of";

// Runs once on the io thread when the handshake ends. `conn` is null unless the status
// is OK (then the connection is established). peer_rank is -1 if the peer's hello never
// arrived (kObserverRank for an observer); authenticated = its proof verified;
// claimed_endpoint: the endpoint its hello named ("" if none arrived).
using HandshakeDone = std::function<void(
    const absl::Status&, const std::shared_ptr<TcpConnection>& conn, int peer_rank,
    uint64_t channel, bool authenticated, const std::string& claimed_endpoint)>;

// Starts the handshake on `conn` (on its io thread: it starts the connection's reading).
// A dialer expects `expected_rank` on `channel`; an acceptor passes -1 and 0 and learns
// both from the peer's hello. `node` must outlive the connection's io thread.
void StartHandshake(const TcpNode& node, const std::shared_ptr<TcpConnection>& conn, bool is_dialer,
                    int expected_rank, uint64_t channel, HandshakeDone on_done);

}  // namespace rt::net
