// The per-connection handshake state machine (see tcp_handshake.h): hello, proof,
// fingerprint, with the node's checks of the peer and the handshake timeout. Moved out
// of tcp_node.cc unchanged; TcpNode keeps what a result means for a dial or a wait.
#include "net/tcp_handshake.h"

#include <asio/steady_timer.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "net/frame_cipher.h"
#include "net/handshake.h"
#include "net/tcp_node.h"

namespace rt::net {

// One connection's handshake (tcp_handshake.h). Not in an anonymous namespace: TcpNode
// names it a friend (it records fingerprint mismatches through NoteMismatch).
struct Handshake : std::enable_shared_from_this<Handshake> {
  using Done = HandshakeDone;  // what it reports: see tcp_handshake.h
  enum class State { kHello, kProof, kFingerprint, kDone };

  Handshake(const TcpNode& node, const std::shared_ptr<TcpConnection>& c, bool is_dialer,
            int expected, uint64_t chan, Done on_done)
      : node(node),
        weak_conn(c),
        dialer(is_dialer),
        expected_rank(expected),
        expected_endpoint(is_dialer ? node.Host(expected).Endpoint() : std::string()),
        channel(chan),
        timer(c->socket().get_executor()),
        done(std::move(on_done)) {}

  void Start(std::shared_ptr<TcpConnection> conn) {
    Hello hello;
    hello.cluster_id = node.options().cluster_id;
    hello.rank = node.self_rank();
    hello.endpoint = node.self_endpoint();
    hello.channel = channel;
    hello.dialer = dialer;
    hello.encrypt = node.options().encrypt;
    hello.nonce = RandomNonce();
    my_nonce = hello.nonce;
    my_hello = EncodeHello(hello);
    auto self = shared_from_this();
    timer.expires_after(absl::ToChronoNanoseconds(node.options().handshake_timeout));
    timer.async_wait([self](const asio::error_code& ec) {
      if (ec || self->state == State::kDone) return;
      auto c = self->weak_conn.lock();
      if (c) c->Close();
      self->Finish(absl::DeadlineExceededError(absl::StrFormat(
                       "%s did not complete the handshake within %s", self->Display(c),
                       absl::FormatDuration(self->node.options().handshake_timeout))),
                   c);
    });
    conn->StartReading(
        [self](const FrameHeader& h, std::vector<uint8_t>&& p) { self->OnFrame(h, std::move(p)); },
        [self](const absl::Status& st) { self->Finish(st, nullptr); });
    (void)conn->SendOwned(FrameType::kHello, my_hello);
  }

  std::string Display(const std::shared_ptr<TcpConnection>& c) const {
    return c ? c->peer_name() : "peer";
  }

