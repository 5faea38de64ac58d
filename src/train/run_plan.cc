// PlanRun: memory and time arithmetic behind `ringtrain plan` (see run_plan.h).
#include "train/run_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collective/bucketed_reducer.h"
#include "collective/codec_spec.h"
#include "core/status_macros.h"
#include "train/slot_balancer.h"

namespace rt::train {
namespace {

// Wire bytes per peer per step for a dense ring allreduce of n values of `bytes_per`.
double DenseRingBytes(double n, double bytes_per, int peers) {
  if (peers <= 1) return 0;
  return 2.0 * (peers - 1) / peers * n * bytes_per;
}

// Top-k: every peer's k = D n entries travel N-1 hops around the ring (allgather). An
// entry costs a bf16 value plus a delta-coded index, ~12 bits before zstd (FACTS.md).
double TopkRingBytes(double n, double density, int peers) {
  if (peers <= 1) return 0;
  constexpr double kBytesPerEntry = 2.0 + 1.5;
  return (peers - 1) * density * n * kBytesPerEntry;
}

// --zero 1, wire bytes per peer per step: the reduce-scatter of n values of
// `bytes_per`, during backward.
double ReduceScatterBytes(double n, double bytes_per, int peers) {
  if (peers <= 1) return 0;
  return static_cast<double>(peers - 1) / peers * n * bytes_per;
}

// --zero 1, after the optimizer step: the allgather of the updated fp32 parameters
// plus the replica forward (this peer's pieces' summed fp32 gradient to its successor).
double AfterUpdateBytes(double n, int peers) {
  if (peers <= 1) return 0;
  return static_cast<double>(peers - 1) / peers * n * 4 + 4 * n / peers;
}

// --compress as train accepts it; with --zero 1 only the dense codecs.
absl::Status CheckCompress(const std::string& compress, int zero) {
  if (zero == 1 && (compress == "auto" || absl::StartsWith(compress, "topk"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zero 1 works with --compress none or bf16, not ", compress,
        ": each peer's pieces are summed by a reduce-scatter, and a reduce-scatter cannot "
        "carry sparse sums (top-k's, which auto may pick, reach every peer whole)"));
  }
  if (compress == "auto") return absl::OkStatus();
  return collective::ParseCodecSpec(compress).status();  // its errors name --compress
}

}  // namespace

absl::StatusOr<RunPlan> PlanRun(const RunPlanInputs& in) {
  RETURN_IF_ERROR(in.config.Validate());
  if (in.peers < 1)
    return absl::InvalidArgumentError(absl::StrCat("--peers must be >= 1, got ", in.peers));
  if (in.accum < 1)
    return absl::InvalidArgumentError(absl::StrCat("--accum must be >= 1, got ", in.accum));
  if (in.ram_bytes <= 0) return absl::InvalidArgumentError("--ram-gb must be positive");
  if (in.link_bps <= 0) return absl::InvalidArgumentError("--link-mbps must be positive");
  if (in.gflops.size() > 1 && static_cast<int>(in.gflops.size()) != in.peers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--gflops lists %d peers, --peers is %d", in.gflops.size(), in.peers));
  }
  for (double g : in.gflops) {
    if (!(g > 0)) return absl::InvalidArgumentError("--gflops values must be positive");
  }
  if (in.zero != 0 && in.zero != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zero must be 0 (every peer holds all optimizer state) or 1 (sharded), got ", in.zero));
  }
  RETURN_IF_ERROR(CheckCompress(in.compress, in.zero));
  if (in.outer_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--outer-every must be >= 0 (0 = per-step sync), got ", in.outer_every));
  }
  collective::CodecSpec outer;
  if (in.outer_every > 0) {
    if (in.zero != 0 || in.compress != "none") {
      return absl::InvalidArgumentError(
          "--outer-every works with --zero 0 and --compress none only (each peer's inner steps "
          "need their whole AdamW state; the exchange's codec is --outer-compress)");
    }
    absl::StatusOr<collective::CodecSpec> spec = collective::ParseCodecSpec(in.outer_compress);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--outer-compress: ", spec.status().message()));
    }
    outer = *spec;
    if (in.outer_shard && (outer.kind != collective::CodecKind::kNone || in.outer_overlap)) {
      return absl::InvalidArgumentError(
          "--outer-shard on works with --outer-compress none and --outer-overlap off only");
    }
  }

