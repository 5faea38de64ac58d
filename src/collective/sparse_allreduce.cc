// Sparse allgather-and-sum in rank order.
#include "collective/sparse_allreduce.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "collective/small_collectives.h"
#include "collective/sparse_codec.h"
#include "core/status_macros.h"

namespace rt::collective {

bool SparsePays(int n_peers, double density) { return n_peers * density < 2.0; }

absl::Status SparseAllgatherSum(net::RingTransport* ring, absl::Span<const uint8_t> mine,
                                absl::Span<float> bucket, absl::Duration timeout,
                                uint64_t* bytes_sent) {
  ASSIGN_OR_RETURN(auto all, AllgatherBytes(ring, mine, timeout));
  if (bytes_sent != nullptr && ring->size() > 1) {
    for (int k = 0; k < ring->size() - 1; ++k) {
      *bytes_sent += all[(ring->rank() - k + ring->size()) % ring->size()].size();
    }
  }
  std::fill(bucket.begin(), bucket.end(), 0.0f);
  SparseVector v;
  for (size_t p = 0; p < all.size(); ++p) {  // rank order
    absl::Status s = DecodeSparse(all[p], static_cast<uint32_t>(bucket.size()), &v);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("from peer %d: %s", p, s.message()));
    }
    for (size_t j = 0; j < v.indices.size(); ++j) bucket[v.indices[j]] += Bf16ToFloat(v.values[j]);
  }
  return absl::OkStatus();
}

}  // namespace rt::collective
