// The ring's GradientReducer (see ring_gradient_reducer.h).
#include "train/ring_gradient_reducer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collective/link_matrix.h"
#include "collective/small_collectives.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "net/ring_sends.h"
#include "train/param_hash.h"
#include "train/ring_error_context.h"

namespace rt::train {
namespace {

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

// This peer's row of a probe's matrix: every other member by its hosts-file endpoint.
std::vector<observe::LinkFigure> OutgoingLinks(const collective::LinkMatrix& m,
                                               const net::TcpRing& ring) {
  std::vector<observe::LinkFigure> links;
  const int self = m.IndexOf(ring.host_rank());
  if (self < 0 || ring.node() == nullptr) return links;
  for (int j = 0; j < m.size(); ++j) {
    if (j == self) continue;
    observe::LinkFigure l;
    l.to = ring.node()->Host(m.peers[j]).Endpoint();
    l.bytes_per_s = m.bandwidth_bps[self][j];
    l.rtt_s = m.rtt_s[self][j];
    links.push_back(std::move(l));
  }
  return links;
}

RingReducerOptions WithSharding(RingReducerOptions o) {
  if (o.shard_optimizer) {
    o.buckets.allreduce.phases = collective::RingPhases::kReduceScatter;
    o.comm.reorder = false;  // the pieces' owners follow ring positions
  }
  return o;
}

}  // namespace

RingGradientReducer::RingGradientReducer(std::unique_ptr<net::RingTransport> ring,
                                         RingReducerOptions options,
                                         std::function<uint64_t()> bytes_sent)
    : ring_(std::move(ring)),
      options_(WithSharding(std::move(options))),
      transport_bytes_(std::move(bytes_sent)),
      carried_(options_.carried ? options_.carried : std::make_shared<CarriedCommState>()) {}

RingGradientReducer::RingGradientReducer(std::unique_ptr<net::TcpRing> ring,
                                         RingReducerOptions options)
    : options_(WithSharding(std::move(options))),
      carried_(options_.carried ? options_.carried : std::make_shared<CarriedCommState>()) {
  net::TcpRing* tcp = ring.get();
  UseRing(std::move(ring), tcp);
}

RingGradientReducer::~RingGradientReducer() {
  // The bucketed reducer may outlive this reducer (carried to the next view's): its
  // step ends here and it lets go of this ring, which dies with this reducer.
  if (collective::BucketedReducer* b = buckets(); b != nullptr) {
    if (in_step_ || b->active()) {
      abort_->Abort(absl::AbortedError("reducer destroyed during a step"));
      (void)b->Finish(nullptr);
    }
    (void)b->SetRing(nullptr);
  }
  watch_next_.reset();
  watch_prev_.reset();
}

void RingGradientReducer::UseRing(std::unique_ptr<net::RingTransport> ring, net::TcpRing* tcp) {
  // Unregister the old ring's connections before it is destroyed (below).
  watch_next_.reset();
  watch_prev_.reset();
  if (tcp != nullptr && tcp->next_link() != nullptr) {
    watch_next_ =
        std::make_unique<collective::AbortWatch>(abort_.get(), &tcp->next_link()->connection());
  }
  if (tcp != nullptr && tcp->prev_link() != nullptr) {
    watch_prev_ =
        std::make_unique<collective::AbortWatch>(abort_.get(), &tcp->prev_link()->connection());
  }
  if (tcp_ != nullptr) retired_bytes_ += tcp_->bytes_sent();
  tcp_ = tcp;
  ring_ = std::move(ring);
  transport_bytes_ = nullptr;
}

void RingGradientReducer::Abort(const absl::Status& why) { abort_->Abort(why); }

std::vector<int> RingGradientReducer::ring_order() const {
  return tcp_ != nullptr ? tcp_->order() : std::vector<int>();
}

std::vector<int> RingGradientReducer::member_ids() const {
  if (tcp_ != nullptr) return tcp_->order();
  return GradientReducer::member_ids();
}

void RingGradientReducer::ResetPlanning() {
  probed_ = false;
  probe_index_ = 0;
  last_probe_step_ = 0;
  links_ = collective::RingLinkSummary();
  speeds_.reset();
  plan_.reset();
  measured_backward_s_ = measured_compute_s_ = -1;  // the next plan agrees the carried ones
}

absl::Status RingGradientReducer::ReplaceRing(std::unique_ptr<net::TcpRing> ring,
                                              uint64_t channel_salt) {
  if (in_step_) return absl::FailedPreconditionError("ReplaceRing during a step");
  if (ring == nullptr) return absl::InvalidArgumentError("ReplaceRing: no ring");
  if (buckets() != nullptr && buckets_on_ring_) RETURN_IF_ERROR(buckets()->SetRing(ring.get()));
  net::TcpRing* tcp = ring.get();
  UseRing(std::move(ring), tcp);
  options_.comm.channel_salt = channel_salt;
  // A peer that joins with this ring starts from a fresh reducer: forget everything
  // the ring's peers would not hold alike (probe count, agreed speeds, plan, timings).
  ResetPlanning();
  return absl::OkStatus();
}

bool RingGradientReducer::ProbeDue(int64_t step) const {
  const CommOptions& c = options_.comm;
  if (tcp_ == nullptr || peers() < 2 || c.probe_every < 0) return false;
  if (!probed_) return c.probe_every > 0 || c.auto_codec || peers() >= 3;
  return c.probe_every > 0 && step - last_probe_step_ >= c.probe_every;
}

absl::Status RingGradientReducer::Probe() {
  collective::ReorderOptions o = options_.comm.probe;
  o.salt = options_.comm.channel_salt;
  o.reform = options_.comm.reorder;
  o.probe.abort = abort_.get();
  // The first probe of this ring reuses what its peers measured together before (a
  // view change); later ones (--probe-every) measure every link again.
  if (probe_index_ == 0 && carried_->links) o.probe.known = &*carried_->links;
  const int before = rank();
  Stopwatch watch;
  ASSIGN_OR_RETURN(collective::ReorderResult r,
                   collective::ProbeAndReorder(*tcp_, probe_index_++, o));
  retired_bytes_ += r.probe_stats.bytes_streamed;
  carried_->links = r.matrix;
  for (const std::string& line : collective::DescribeLinkMatrix(r.matrix)) LogInfo("%s", line);
  if (r.ring != nullptr) {
    RETURN_IF_ERROR(buckets()->SetRing(r.ring.get()));
    net::TcpRing* tcp = r.ring.get();
    UseRing(std::move(r.ring), tcp);  // the old ring closes here
  }
  links_ = r.links;
  probed_links_ = OutgoingLinks(r.matrix, *tcp_);
  probed_ = true;
  last_probe_step_ = step_;
  LogInfo(
      "link probe %d at step %d: %.2f s (%d rounds, %d pairs measured, %d reused); ring in use: "
      "%s; this peer at position %d (was %d)",
      probe_index_ - 1, step_ + 1, watch.ElapsedSeconds(), r.probe_stats.rounds,
      r.probe_stats.pairs_probed, r.probe_stats.pairs_reused,
      collective::DescribeRing(r.matrix, tcp_->order()), rank(), before);
  return absl::OkStatus();
}

absl::Status RingGradientReducer::PlanCodecs() {
  const CommOptions& c = options_.comm;
  if (peers() < 2) return absl::OkStatus();  // alone: nothing travels
  if (tcp_ == nullptr || !probed_) {
    return absl::FailedPreconditionError(
        "--compress auto needs measured links: a TCP ring that is probed (not --probe-every -1)");
  }
  if (!speeds_) {
    std::optional<collective::CodecSpeeds>& mine = carried_->my_speeds;
    if (!mine) {
      collective::CalibrationOptions co = c.calibration;
      co.zstd_level = c.zstd_level;
      if (co.floats == 0) {
        for (const collective::BucketedReducer::Bucket& b : buckets()->buckets()) {
          co.floats = std::max(co.floats, b.end - b.begin);
        }
        co.floats = std::min(co.floats, collective::kMaxCalibrationFloats);
      }
      Stopwatch watch;
      mine = collective::CalibrateCodecs(co);
      LogInfo("codec calibration: %.2f s on %.1fM floats", watch.ElapsedSeconds(), co.floats / 1e6);
    }
    ASSIGN_OR_RETURN(speeds_, collective::AgreeCodecSpeeds(*ring_, *mine, options_.timeout));
    RETURN_IF_ERROR(AgreeCarriedMeasurements());
    const collective::CodecSpeeds& s = *speeds_;
    LogInfo(
        "codec speeds (slowest peer): top-k select %.2f GB/s, encode %.0f M/s, decode %.0f M/s, "
        "bf16 %.2f GB/s, add %.2f GB/s, zstd-%d %.0f/%.0f MB/s",
        s.select_bps / 1e9, s.encode_eps / 1e6, s.decode_eps / 1e6, s.bf16_bps / 1e9,
        s.add_bps / 1e9, s.zstd_level, s.zstd_compress_bps / 1e6, s.zstd_decompress_bps / 1e6);
  }
  collective::PlannerInputs in;
  for (const collective::BucketedReducer::Bucket& b : buckets()->buckets()) {
    collective::PlanBucket pb;
    pb.floats = b.end - b.begin;
    for (const collective::IndexRange& r : options_.buckets.dense_ranges) {
      const size_t lo = std::max(r.begin, b.begin), hi = std::min(r.end, b.end);
      if (lo < hi) pb.dense_floats += hi - lo;
    }
    in.buckets.push_back(pb);
  }
  in.peers = peers();
  in.bandwidth_bps =
      c.planning_bandwidth_bps > 0 ? c.planning_bandwidth_bps : links_.bottleneck_bps;
  in.rtt_s = links_.max_rtt_s;
  // Without any measurement (the run's first step) the planner takes the least lossy
  // codec: the sparsest top-k is never chosen for lack of a budget.
  const double measured = c.comm_budget > 0 ? measured_compute_s_ : measured_backward_s_;
  in.measured = measured >= 0;
  in.budget_s = std::max(0.0, c.comm_budget > 0 ? c.comm_budget * measured : measured);
  in.speeds = *speeds_;
  // auto's warm-up (see the file comment): no top-k before step W.
  collective::PlannerOptions po = c.planner;
  po.allow_topk = po.allow_topk && step_ >= options_.buckets.topk_warmup_steps;
  if (plan_ && plan_allows_topk_ != po.allow_topk) plan_.reset();  // the warm-up ended
  bool replanned = true;
  absl::StatusOr<collective::CodecPlan> plan =
      plan_ ? collective::Replan(*plan_, in, po, &replanned) : collective::PlanCodecs(in, po);
  RETURN_IF_ERROR(plan.status());
  plan_allows_topk_ = po.allow_topk;
  if (replanned) {
    // Logged when a bucket's codec changes (a re-plan that keeps them is not news).
    bool changed = !plan_ || plan_->buckets.size() != plan->buckets.size();
    for (size_t b = 0; b < plan->buckets.size(); ++b) {
      buckets()->SetCodec(b, plan->buckets[b].spec);
      changed = changed || !(plan_->buckets[b].spec == plan->buckets[b].spec);
    }
    if (changed) {
      for (const std::string& line : collective::DescribePlan(*plan)) {
        LogInfo("step %d: %s", step_ + 1, line);
      }
    }
  }
  plan_ = *std::move(plan);
  return absl::OkStatus();
}

absl::Status RingGradientReducer::BeginStep(int64_t step, absl::Span<float> grads) {
  RETURN_IF_ERROR(abort_->status());
  if (options_.shard_optimizer &&
      (options_.comm.auto_codec || options_.buckets.codec.kind == collective::CodecKind::kTopK)) {
    return absl::InvalidArgumentError(
        "--zero 1 works with --compress none or bf16: top-k's sparse sum reaches every peer "
        "whole, and sharding would add an fp32 allgather of the parameters to it");
  }
  if (finish_return_ns_ >= 0) update_s_ = static_cast<double>(NowNs() - finish_return_ns_) * 1e-9;
  std::unique_ptr<collective::BucketedReducer>& b = carried_->buckets;
  if (b == nullptr || grads.size() != b->length()) {
    b = std::make_unique<collective::BucketedReducer>(ring_.get(), grads.size(), options_.buckets);
    buckets_on_ring_ = true;
    plan_.reset();
    LogInfo("gradient buckets: %d of up to %.3g MiB over %.2fM floats, codec %s",
            b->buckets().size(), options_.buckets.bucket_bytes / 1048576.0, grads.size() / 1e6,
            options_.comm.auto_codec ? std::string("auto") : options_.buckets.codec.ToString());
  } else if (!buckets_on_ring_) {  // carried from the previous view's reducer
    RETURN_IF_ERROR(b->SetRing(ring_.get()));
    b->SetPreconditioner(options_.buckets.precondition);
    buckets_on_ring_ = true;
  }
  if (b->step_pending()) {
    // The last step that began was not applied (a view change interrupted it, or its
    // result was discarded): undo what it did to the residuals; it is redone now.
    RETURN_IF_ERROR(b->RollbackStep());
    LogInfo("step %d: the residuals of the step that was not applied are rolled back", step + 1);
  }
  step_ = step;
  step_grads_ = grads;
  if (ProbeDue(step)) {
    RETURN_IF_ERROR(WithContext(Probe(), absl::StrFormat("step %d: probing links", step + 1)));
  }
  if (options_.comm.auto_codec) {
    RETURN_IF_ERROR(
        WithContext(PlanCodecs(), absl::StrFormat("step %d: planning codecs", step + 1)));
  }
  // The step's frames carry it (after a probe: on the ring it may have re-formed).
  if (tcp_ != nullptr) tcp_->SetStep(static_cast<uint64_t>(step));
  begin_ns_ = NowNs();
  first_ready_ns_ = ready0_ns_ = -1;
  RETURN_IF_ERROR(WithContext(b->Start(grads, step), absl::StrCat("step ", step + 1)));
  in_step_ = true;
  return absl::OkStatus();
}

void RingGradientReducer::OnGradReady(size_t offset) {
  if (!in_step_) return;
  if (first_ready_ns_ < 0 || offset == 0) {
    const int64_t now = NowNs();
    if (first_ready_ns_ < 0) first_ready_ns_ = now;
    if (offset == 0) ready0_ns_ = now;
  }
  buckets()->GradReady(offset);
}

absl::Status RingGradientReducer::Finish(StepTotals* totals) {
  if (!in_step_) return absl::FailedPreconditionError("Finish without BeginStep");
  in_step_ = false;
  // This peer's timings of the step, summed over peers with the totals below:
  // backward window (first OnGradReady -> OnGradReady(0)) and compute time (this
  // step's BeginStep -> Finish plus the previous step's Finish -> BeginStep).
  const int64_t finish_ns = NowNs();
  const double backward_s = first_ready_ns_ >= 0 && ready0_ns_ >= first_ready_ns_
                                ? static_cast<double>(ready0_ns_ - first_ready_ns_) * 1e-9
                                : 0.0;
  const double compute_s = static_cast<double>(finish_ns - begin_ns_) * 1e-9 + update_s_;
  collective::ReduceStepStats stats;
  RETURN_IF_ERROR(WithContext(buckets()->Finish(&stats),
                              absl::StrFormat("step %d: gradient allreduce", step_ + 1)));
  counted_bytes_ += stats.bytes_sent;
  last_stats_ = std::move(stats);
  if (sharded() && peers() > 1) {
    RETURN_IF_ERROR(WithContext(ForwardOwnedSums(step_grads_),
                                absl::StrFormat("step %d: sending the pieces' sums to the "
                                                "successor (optimizer replica)",
                                                step_ + 1)));
  }

  // Loss and token counts: exact sums in rank order (tokens < 2^53 are exact doubles);
  // the timings ride along, so every peer holds the same means for the next plan.
  // Load balancing figures: each peer fills its own position, zeros elsewhere, so the
  // sums are exact copies of every peer's figures (slot_balancer.h).
  const size_t n = static_cast<size_t>(peers()), me = static_cast<size_t>(rank());
  std::vector<double> values(4 + 2 * n, 0.0);
  values[0] = totals->loss_sum;
  values[1] = static_cast<double>(totals->tokens);
  values[2] = backward_s;
  values[3] = compute_s;
  values[4 + me] = totals->compute_s;
  values[4 + n + me] = totals->slots;
  RETURN_IF_ERROR(WithContext(
      collective::AllreduceSumF64(ring_.get(), absl::MakeSpan(values), options_.timeout),
      absl::StrFormat("step %d: summing loss and tokens", step_ + 1)));
  counted_bytes_ += values.size() * sizeof(double) * static_cast<uint64_t>(peers() - 1);
  totals->loss_sum = values[0];
  totals->tokens = static_cast<int64_t>(values[1]);
  measured_backward_s_ = values[2] / peers();
  measured_compute_s_ = values[3] / peers();
  carried_->backward_s = measured_backward_s_;
  carried_->compute_s = measured_compute_s_;
  carried_->peers = peers();
  totals->peer_compute_s.assign(values.begin() + 4, values.begin() + 4 + n);
  totals->peer_slots.resize(n);
  for (size_t p = 0; p < n; ++p) totals->peer_slots[p] = static_cast<int>(values[4 + n + p]);
  finish_return_ns_ = NowNs();
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

void RingGradientReducer::SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn) {
  options_.buckets.precondition = fn;
  if (buckets() != nullptr && buckets_on_ring_) buckets()->SetPreconditioner(std::move(fn));
}

std::vector<std::pair<size_t, size_t>> RingGradientReducer::BucketRangesWhere(
    const std::function<bool(const std::string& codec_used)>& pick) const {
  std::vector<std::pair<size_t, size_t>> ranges;
  const collective::BucketedReducer* b = buckets();
  if (b == nullptr || last_stats_.buckets.size() != b->buckets().size()) return ranges;
  // Buckets run from the end of the buffer: walk them backwards for ascending ranges.
  for (size_t i = b->buckets().size(); i-- > 0;) {
    if (!pick(last_stats_.buckets[i].codec_used)) continue;
    const collective::BucketedReducer::Bucket& k = b->buckets()[i];
    if (!ranges.empty() && ranges.back().second == k.begin) {
      ranges.back().second = k.end;
    } else {
      ranges.emplace_back(k.begin, k.end);
    }
  }
  return ranges;
}

std::vector<std::pair<size_t, size_t>> RingGradientReducer::DenseSumRanges() const {
  return BucketRangesWhere(
      [](const std::string& used) { return used == "none" || used == "bf16"; });
}

std::vector<std::pair<size_t, size_t>> RingGradientReducer::RefreshedRanges() const {
  return BucketRangesWhere([](const std::string& used) { return used == "refresh"; });
}

void RingGradientReducer::StepCompleted(int64_t /*step*/) {
  if (buckets() != nullptr) (void)buckets()->CommitStep();
}

void RingGradientReducer::CommitExchange() {
  if (buckets() != nullptr) (void)buckets()->CommitStep();
}

absl::Status RingGradientReducer::AgreeCarriedMeasurements() {
  // Peers of the previous view hold its measurements (equal on all of them), joiners
  // none: the mean over those that have one, identical on every peer. Compute time
  // is this peer's share of the global batch, which scales with 1 / peers.
  const CarriedCommState& c = *carried_;
  const bool have = c.backward_s >= 0 && c.compute_s >= 0 && c.peers > 0;
  const double scale = have ? static_cast<double>(c.peers) / peers() : 0;
  double values[3] = {have ? 1.0 : 0.0, have ? c.backward_s : 0.0, have ? c.compute_s * scale : 0};
  RETURN_IF_ERROR(
      collective::AllreduceSumF64(ring_.get(), absl::MakeSpan(values), options_.timeout));
  counted_bytes_ += sizeof(values) * static_cast<uint64_t>(peers() - 1);
  if (values[0] > 0 && measured_backward_s_ < 0) {
    measured_backward_s_ = values[1] / values[0];
    measured_compute_s_ = values[2] / values[0];
    LogInfo("planning from the previous ring's measurements: backward %.1f ms, compute %.1f ms",
            measured_backward_s_ * 1e3, measured_compute_s_ * 1e3);
  }
  return absl::OkStatus();
}

uint64_t RingGradientReducer::bytes_sent() const {
  if (tcp_ != nullptr) return retired_bytes_ + tcp_->bytes_sent();
  return transport_bytes_ ? transport_bytes_() : counted_bytes_;
}

absl::Status RingBroadcastFromRank0(net::RingTransport* ring, absl::Span<uint8_t> data,
                                    absl::Duration timeout, size_t chunk_bytes) {
  const int n = ring->size(), rank = ring->rank();
  if (n == 1 || data.empty()) return absl::OkStatus();
  const bool forward = rank + 1 < n;  // the last peer's successor is rank 0
  std::vector<uint8_t> message;
  absl::Status st;
  for (size_t begin = 0; begin < data.size() && st.ok(); begin += chunk_bytes) {
    const size_t len = std::min(chunk_bytes, data.size() - begin);
    absl::Span<uint8_t> chunk = data.subspan(begin, len);
    if (rank != 0) {
      st = ring->RecvFromPrev(&message, timeout);
      if (!st.ok()) break;
      if (message.size() != len) {
        st = absl::DataLossError(absl::StrFormat(
            "broadcast chunk at byte %d has %d bytes, expected %d (peers disagree on sizes)", begin,
            message.size(), len));
        break;
      }
      std::memcpy(chunk.data(), message.data(), len);
    }
    if (forward) st = ring->SendToNext(chunk);
  }
  // The chunks already queued are read from `data` in place: the caller may overwrite it
  // (a state it receives next) once this returns, so wait for them also after an error.
  if (!st.ok()) {
    net::DrainSendsAfterError(ring, timeout);
    return st;
  }
  return ring->WaitSendsDone(timeout);
}

}  // namespace rt::train