  RunPlan p;
  const model::ParamLayout layout(in.config);
  const double n = static_cast<double>(layout.total_floats());
  p.n_params = layout.total_floats();
  p.flop_params = layout.flop_params();
  const bool bf16 = in.options.precision == model::Precision::kBf16;

  // See run_plan.h for what --zero 1 holds; on one peer there is nothing to shard.
  p.sharded = in.zero == 1 && in.peers >= 2;
  const double peers = in.peers;
  p.params = 4 * n;
  p.grads = 4 * n;
  p.adam = p.sharded ? 8 * n / peers : 8 * n;
  p.adam_replica = p.sharded ? 8 * n / peers : 0;
  p.commit_staging = p.sharded ? 4 * (2 * n / peers) : 0;
  p.bf16_weights = bf16 ? 2 * n : 0;
  // Error-feedback residual per value: the per-step codec's, or round sync's outer one.
  const std::string lossy = in.outer_every > 0 ? in.outer_compress : in.compress;
  p.residual = lossy == "none" ? 0 : 4 * n;
  // Round sync: the round-start copy and the outer momentum (sync/round_sync.h).
  p.round.every = in.outer_every;
  p.round.codec = in.outer_every > 0 ? outer.ToString() : "";
  p.round.overlap = in.outer_every > 0 && in.outer_overlap;
  p.round.sharded = in.outer_every > 0 && in.outer_shard && in.peers >= 2;
  p.round.outer_state_bytes = in.outer_every > 0 ? (p.round.overlap ? 16 : 8) * n : 0;
  if (p.round.sharded) p.round.outer_state_bytes = 24 * n / peers;  // see run_plan.h
  ASSIGN_OR_RETURN(size_t act, model::Gpt::EstimateActivationBytes(in.config, in.options));
  p.activations = static_cast<double>(act);
  p.reserve = in.reserve_bytes;
  const double fixed = p.params + p.grads + p.adam + p.adam_replica + p.commit_staging +
                       p.bf16_weights + p.residual + p.round.outer_state_bytes + p.reserve;
  p.total = fixed + p.activations;
  p.fits = p.total <= in.ram_bytes;

  // Largest batch that fits, by doubling then bisecting over the exact activation plan.
  auto fits_with = [&](int b) -> absl::StatusOr<bool> {
    model::GptOptions o = in.options;
    o.max_batch = b;
    ASSIGN_OR_RETURN(size_t a, model::Gpt::EstimateActivationBytes(in.config, o));
    return fixed + static_cast<double>(a) <= in.ram_bytes;
  };
  ASSIGN_OR_RETURN(bool one_fits, fits_with(1));
  if (one_fits) {
    int lo = 1, hi = 2;
    while (hi <= (1 << 16)) {
      ASSIGN_OR_RETURN(bool ok, fits_with(hi));
      if (!ok) break;
      lo = hi;
      hi *= 2;
    }
    while (hi - lo > 1) {
      int mid = lo + (hi - lo) / 2;
      ASSIGN_OR_RETURN(bool ok, fits_with(mid));
      (ok ? lo : hi) = mid;
    }
    p.max_batch_that_fits = lo;
  }

