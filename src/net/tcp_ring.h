// TcpRing: RingTransport over authenticated TCP links (TcpNode), in a caller-given order.
//
// The ring order is a permutation of hosts-file ranks: order[i] sits at ring position
// i, sends to order[i+1] and receives from order[i-1] (mod n). rank() is the ring
// position, not the hosts-file rank. Forming the ring dials the successor and accepts
// the predecessor concurrently, logging every `log_every` which neighbours are still
// missing, and fails with a clear error when the wait ends (or Cancelled, within
// ~100 ms, once `cancelled` says so). A ring formed later in
// another order (probed links) or with other members (a new view) reuses the same node with
// a new `channel`, so old and new links never mix.
//
// Messages: SendToNext computes the crc32c on the caller's thread (or takes the
// caller's: SendToNextWithCrc32c) and queues a scatter-gather write (header + the caller's bytes,
// no copy); RecvFromPrev swaps the received buffer into the caller's vector (no copy; its old
// capacity is recycled); RecvFromPrevInto lets the link's reader read a message straight into
// its destination (announced in advance with PostRecvsInto, even while earlier messages are
// queued), and RecvFromPrevIntoAll waits for a run of such messages with one wake-up.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/ring_transport.h"
#include "net/tcp_node.h"

namespace rt::net {

struct TcpRingOptions {
  TcpNodeOptions node;     // hosts, self_rank, secret, cluster id, fingerprint, ...
  std::vector<int> order;  // ring order as hosts-file ranks; empty = 0..n-1
  uint64_t channel = 0;    // distinguishes ring formations on one node
  absl::Duration wait = absl::Seconds(120);     // how long to wait for the neighbours
  absl::Duration log_every = absl::Seconds(5);  // progress lines while waiting
};

class TcpRing : public RingTransport {
 public:
  // Starts a node (listens on self's port) and forms the ring.
  static absl::StatusOr<std::unique_ptr<TcpRing>> Create(const TcpRingOptions& options);
  // Forms a ring on an existing node (re-forming in another order, new membership).
  // The order must contain node->self_rank() and only hosts-file ranks, each once.
  // `cancelled` (optional, polled about every 100 ms on the calling thread) gives the
  // formation up: both pending links are cancelled and the result is Cancelled.
  static absl::StatusOr<std::unique_ptr<TcpRing>> Form(
      std::shared_ptr<TcpNode> node, std::vector<int> order, uint64_t channel, absl::Duration wait,
      absl::Duration log_every = absl::Seconds(5),
      const std::function<bool()>& cancelled = nullptr);
  ~TcpRing() override;

  int rank() const override { return position_; }
  int size() const override { return static_cast<int>(order_.size()); }
  absl::Status SendToNext(absl::Span<const uint8_t> data) override;
  absl::Status SendToNextWithCrc32c(absl::Span<const uint8_t> data, uint32_t crc32c) override;
  absl::Status WaitSendsDone(absl::Duration timeout) override;
  absl::Status RecvFromPrev(std::vector<uint8_t>* message, absl::Duration timeout) override;
  // Reads the payload straight from the socket into dst when the caller waits before
  // it arrives (TcpConnection::RecvDataInto); `scratch` is unused.
  absl::Status RecvFromPrevInto(absl::Span<uint8_t> dst, std::vector<uint8_t>* scratch,
                                absl::Duration timeout) override;
  absl::Status RecvFromPrevIntoAll(absl::Span<const absl::Span<uint8_t>> dsts,
                                   std::vector<uint8_t>* scratch, absl::Duration timeout) override;
  // Announced messages are read in place by the link's reader as soon as they arrive.
  absl::Status PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts) override;
  void CancelRecvsInto() override;

  // Frames sent from now on carry `epoch`; older frames received are refused. A ring
  // formed from another (re-ordered by a probe) must be given the epoch of the one it
  // replaces (collective::ProbeAndReorder does).
  void SetEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }
  // Frames sent from now on carry `step` (the training step they belong to).
  void SetStep(uint64_t step);
  bool encrypted() const { return node_->options().encrypt; }  // links sealed (--encrypt)
  const std::vector<int>& order() const { return order_; }
  int host_rank() const { return order_[position_]; }
  const std::shared_ptr<TcpNode>& node() const { return node_; }
  Link* next_link() { return next_.get(); }  // null when size() == 1
  Link* prev_link() { return prev_.get(); }
  uint64_t bytes_sent() const;

 private:
  TcpRing(std::shared_ptr<TcpNode> node, std::vector<int> order, int position)
      : node_(std::move(node)), order_(std::move(order)), position_(position) {}

  std::shared_ptr<TcpNode> node_;
  std::vector<int> order_;
  int position_;
  std::unique_ptr<Link> next_;  // connection we dialed: we send on it
  std::unique_ptr<Link> prev_;  // connection we accepted: we receive on it
  uint64_t epoch_ = 0;
};

}  // namespace rt::net
