// The ring's GradientReducer (see ring_gradient_reducer.h).
#include "train/ring_gradient_reducer.h"

#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collective/small_collectives.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/param_hash.h"

namespace rt::train {
namespace {

// Network errors get the step and a hint: on a ring one failure cascades (each peer
// sees its neighbour leave), so the peer named is not necessarily the one that failed.
absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message(),
                                             " (the ring is broken: the first peer to fail "
                                             "logged the cause; restart all with --resume)"));
}

std::vector<uint8_t> U64Bytes(absl::Span<const uint64_t> values) {
  std::vector<uint8_t> out(values.size() * 8);
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Peers grouped by value, as "peers 0,2 have X; peer 1 has Y".
std::string DescribeGroups(const std::vector<std::string>& per_peer) {
  std::map<std::string, std::vector<int>> groups;
  for (size_t p = 0; p < per_peer.size(); ++p) groups[per_peer[p]].push_back(static_cast<int>(p));
  std::vector<std::string> parts;
  for (const auto& [value, peers] : groups) {
    parts.push_back(absl::StrFormat("%s %s %s %s", peers.size() == 1 ? "peer" : "peers",
                                    absl::StrJoin(peers, ","), peers.size() == 1 ? "has" : "have",
                                    value));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

RingGradientReducer::RingGradientReducer(std::unique_ptr<net::RingTransport> ring,
                                         RingReducerOptions options,
                                         std::function<uint64_t()> bytes_sent)
    : ring_(std::move(ring)),
      options_(std::move(options)),
      transport_bytes_(std::move(bytes_sent)) {}

RingGradientReducer::~RingGradientReducer() = default;

absl::Status RingGradientReducer::BeginStep(int64_t step, absl::Span<float> grads) {
  if (buckets_ == nullptr || grads.size() != length_) {
    length_ = grads.size();
    buckets_ =
        std::make_unique<collective::BucketedReducer>(ring_.get(), length_, options_.buckets);
    LogInfo("gradient buckets: %d of up to %.3g MiB over %.2fM floats, codec %s",
            buckets_->buckets().size(), options_.buckets.bucket_bytes / 1048576.0, length_ / 1e6,
            options_.buckets.codec.ToString());
  }
  step_ = step;
  RETURN_IF_ERROR(WithContext(buckets_->Start(grads, step), absl::StrCat("step ", step + 1)));
  in_step_ = true;
  return absl::OkStatus();
}

void RingGradientReducer::OnGradReady(size_t offset) {
  if (in_step_) buckets_->GradReady(offset);
}

absl::Status RingGradientReducer::Finish(StepTotals* totals) {
  if (!in_step_) return absl::FailedPreconditionError("Finish without BeginStep");
  in_step_ = false;
  collective::ReduceStepStats stats;
  RETURN_IF_ERROR(WithContext(buckets_->Finish(&stats),
                              absl::StrFormat("step %d: gradient allreduce", step_ + 1)));
  counted_bytes_ += stats.bytes_sent;
  last_stats_ = std::move(stats);

  // Loss and token counts: exact sums in rank order (tokens < 2^53 are exact doubles).
  double values[2] = {totals->loss_sum, static_cast<double>(totals->tokens)};
  RETURN_IF_ERROR(WithContext(collective::AllreduceSumF64(ring_.get(), values, options_.timeout),
                              absl::StrFormat("step %d: summing loss and tokens", step_ + 1)));
  counted_bytes_ += sizeof(values) * static_cast<uint64_t>(peers() - 1);
  totals->loss_sum = values[0];
  totals->tokens = static_cast<int64_t>(values[1]);
  return absl::OkStatus();
}

absl::Status RingGradientReducer::CheckParamHash(int64_t step, uint64_t param_hash) {
  if (options_.check_every <= 0 || step % options_.check_every != 0 || peers() == 1) {
    return absl::OkStatus();
  }
  const uint64_t mine[1] = {param_hash};
  absl::StatusOr<std::vector<std::vector<uint8_t>>> all =
      collective::AllgatherBytes(ring_.get(), U64Bytes(mine), options_.timeout);
  RETURN_IF_ERROR(
      WithContext(all.status(), absl::StrFormat("step %d: comparing param_hash", step)));
  counted_bytes_ += 8 * static_cast<uint64_t>(peers() - 1);
  std::vector<std::string> hashes;
  bool same = true;
  for (const std::vector<uint8_t>& bytes : *all) {
    uint64_t h = 0;
    if (bytes.size() != 8) return absl::DataLossError("param_hash message of wrong length");
    std::memcpy(&h, bytes.data(), 8);
    hashes.push_back(ParamHashHex(h));
    same = same && h == param_hash;
  }
  if (!same) {
    return absl::InternalError(absl::StrFormat(
        "replicas diverged: param_hash differs after step %d: %s (DESIGN invariant 2; stopping)",
        step, DescribeGroups(hashes)));
  }
  return absl::OkStatus();
}

absl::Status RingGradientReducer::SyncState(int64_t* step,
                                            const std::vector<absl::Span<float>>& state) {
  if (peers() == 1) return absl::OkStatus();
  // Everyone's step and state hashes; the leader's win.
  std::vector<uint64_t> mine = {static_cast<uint64_t>(*step)};
  for (absl::Span<float> s : state) mine.push_back(ParamHash(s));
  absl::StatusOr<std::vector<std::vector<uint8_t>>> all =
      collective::AllgatherBytes(ring_.get(), U64Bytes(mine), options_.timeout);
  RETURN_IF_ERROR(WithContext(all.status(), "comparing the starting state of the peers"));
  const std::vector<uint8_t>& leader = (*all)[0];
  std::vector<int> differ;
  for (size_t p = 0; p < all->size(); ++p) {
    if ((*all)[p] != leader) differ.push_back(static_cast<int>(p));
  }
  if (differ.empty()) return absl::OkStatus();
  int64_t leader_step = 0;
  std::memcpy(&leader_step, leader.data(), 8);
  LogInfo("peers %s start from another state than rank 0 (step %d): copying rank 0's state",
          absl::StrJoin(differ, ","), leader_step);
  for (absl::Span<float> s : state) {
    absl::Span<uint8_t> bytes(reinterpret_cast<uint8_t*>(s.data()), s.size() * sizeof(float));
    RETURN_IF_ERROR(WithContext(RingBroadcastFromRank0(ring_.get(), bytes, options_.timeout),
                                "copying rank 0's state"));
  }
  *step = leader_step;
  return absl::OkStatus();
}

uint64_t RingGradientReducer::bytes_sent() const {
  return transport_bytes_ ? transport_bytes_() : counted_bytes_;
}

absl::Status RingBroadcastFromRank0(net::RingTransport* ring, absl::Span<uint8_t> data,
                                    absl::Duration timeout, size_t chunk_bytes) {
  const int n = ring->size(), rank = ring->rank();
  if (n == 1 || data.empty()) return absl::OkStatus();
  const bool forward = rank + 1 < n;  // the last peer's successor is rank 0
  std::vector<uint8_t> message;
  for (size_t begin = 0; begin < data.size(); begin += chunk_bytes) {
    const size_t len = std::min(chunk_bytes, data.size() - begin);
    absl::Span<uint8_t> chunk = data.subspan(begin, len);
    if (rank != 0) {
      RETURN_IF_ERROR(ring->RecvFromPrev(&message, timeout));
      if (message.size() != len) {
        return absl::DataLossError(absl::StrFormat(
            "broadcast chunk at byte %d has %d bytes, expected %d (peers disagree on sizes)", begin,
            message.size(), len));
      }
      std::memcpy(chunk.data(), message.data(), len);
    }
    if (forward) RETURN_IF_ERROR(ring->SendToNext(chunk));
  }
  return ring->WaitSendsDone(timeout);
}

}  // namespace rt::train