  const double L = in.config.n_layers, T = in.config.seq_len, D = in.config.dim;
  p.flops_per_token = 6.0 * static_cast<double>(p.flop_params) + 12.0 * L * T * D;
  p.tokens_per_step =
      static_cast<int64_t>(in.options.max_batch) * in.accum * in.config.seq_len * in.peers;
  // Per peer: seconds per slot (one sequence forward + backward) at its speed.
  std::vector<double> slot_s;
  for (int i = 0; i < in.peers && !in.gflops.empty(); ++i) {
    p.peer_gflops.push_back(in.gflops.size() == 1 ? in.gflops[0] : in.gflops[i]);
    slot_s.push_back(T * p.flops_per_token / (p.peer_gflops.back() * 1e9));
  }
  // The compute of a split, and the backward of the last micro-step of the peer that
  // finishes last (backward is ~2/3 of the FLOPs; only that one overlaps the exchange).
  struct SplitTime {
    double compute_s = 0, backward_s = 0;
  };
  auto time_of = [&](const std::vector<int>& shares) {
    SplitTime t;
    for (size_t i = 0; i < shares.size(); ++i) {
      if (shares[i] * slot_s[i] < t.compute_s || shares[i] == 0) continue;
      t.compute_s = shares[i] * slot_s[i];
      t.backward_s = std::min(shares[i], in.options.max_batch) * slot_s[i] * 2.0 / 3.0;
    }
    return t;
  };
  SplitTime equal, balanced;
  if (!slot_s.empty()) {
    const int slots = in.options.max_batch * in.accum * in.peers;
    p.equal_shares = SlotBalancer::EqualShares(slots, in.peers);
    // As SlotBalancer::Assign: every peer at least one slot unless it is more than
    // --max-skew times slower than the fastest.
    const double fastest = *std::min_element(slot_s.begin(), slot_s.end());
    std::vector<int> min_share(slot_s.size());
    int eligible = 0;
    for (size_t i = 0; i < slot_s.size(); ++i) {
      min_share[i] = slot_s[i] <= in.max_skew * fastest ? 1 : 0;
      eligible += min_share[i];
    }
    if (eligible > slots) std::fill(min_share.begin(), min_share.end(), 0);
    p.balanced_shares = SlotBalancer::BestShares(slots, slot_s, min_share);
    equal = time_of(p.equal_shares);
    balanced = time_of(p.balanced_shares);
    p.compute_s = balanced.compute_s;
    p.backward_s = balanced.backward_s;
  }