  void OnFrame(const FrameHeader& h, std::vector<uint8_t>&& payload) {
    auto conn = weak_conn.lock();
    if (!conn || state == State::kDone) return;
    const std::string peer = conn->peer_name();
    FrameType want = state == State::kHello   ? FrameType::kHello
                     : state == State::kProof ? FrameType::kProof
                                              : FrameType::kFingerprint;
    if (h.type != want) {
      return Refuse(
          conn,
          absl::DataLossError(absl::StrFormat("%s sent a %s frame where the handshake expects %s",
                                              peer, FrameTypeName(h.type), FrameTypeName(want))),
          "protocol error");
    }
    const TcpNodeOptions& opt = node.options();
    if (state == State::kHello) {
      absl::StatusOr<Hello> hello = DecodeHello(payload, peer);
      if (!hello.ok()) return Refuse(conn, hello.status(), std::string(hello.status().message()));
      claimed_endpoint = hello->endpoint;
      const int known = hello->endpoint == node.self_endpoint() ? -1 : node.RankOf(hello->endpoint);
      // Known before the checks so that a refusal is attributed to the claimed peer.
      if (known >= 0) peer_rank = known;
      if (hello->cluster_id != opt.cluster_id) {
        return Refuse(conn,
                      absl::FailedPreconditionError(
                          absl::StrFormat("%s belongs to cluster '%s', this peer to '%s'", peer,
                                          hello->cluster_id, opt.cluster_id)),
                      absl::StrFormat("cluster id differs: you are in '%s', I am in '%s'",
                                      hello->cluster_id, opt.cluster_id));
      }
      if (hello->encrypt != opt.encrypt) {
        return Refuse(conn,
                      absl::FailedPreconditionError(absl::StrFormat(
                          "%s runs with --encrypt %s, this peer with --encrypt %s: every peer "
                          "must seal its links alike (--encrypt auto is on unless every host "
                          "is loopback)",
                          peer, EncryptName(hello->encrypt), EncryptName(opt.encrypt))),
                      absl::StrFormat("--encrypt differs: you run with --encrypt %s, I run with "
                                      "--encrypt %s",
                                      EncryptName(hello->encrypt), EncryptName(opt.encrypt)));
      }
      if (hello->dialer == dialer) {
        return Refuse(conn, absl::DataLossError(peer + " sent a hello with the wrong role"),
                      "protocol error");
      }
      if (dialer && hello->endpoint != expected_endpoint) {
        return Refuse(
            conn,
            absl::FailedPreconditionError(
                absl::StrFormat("%s answered as %s (rank %d of its hosts file): do the hosts files "
                                "differ between peers?",
                                peer, hello->endpoint, hello->rank)),
            absl::StrFormat("you answered as %s, I dialed %s", hello->endpoint, expected_endpoint));
      }
      if (!dialer && hello->endpoint == node.self_endpoint()) {
        return Refuse(conn,
                      absl::InvalidArgumentError(absl::StrFormat(
                          "%s claims this peer's own endpoint %s", peer, hello->endpoint)),
                      "you claim my endpoint");
      }
      observer = !dialer && hello->endpoint.empty() && IsObserverChannel(hello->channel);
      if (!dialer && known < 0 && !observer) {
        // Unlisted: refused before the proof, so nothing is learned either way.
        const std::string why = absl::StrFormat(
            "%s %s %s: copy the edited hosts file to every peer and signal them (SIGHUP)",
            hello->endpoint, kNotListed, node.self_endpoint());
        return Refuse(conn, absl::UnavailableError(peer + " claims to be " + why), why);
      }
      if (!dialer && opt.observers_only && !observer) {
        const std::string why = absl::StrFormat("%s %s from peers; it joins the ring when done",
                                                node.self_endpoint(), kStillFetchingData);
        return Refuse(conn, absl::UnavailableError(why), why);
      }
      peer_rank = dialer ? expected_rank : observer ? kObserverRank : known;
      if (!dialer) channel = hello->channel;
      peer_hello = std::move(payload);
      if (opt.encrypt) {
        // Before our proof goes out and before the peer's fingerprint is read: both are
        // frames this side seals / opens from kFirstSealedSequence on.
        conn->SetFrameKeys(DeriveFrameKeys(opt.secret, dialer ? my_nonce : hello->nonce,
                                           dialer ? hello->nonce : my_nonce, dialer));
      }
      Proof proof = ComputeProof(opt.secret, dialer, dialer ? my_hello : peer_hello,
                                 dialer ? peer_hello : my_hello);
      state = State::kProof;
      (void)conn->SendOwned(FrameType::kProof, std::vector<uint8_t>(proof.begin(), proof.end()));
      return;
    }
    if (state == State::kProof) {
      Proof expected = ComputeProof(opt.secret, !dialer, dialer ? my_hello : peer_hello,
                                    dialer ? peer_hello : my_hello);
      if (!ProofEquals(payload, expected)) {
        return Refuse(conn,
                      absl::PermissionDeniedError(
                          absl::StrFormat("%s failed to prove the shared secret: --secret-file / "
                                          "RINGTRAIN_SECRET differ between the peers",
                                          node.PeerName(peer_rank))),
                      "authentication failed: the shared secrets differ");
      }
      authenticated = true;
      state = State::kFingerprint;
      (void)conn->SendOwned(FrameType::kFingerprint, EncodeFingerprint(opt.fingerprint));
      return;
    }
    absl::StatusOr<Fingerprint> fp = DecodeFingerprint(payload, node.PeerName(peer_rank));
    if (!fp.ok()) return Refuse(conn, fp.status(), "malformed fingerprint");
    // An observer knows no fingerprint, and a peer's does not concern it.
    if (!observer && !opt.observer) {
      absl::Status same = CompareFingerprints(opt.fingerprint, *fp, node.PeerName(peer_rank));
      if (!same.ok()) {
        node.NoteMismatch(dialer ? expected_endpoint : claimed_endpoint, *fp,
                          std::string(same.message()));
        return Refuse(conn, same, kFingerprintDiffers);
      }
    }
    const char* client = channel == kDataFetchChannel ? "data client " : "status client ";
    conn->Establish(peer_rank, observer ? client + conn->peer_name() : node.PeerName(peer_rank));
    Finish(absl::OkStatus(), conn);
  }

  void Refuse(const std::shared_ptr<TcpConnection>& conn, const absl::Status& why,
              const std::string& reason_for_peer) {
    if (state == State::kDone) return;
    conn->SendErrorAndClose(reason_for_peer);
    Finish(why, nullptr);
  }

  void Finish(const absl::Status& st, const std::shared_ptr<TcpConnection>& conn) {
    if (state == State::kDone) return;
    state = State::kDone;
    asio::error_code ignored;
    timer.cancel();
    Done d = std::move(done);
    d(st, st.ok() ? conn : nullptr, peer_rank, channel, authenticated, claimed_endpoint);
  }

  const TcpNode& node;
  std::weak_ptr<TcpConnection> weak_conn;
  bool dialer;
  int expected_rank;
  std::string expected_endpoint;  // dialer: the endpoint of expected_rank
  std::string claimed_endpoint;
  uint64_t channel;
  asio::steady_timer timer;
  Done done;
  State state = State::kHello;
  std::vector<uint8_t> my_hello, peer_hello;
  Nonce my_nonce{};
  int peer_rank = -1;
  bool authenticated = false;
  bool observer = false;  // the acceptor side of an observer's connection
};

void StartHandshake(const TcpNode& node, const std::shared_ptr<TcpConnection>& conn, bool is_dialer,
                    int expected_rank, uint64_t channel, HandshakeDone on_done) {
  auto hs = std::make_shared<Handshake>(node, conn, is_dialer, expected_rank, channel,
                                        std::move(on_done));
  hs->Start(conn);
}

}  // namespace rt::net
