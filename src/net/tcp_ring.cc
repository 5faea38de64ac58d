// TcpRing: ring formation over a TcpNode and the RingTransport methods.
#include "net/tcp_ring.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"

namespace rt::net {
namespace {

// How long dropping a ring waits for its sending link's socket to close (~TcpRing).
constexpr absl::Duration kCloseWait = absl::Seconds(5);

}  // namespace

absl::StatusOr<std::unique_ptr<TcpRing>> TcpRing::Create(const TcpRingOptions& options) {
  absl::StatusOr<std::shared_ptr<TcpNode>> node = TcpNode::Start(options.node);
  if (!node.ok()) return node.status();
  std::vector<int> order = options.order;
  if (order.empty()) {
    for (int r = 0; r < (*node)->num_hosts(); ++r) order.push_back(r);
  }
  return Form(*std::move(node), std::move(order), options.channel, options.wait, options.log_every);
}

absl::StatusOr<std::unique_ptr<TcpRing>> TcpRing::Form(std::shared_ptr<TcpNode> node,
                                                       std::vector<int> order, uint64_t channel,
                                                       absl::Duration wait,
                                                       absl::Duration log_every,
                                                       const std::function<bool()>& cancelled) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  bool valid = !sorted.empty() &&
               std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
               sorted.front() >= 0 && sorted.back() < node->num_hosts();
  auto self = std::find(order.begin(), order.end(), node->self_rank());
  if (!valid || self == order.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ring order [%s] must list distinct hosts-file ranks (0..%d) including this peer (%d)",
        absl::StrJoin(order, ","), node->num_hosts() - 1, node->self_rank()));
  }
  const int position = static_cast<int>(self - order.begin());
  const int n = static_cast<int>(order.size());
  std::unique_ptr<TcpRing> ring(new TcpRing(node, order, position));
  if (n == 1) return ring;

  const int next = order[(position + 1) % n];
  const int prev = order[(position + n - 1) % n];
  const absl::Time deadline = absl::Now() + wait;
  std::shared_ptr<PendingLink> out = node->ConnectTo(next, channel, deadline);
  std::shared_ptr<PendingLink> in = node->AcceptFrom(prev, channel, deadline);
  LogInfo(
      "forming ring of %d in order [%s]: this peer is rank %d at position %d, sends to %s, "
      "receives from %s",
      n, absl::StrJoin(order, ","), node->self_rank(), position, node->PeerName(next),
      node->PeerName(prev));
  absl::Time next_log = absl::Now() + log_every;
  std::shared_ptr<PendingLink> pending[2] = {out, in};
  std::unique_ptr<Link>* slot[2] = {&ring->next_, &ring->prev_};
  while (!ring->next_ || !ring->prev_) {
    if (cancelled && cancelled()) {
      for (int i = 0; i < 2; ++i) {
        if (!*slot[i]) pending[i]->Cancel();
      }
      return absl::CancelledError(absl::StrFormat(
          "forming the ring of %d in order [%s] was given up", n, absl::StrJoin(order, ",")));
    }
    bool waited = false;
    for (int i = 0; i < 2; ++i) {
      if (*slot[i]) continue;
      bool done = pending[i]->Wait(waited ? absl::ZeroDuration() : absl::Milliseconds(100));
      waited = true;
      if (!done) continue;
      auto link = pending[i]->Take();
      if (!link.ok()) {
        // The first failure ends the formation: the other link alone is of no use.
        pending[1 - i]->Cancel();
        return link.status();
      }
      *slot[i] = *std::move(link);
    }
    if (absl::Now() >= next_log && (!ring->next_ || !ring->prev_)) {
      std::vector<std::string> missing;
      for (int i = 0; i < 2; ++i) {
        if (!*slot[i]) missing.push_back(pending[i]->Describe());
      }
      LogInfo("still waiting for ring neighbours: %s", absl::StrJoin(missing, "; "));
      next_log = absl::Now() + log_every;
    }
  }
  LogInfo("ring formed: %s -> this peer -> %s", ring->prev_->peer_name(), ring->next_->peer_name());
  return ring;
}