  // A codec's bytes during backward (hops: ring steps, one RTT each) and after the
  // optimizer step (zero 1 only).
  auto add = [&](const std::string& codec, double backward_bytes, double backward_hops,
                 double after_bytes, double after_hops) {
    CodecEstimate e;
    e.codec = codec;
    e.backward_bytes = backward_bytes;
    e.wire_bytes = backward_bytes + after_bytes;
    if (in.peers > 1) {
      e.backward_seconds = backward_bytes / in.link_bps + backward_hops * in.rtt_s;
      e.seconds = e.backward_seconds + after_bytes / in.link_bps + after_hops * in.rtt_s;
    }
    e.hides = !slot_s.empty() && e.backward_seconds <= p.backward_s;
    p.codecs.push_back(e);
  };
  const double ring_hops = in.peers - 1;  // one phase: reduce-scatter or allgather
  if (in.zero == 1) {  // also on one peer, where nothing travels: no top-k to suggest
    // Reduce-scatter in backward; allgather plus the replica forward's one hop after.
    const double after = AfterUpdateBytes(n, in.peers);
    add("none", ReduceScatterBytes(n, 4, in.peers), ring_hops, after, ring_hops + 1);
    add("bf16", ReduceScatterBytes(n, 2, in.peers), ring_hops, after, ring_hops + 1);
  } else {
    add("none", DenseRingBytes(n, 4, in.peers), 2 * ring_hops, 0, 0);
    add("bf16", DenseRingBytes(n, 2, in.peers), 2 * ring_hops, 0, 0);
    for (double d : {0.1, 0.03, 0.01, 0.003, 0.001}) {
      // Sparse allgather stops paying once N*D >= 2 (it would send more than dense fp32).
      if (in.peers * d >= 2) continue;
      add(absl::StrFormat("topk:%g", d), TopkRingBytes(n, d, in.peers), 2 * ring_hops, 0, 0);
    }
  }
  p.recommended_codec = in.peers <= 1 ? "none" : "";
  for (const CodecEstimate& e : p.codecs) {  // least lossy first
    if (p.recommended_codec.empty() && e.hides) p.recommended_codec = e.codec;
  }
  if (p.recommended_codec.empty() && !p.codecs.empty()) {
    // Nothing hides (or no compute figure): the fastest on the wire.
    const CodecEstimate* best = &p.codecs[0];
    for (const CodecEstimate& e : p.codecs) {
      if (e.seconds < best->seconds) best = &e;
    }
    p.recommended_codec = best->codec;
  }
  if (!slot_s.empty()) {
    double during_s = 0, after_s = 0;
    for (const CodecEstimate& e : p.codecs) {
      if (e.codec != p.recommended_codec) continue;
      during_s = e.backward_seconds;
      after_s = e.seconds - e.backward_seconds;
    }
    const double tokens = static_cast<double>(p.tokens_per_step);
    // The exchange starts with backward; the bucket backward finishes last (the lowest
    // offsets: embeddings; Cut's last bucket, which starts at 0) starts only when backward
    // ends, so its share of the bytes is waited for in any case (measured: 426 ms of one
    // ~23 MB bucket at 1 Gbit/s).
    const collective::BucketedReducer::Bucket last =
        collective::BucketedReducer::Cut(layout.total_floats(), in.bucket_bytes).back();
    const double last_bucket_s = during_s * static_cast<double>(last.end - last.begin) / n;
    auto unhidden = [&](double backward_s) {
      return std::max({0.0, during_s - backward_s, last_bucket_s});
    };
    p.equal_step_s = equal.compute_s + unhidden(equal.backward_s) + after_s;
    p.balanced_step_s = balanced.compute_s + unhidden(balanced.backward_s) + after_s;
    p.equal_tokens_per_s = tokens / p.equal_step_s;
    p.balanced_tokens_per_s = tokens / p.balanced_step_s;
  }
  if (in.outer_every > 0) {
    RoundEstimate& r = p.round;
    double bytes = 0;
    switch (outer.kind) {
      case collective::CodecKind::kNone:
        bytes = DenseRingBytes(n, 4, in.peers);
        break;
      case collective::CodecKind::kBf16:
        bytes = DenseRingBytes(n, 2, in.peers);
        break;
      case collective::CodecKind::kInt8:
        bytes = DenseRingBytes(n, 1.0625, in.peers);
        break;
      case collective::CodecKind::kInt4:
        bytes = DenseRingBytes(n, 0.5625, in.peers);
        break;
      case collective::CodecKind::kTopK:
        bytes = in.peers * outer.density < 2 ? TopkRingBytes(n, outer.density, in.peers)
                                             : DenseRingBytes(n, 4, in.peers);
        break;
    }
    if (r.sharded) bytes += 4 * n / in.peers;  // the owned sums to the replica holder
    r.wire_bytes = bytes;
    if (in.peers > 1) r.exchange_s = bytes / in.link_bps + 2 * ring_hops * in.rtt_s;
    if (!slot_s.empty()) {
      const double tokens = static_cast<double>(p.tokens_per_step);
      r.compute_s = in.outer_every * balanced.compute_s;
      r.hidden_s = r.overlap ? std::min(r.exchange_s, r.compute_s) : 0;
      r.round_s = r.compute_s + r.exchange_s - r.hidden_s;
      r.tokens_per_s = in.outer_every * tokens / r.round_s;
      r.compute_only_tokens_per_s = tokens / balanced.compute_s;
    }
  }
  return p;
}

double RunTokensPerSecond(const RunPlan& p) {
  return p.round.every > 0 ? p.round.tokens_per_s : p.balanced_tokens_per_s;
}

absl::StatusOr<std::vector<double>> ParsePeerGflops(absl::string_view text, int peers) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty() || text == "0") return std::vector<double>{};
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    double g = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(item), &g) || !(g > 0) || !std::isfinite(g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gflops: '", item, "' is not a positive GFLOP/s figure (e.g. 120 or 120,120,80,60)"));
    }
    out.push_back(g);
  }
  if (out.size() > 1 && static_cast<int>(out.size()) != peers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gflops lists %d figures for --peers %d: give one (every peer) or one per peer",
        out.size(), peers));
  }
  return out;
}

}  // namespace rt::train
