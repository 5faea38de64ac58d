// Ring allgather of byte strings and the exact small sums built on it.
#include "collective/small_collectives.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace rt::collective {
namespace {

// Gathers every peer's values (same count on all peers) as raw bytes.
template <typename T>
absl::StatusOr<std::vector<std::vector<uint8_t>>> GatherValues(net::RingTransport* ring,
                                                               absl::Span<const T> values,
                                                               absl::Duration timeout) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  ASSIGN_OR_RETURN(
      auto all,
      AllgatherBytes(ring, absl::MakeConstSpan(bytes, values.size() * sizeof(T)), timeout));
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].size() != values.size() * sizeof(T)) {
      return absl::DataLossError(absl::StrFormat(
          "small allreduce: peer %d sent %d bytes, peer %d expected %d (%d values)", p,
          all[p].size(), ring->rank(), values.size() * sizeof(T), values.size()));
    }
  }
  return all;
}

template <typename T>
absl::Status SumInRankOrder(net::RingTransport* ring, absl::Span<T> values,
                            absl::Duration timeout) {
  ASSIGN_OR_RETURN(auto all, GatherValues<T>(ring, values, timeout));
  for (size_t i = 0; i < values.size(); ++i) {
    T sum = 0;
    for (const auto& peer : all) {
      T v;
      std::memcpy(&v, peer.data() + i * sizeof(T), sizeof(T));
      sum += v;
    }
    values[i] = sum;
  }
  return absl::OkStatus();
}

using Strings = std::vector<std::vector<uint8_t>>;

// Strings a send still reads after WaitSendsDone timed out (a successor that stopped
// reading, its link not yet closed): kept for the process's life instead of freed
// under the transport's writer. Rare (the ring is being given up) and small
// (AllgatherBytes carries small figures and top-k selections).
void KeepForWriter(Strings strings) {
  static std::mutex mu;
  static std::vector<Strings>* kept = new std::vector<Strings>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(strings));
}

}  // namespace

absl::StatusOr<std::vector<std::vector<uint8_t>>> AllgatherBytes(net::RingTransport* ring,
                                                                 absl::Span<const uint8_t> mine,
                                                                 absl::Duration timeout) {
  const int n = ring->size(), rank = ring->rank();
  Strings all(n);
  all[rank].assign(mine.begin(), mine.end());
  // Step k: pass on the string of peer rank-k (ours first), receive that of rank-k-1.
  // The outer vector never resizes, so a string we queued stays put until the wait.
  absl::Status status;
  bool queued = false;
  for (int k = 0; k < n - 1 && status.ok(); ++k) {
    const int send_from = (rank - k + n) % n;
    const int recv_from = (rank - k - 1 + 2 * n) % n;
    status = ring->SendToNext(all[send_from]);
    queued = queued || status.ok();
    if (status.ok()) status = ring->RecvFromPrev(&all[recv_from], timeout);
  }
  if (!queued) {
    RETURN_IF_ERROR(status);
    return all;
  }
  // Even when a receive failed (the predecessor left), the successor's link may
  // still be writing our strings: they must outlive that.
  const absl::Status sent = ring->WaitSendsDone(timeout);
  if (absl::IsDeadlineExceeded(sent)) KeepForWriter(std::move(all));
  if (!status.ok()) return status;
  if (!sent.ok()) return sent;
  return all;
}

absl::Status AllreduceSumU64(net::RingTransport* ring, absl::Span<uint64_t> values,
                             absl::Duration timeout) {
  return SumInRankOrder<uint64_t>(ring, values, timeout);
}

absl::Status AllreduceSumF64(net::RingTransport* ring, absl::Span<double> values,
                             absl::Duration timeout) {
  return SumInRankOrder<double>(ring, values, timeout);
}

}  // namespace rt::collective