TcpRing::~TcpRing() {
  // SendToNext does not copy: a queued message is the caller's bytes until the link's
  // writer handed them to the kernel. A caller that stopped waiting for its sends (an
  // aborted collective gives WaitSendsDone at most 1 s; a successor that stopped reading
  // keeps them queued) and then drops the ring goes on to reuse those bytes: the next
  // step's gradients, a round's contribution redone among the survivors. ~Link only
  // posts the close to the io thread, so until that ran the writer could still copy
  // bytes being overwritten into the socket (a data race, and a frame whose payload
  // no longer matches its checksum). So the links are closed here and the ring goes
  // only once the sending link's socket is closed (its writer joined, nothing queued
  // read any more): after ~TcpRing, none of the caller's bytes is read. Rings are
  // dropped on training threads, never on the io thread that does the close; the wait
  // is bounded all the same.
  if (prev_) prev_->connection().Close();
  if (!next_) return;
  next_->connection().Close();
  const absl::Status closed = next_->connection().WaitSendsDone(kCloseWait);
  if (absl::IsDeadlineExceeded(closed)) {
    LogWarning(
        "ring to %s dropped before its socket closed (%s): a queued send may still read "
        "the caller's bytes",
        next_->peer_name(), std::string(closed.message()));
  }
}

absl::Status TcpRing::SendToNext(absl::Span<const uint8_t> data) {
  if (!next_) return absl::FailedPreconditionError("a ring of one peer has no successor");
  return next_->connection().SendData(data, 0);
}

absl::Status TcpRing::SendToNextWithCrc32c(absl::Span<const uint8_t> data, uint32_t crc32c) {
  if (!next_) return absl::FailedPreconditionError("a ring of one peer has no successor");
  return next_->connection().SendData(data, 0, crc32c);
}

absl::Status TcpRing::WaitSendsDone(absl::Duration timeout) {
  if (!next_) return absl::OkStatus();
  return next_->connection().WaitSendsDone(timeout);
}

absl::Status TcpRing::RecvFromPrev(std::vector<uint8_t>* message, absl::Duration timeout) {
  if (!prev_) return absl::FailedPreconditionError("a ring of one peer has no predecessor");
  return prev_->connection().RecvData(message, timeout);
}

absl::Status TcpRing::RecvFromPrevInto(absl::Span<uint8_t> dst, std::vector<uint8_t>* /*scratch*/,
                                       absl::Duration timeout) {
  if (!prev_) return absl::FailedPreconditionError("a ring of one peer has no predecessor");
  return prev_->connection().RecvDataInto(dst, timeout);
}

absl::Status TcpRing::RecvFromPrevIntoAll(absl::Span<const absl::Span<uint8_t>> dsts,
                                          std::vector<uint8_t>* scratch, absl::Duration timeout) {
  if (!prev_) return RingTransport::RecvFromPrevIntoAll(dsts, scratch, timeout);
  return prev_->connection().RecvDataIntoAll(dsts, timeout);
}

absl::Status TcpRing::PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts) {
  if (!prev_) return absl::FailedPreconditionError("a ring of one peer has no predecessor");
  return prev_->connection().PostRecvsInto(skip, dsts);
}

void TcpRing::CancelRecvsInto() {
  if (prev_) prev_->connection().CancelRecvsInto();
}

void TcpRing::SetEpoch(uint64_t epoch) {
  epoch_ = epoch;
  if (next_) next_->connection().SetEpoch(epoch);
  if (prev_) prev_->connection().SetEpoch(epoch);
}

void TcpRing::SetStep(uint64_t step) {
  if (next_) next_->connection().SetStep(step);
  if (prev_) prev_->connection().SetStep(step);
}

uint64_t TcpRing::bytes_sent() const { return next_ ? next_->connection().bytes_sent() : 0; }

}  // namespace rt::net
