// `ringtrain bench allreduce`: run by every peer of a ring (--hosts, --self or
// --rank). For each --size (elements; several comma-separated), after
// --warmup-iters untimed allreduces, times --iters allreduces of a float buffer
// with the chosen codec (--compress none|bf16|topk:D|auto, --zstd-level) and checks
// the result of the last one (fails loudly otherwise).
//
// Ring order: the hosts-file order, unless --reorder: then all links are probed
// first and the ring is re-formed in the computed order (collective::ProbeAndReorder,
// as `train` does). --compress auto probes too (keeping the hosts-file order without
// --reorder), calibrates the codecs (on min(size, 16M) floats), and per size times
// the 3 codecs the model predicts fastest for one bucket of that size (the favourite
// top-k density with and without zstd, and the sparsest density) on the real buffer
// (one untimed round, then 3-15 timed rounds, about 1 s in all, taking turns; the
// slowest peer's median), then plans the fastest with those times (codec_planner.h with
// budget 0 and measured_s); a pick that was only predicted is timed too and the plan
// made again (ChooseAutoCodec). The trials and the plan are logged, the chosen codec is
// printed as codec_used. The trials are not part of the timed iterations, as a run of
// many steps amortises them.
//
// Timing: a barrier precedes every iteration; each peer times its own allreduce;
// per iteration the MAX over peers is taken (all peers print the same seconds).
// seconds = mean over iterations of that max. algbw = bytes / seconds (bytes = the
// fp32 buffer, 4 per element), busbw = algbw * 2(N-1)/N (NCCL convention), GB =
// 1e9 bytes. wire_bytes = payload bytes this peer sent per allreduce (the
// collective's count; frame headers excluded), averaged over the timed iterations.
// cpu_seconds = this peer's process CPU time (all threads) per allreduce: on a
// shared machine it shows whether the wall time was CPU work or waiting.
// encode_seconds / exchange_seconds: this peer's wall time in top-k selection and
// encoding / in communication with decoding and summing (BucketExchange's split).
//
// Values (--values, bench_values.h): integer (default; |x| <= 8, so fp32 and bf16
// sums are exact and are checked element by element) or gradient (gradient-like
// floats: what top-k + zstd would see in training; dense fp32 sums are checked
// element by element within fp32 rounding). Lossy results (top-k; bf16 with
// gradient values) are checked by conservation (sum of result + all peers'
// residuals == sum of all peers' inputs + previous residuals: exact in doubles for
// integers, within peers * 2^-23 * sum of |inputs| for gradient values) and by
// identical result bytes on every peer (crc32c allgather).
//
// Output: a human table, then, last, one JSON line for the last size (fields of
// DESIGN "bench allreduce" plus peers, rank, size, iters, ring_order: hosts-file
// ranks in ring order; when links were probed, probe_s (the probe's wall time) and
// bottleneck_bps (the slowest link of the ring in use, bytes/s)) with every size in
// "results".
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/bench_common.h"
#include "cli/bench_kinds.h"
#include "cli/bench_size_flag.h"
#include "cli/bench_values.h"
#include "cli/common_flags.h"
#include "collective/bucket_exchange.h"
#include "collective/codec_calibration.h"
#include "collective/codec_planner.h"
#include "collective/codec_spec.h"
#include "collective/ring_adapter.h"
#include "collective/ring_allreduce.h"
#include "collective/small_collectives.h"
#include "core/aligned_buffer.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "net/frame_cipher.h"
#include "net/ring_setup.h"

ABSL_FLAG(int, iters, 10, "bench allreduce: timed allreduces per size");
ABSL_FLAG(int, warmup_iters, 2, "bench allreduce: untimed allreduces per size before timing");
ABSL_FLAG(std::string, values, "integer",
          "bench allreduce: integer (exact sums) or gradient (gradient-like floats: realistic "
          "top-k/zstd wire bytes)");
ABSL_FLAG(bool, reorder, false,
          "bench allreduce: probe every link first and re-form the ring in the computed order "
          "(default: hosts-file order)");

namespace rt::cli {
namespace {

using collective::CodecKind;
using collective::CodecSpec;

constexpr absl::Duration kTimeout = absl::Seconds(300);  // per receive / send wait
constexpr size_t kAutoTrials = 3;  // auto: candidates timed on the real buffer

// CPU seconds used so far by this process (all threads: ours and the transport's).
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Minor page faults of this process so far (memory the kernel had to map in: fresh
// allocations touched for the first time, memory returned and taken again).
double ProcessMinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

struct SizeResult {
  size_t elements = 0;
  double seconds = 0, seconds_min = 0, seconds_max = 0;  // over iterations of max over peers
  // The median iteration (upper median for an even count): a typical allreduce, which a
  // scheduler stall on a shared machine moves far less than it moves the mean.
  double seconds_median = 0;
  double wire_bytes = 0;        // per allreduce, this peer
  double cpu_seconds = 0;       // per allreduce, this peer's process CPU time (all threads)
  double minor_faults = 0;      // per allreduce, this peer's process (ProcessMinorFaults)
  double encode_seconds = 0;    // per allreduce, this peer: top-k selection + encoding
  double exchange_seconds = 0;  // per allreduce, this peer: communication, decode, sum
  std::string codec_used;
  bool conserved = false;  // checked by conservation (lossy), not element by element
  double algbw() const { return seconds > 0 ? elements * 4.0 / seconds / 1e9 : 0; }
};

// Sum over peers of one double, exact enough for integer sums below 2^53.
absl::StatusOr<double> SumOverPeers(net::RingTransport* ring, double v) {
  double values[1] = {v};
  RETURN_IF_ERROR(collective::AllreduceSumF64(ring, absl::MakeSpan(values), kTimeout));
  return values[0];
}

absl::Status Barrier(net::RingTransport* ring) { return BenchBarrier(ring, kTimeout); }

// Max over peers of each value (same length everywhere).
absl::StatusOr<std::vector<double>> MaxOverPeers(net::RingTransport* ring,
                                                 const std::vector<double>& mine) {
  absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(mine.data()),
                                  mine.size() * sizeof(double));
  ASSIGN_OR_RETURN(auto all, collective::AllgatherBytes(ring, bytes, kTimeout));
  std::vector<double> out = mine;
  for (const std::vector<uint8_t>& peer : all) {
    if (peer.size() != bytes.size()) {
      return absl::InternalError("bench allreduce: peers timed different iteration counts");
    }
    for (size_t k = 0; k < out.size(); ++k) {
      double v;
      std::memcpy(&v, peer.data() + k * sizeof(double), sizeof(double));
      out[k] = std::max(out[k], v);
    }
  }
  return out;
}

double SumOf(absl::Span<const float> x) {
  double s = 0;
  for (float v : x) s += v;
  return s;
}

double SumOfAbs(absl::Span<const float> x) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  return s;
}

// One buffer size: warm-up, timed iterations, check of the last result.
absl::StatusOr<SizeResult> BenchOneSize(net::RingTransport* ring, size_t n, const CodecSpec& spec,
                                        BenchValues values, int warmup, int iters) {
  const int rank = ring->rank(), peers = ring->size();
  AlignedBuffer<float> data(n);
  collective::BucketExchange exchange(n, {});
  collective::AllreduceOptions options;
  options.timeout = kTimeout;
  std::vector<double> times;
  double wire = 0, cpu = 0, faults = 0, encode_ms = 0, exchange_ms = 0;
  SizeResult result;
  result.elements = n;
  for (int it = 0; it < warmup + iters; ++it) {
    const bool timed = it >= warmup, last = it == warmup + iters - 1;
    FillBenchValues(values, data.span(), rank, it);
    // Lossy codecs are checked by conservation: what goes in, with the old residual.
    const bool maybe_lossy = spec.kind == CodecKind::kTopK ||
                             (spec.kind == CodecKind::kBf16 && values == BenchValues::kGradient);
    double input_sum = 0, input_abs = 0;
    if (last && maybe_lossy) {
      input_sum = SumOf(data.span()) + SumOf(exchange.residual());
      input_abs = SumOfAbs(data.span()) + SumOfAbs(exchange.residual());
    }
    RETURN_IF_ERROR(Barrier(ring));
    collective::ExchangeStats stats;
    const double cpu0 = ProcessCpuSeconds(), faults0 = ProcessMinorFaults();
    Stopwatch watch;
    RETURN_IF_ERROR(exchange.Run(ring, data.span(), spec, /*step=*/1000000, /*warmup=*/0,
                                 /*refresh_every=*/0, options, &stats));
    const double seconds = watch.ElapsedSeconds();
    if (timed) {
      times.push_back(seconds);
      cpu += ProcessCpuSeconds() - cpu0;
      faults += ProcessMinorFaults() - faults0;
      encode_ms += stats.encode_ms;
      exchange_ms += stats.exchange_ms;
      wire += static_cast<double>(stats.bytes_sent);
      result.codec_used = stats.codec_used;
    }
    if (!last) continue;
    if (!maybe_lossy || stats.codec_used == "none") {
      RETURN_IF_ERROR(VerifyDenseSum(values, data.span(), peers, it));
      continue;
    }
    // Conservation over all peers, and identical bytes everywhere.
    result.conserved = true;
    ASSIGN_OR_RETURN(double all_in, SumOverPeers(ring, input_sum));
    ASSIGN_OR_RETURN(double all_abs, SumOverPeers(ring, input_abs));
    ASSIGN_OR_RETURN(double all_residual, SumOverPeers(ring, SumOf(exchange.residual())));
    const double result_sum = SumOf(data.span());
    // Integers: every sum is exact. Gradient values: each element's float additions
    // round by at most peers * 2^-24 of its sum of magnitudes (twice that allowed).
    const double slack = values == BenchValues::kInteger ? 0 : peers * 0x1p-23 * all_abs;
    if (std::fabs(result_sum + all_residual - all_in) > slack) {
      return absl::DataLossError(absl::StrFormat(
          "%s allreduce is WRONG: result sum %.17g + residual sum %.17g != input sum %.17g "
          "(allowed rounding %.3g)",
          stats.codec_used, result_sum, all_residual, all_in, slack));
    }
    const uint32_t crc = Crc32c(data.data(), n * sizeof(float));
    uint8_t crc_bytes[4];
    std::memcpy(crc_bytes, &crc, 4);
    ASSIGN_OR_RETURN(auto crcs, collective::AllgatherBytes(ring, crc_bytes, kTimeout));
    for (int p = 0; p < peers; ++p) {
      if (crcs[p].size() != 4 || std::memcmp(crcs[p].data(), crc_bytes, 4) != 0) {
        return absl::DataLossError(absl::StrFormat(
            "%s allreduce is WRONG: peer %d holds different result bytes than peer %d",
            stats.codec_used, p, rank));
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<double> max_times, MaxOverPeers(ring, times));
  double total = 0;
  result.seconds_min = 1e300;
  for (double t : max_times) {
    total += t;
    result.seconds_min = std::min(result.seconds_min, t);
    result.seconds_max = std::max(result.seconds_max, t);
  }
  result.seconds = total / max_times.size();
  std::vector<double> sorted = max_times;
  std::sort(sorted.begin(), sorted.end());
  result.seconds_median = sorted[sorted.size() / 2];
  result.wire_bytes = wire / iters;
  result.cpu_seconds = cpu / iters;
  result.minor_faults = faults / iters;
  result.encode_seconds = encode_ms * 1e-3 / iters;
  result.exchange_seconds = exchange_ms * 1e-3 / iters;
  return result;
}

// auto's trials of its candidate codecs: for each, the slowest peer's median of real
// exchanges of n floats, the candidates taking turns (A B C B C A C A B ...). A first,
// untimed round (allocations and first touches) sets how many timed rounds follow:
// enough for about kTrialSeconds of exchanges in all, from kMinTrialRounds to
// kMaxTrialRounds (every peer runs the slowest peer's count). Three timed rounds were
// too few where 4 peers share 2 cores and top-k densities run within 10% of each other:
// a median of 3 moved by more than that gap, and auto's pick ran 10% slower than the
// best fixed codec. With turns, each candidate's median comes from the same stretch of
// time, so the machine's drift over those seconds does not decide.
constexpr double kTrialSeconds = 1.0;
constexpr int kMinTrialRounds = 3, kMaxTrialRounds = 15;
absl::StatusOr<std::vector<double>> TrialSeconds(net::RingTransport* ring, size_t n,
                                                 const std::vector<CodecSpec>& candidates,
                                                 BenchValues values) {
  AlignedBuffer<float> data(n);
  // One exchange for all: its residual only changes which entries top-k sends, not
  // how long that takes.
  collective::BucketExchange exchange(n, {});
  collective::AllreduceOptions options;
  options.timeout = kTimeout;
  std::vector<std::vector<double>> seconds(candidates.size());
  int rounds = 0;  // timed rounds, set after the untimed one
  for (int it = 0; it <= rounds; ++it) {
    std::vector<double> round_s(candidates.size());
    // Round `it` starts at candidate it mod C: each one takes every place in the round
    // in turn, so no candidate always runs first after another's exchange.
    for (size_t turn = 0; turn < candidates.size(); ++turn) {
      const size_t c = (turn + static_cast<size_t>(it)) % candidates.size();
      FillBenchValues(values, data.span(), ring->rank(), it);
      RETURN_IF_ERROR(Barrier(ring));
      collective::ExchangeStats stats;
      Stopwatch watch;
      RETURN_IF_ERROR(
          exchange.Run(ring, data.span(), candidates[c], 1000000, 0, 0, options, &stats));
      round_s[c] = watch.ElapsedSeconds();
      if (it > 0) seconds[c].push_back(round_s[c]);
    }
    if (it == 0) {
      ASSIGN_OR_RETURN(const std::vector<double> slowest, MaxOverPeers(ring, round_s));
      double round_total = 0;
      for (double t : slowest) round_total += t;
      rounds = static_cast<int>(std::clamp(std::ceil(kTrialSeconds / std::max(round_total, 1e-6)),
                                           double{kMinTrialRounds}, double{kMaxTrialRounds}));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& s : seconds) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return MaxOverPeers(ring, medians);
}

// `--compress auto` for one buffer of n floats: times the model's fastest candidates
// (FastestCandidates), plans with those times (budget 0: the fastest), and while the
// plan picks a codec that was never timed (its prediction undercut the measured
// candidates), times it against the fastest measured one and plans again: auto's
// pick is always a measured codec, never a prediction that beat measurements.
absl::StatusOr<CodecSpec> ChooseAutoCodec(net::RingTransport* ring, size_t n,
                                          const collective::RingLinkSummary& links,
                                          const collective::CodecSpeeds& speeds,
                                          BenchValues values) {
  collective::PlannerInputs in;
  in.buckets = {collective::PlanBucket{n, 0}};
  in.peers = ring->size();
  in.bandwidth_bps = links.bottleneck_bps;
  in.rtt_s = links.max_rtt_s;
  in.budget_s = 0;  // the fastest predicted exchange
  in.speeds = speeds;
  in.measured_s.assign(1, {});
  const collective::PlannerOptions po;
  std::vector<CodecSpec> candidates = collective::FastestCandidates(in, po, 0, kAutoTrials);
  std::vector<std::pair<double, CodecSpec>> timed;  // every measured codec, by seconds
  // Each pass times a codec not timed before (or stops), so the ladder bounds the loop.
  while (true) {
    ASSIGN_OR_RETURN(const std::vector<double> trial_s, TrialSeconds(ring, n, candidates, values));
    for (size_t c = 0; c < candidates.size(); ++c) {
      LogInfo("size %d: auto trial: %s %.4f s (predicted %.4f s)", n, candidates[c].ToString(),
              trial_s[c], collective::PredictBucketSeconds(in.buckets[0], candidates[c], in));
      in.measured_s[0][candidates[c].ToString()] = trial_s[c];
      timed.erase(std::remove_if(timed.begin(), timed.end(),
                                 [&](const auto& t) { return t.second == candidates[c]; }),
                  timed.end());
      timed.emplace_back(trial_s[c], candidates[c]);
    }
    ASSIGN_OR_RETURN(collective::CodecPlan plan, collective::PlanCodecs(in, po));
    const CodecSpec chosen = plan.buckets[0].spec;
    const bool measured =
        std::any_of(timed.begin(), timed.end(), [&](const auto& t) { return t.second == chosen; });
    if (measured) {
      for (const std::string& line : collective::DescribePlan(plan)) {
        LogInfo("size %d: %s", n, line);
      }
      return chosen;
    }
    // The fastest measured codec is timed again, in turns with the untimed pick.
    const auto fastest = std::min_element(
        timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    LogInfo("size %d: auto: %s is predicted faster than every timed codec: timing it", n,
            chosen.ToString());
    candidates = {chosen, fastest->second};
  }
}

absl::StatusOr<std::vector<size_t>> ParseSizes(const std::string& text) {
  std::vector<size_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    ASSIGN_OR_RETURN(int64_t n, ParseElementCount(std::string(part)));
    if (n >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--size %d exceeds one buffer's limit (2^32 - 1 elements)", n));
    }
    sizes.push_back(static_cast<size_t>(n));
  }
  return sizes;
}

std::string ResultJson(const SizeResult& r, int peers) {
  const double busbw = r.algbw() * 2.0 * (peers - 1) / peers;
  return absl::StrFormat(
      "\"size\":%d,\"bytes\":%d,\"wire_bytes\":%.0f,\"seconds\":%.6f,\"seconds_min\":%.6f,"
      "\"seconds_max\":%.6f,\"seconds_median\":%.6f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"cpu_"
      "seconds\":%.6f,"
      "\"minor_faults\":%.0f,\"encode_seconds\":%.6f,\"exchange_seconds\":%.6f,\"codec_used\":\"%"
      "s\"",
      r.elements, r.elements * 4, r.wire_bytes, r.seconds, r.seconds_min, r.seconds_max,
      r.seconds_median, r.algbw(), busbw, r.cpu_seconds, r.minor_faults, r.encode_seconds,
      r.exchange_seconds, r.codec_used);
}

// AES-256-GCM seal speed of one core (net/frame_cipher.h) on 1 MiB frames, the ring's
// chunk size: what sealing costs per byte here, whether or not this run seals.
double SealGBpsPerCore() {
  std::vector<uint8_t> in(size_t{1} << 20, 0x5a), out(in.size() + net::kFrameTagBytes);
  net::FrameKey key{};
  key[0] = 1;
  net::FrameSealer sealer(key);
  uint8_t header[net::kFrameHeaderBytes] = {};
  uint64_t sequence = 0, bytes = 0;
  const int64_t start = NowNs();
  while (NowNs() - start < 200'000'000 || sequence < 16) {
    if (!sealer.Seal(sequence++, header, in.data(), in.size(), out.data(), out.data() + in.size())
             .ok()) {
      return 0;
    }
    bytes += in.size();
  }
  return static_cast<double>(bytes) / static_cast<double>(NowNs() - start);
}

absl::Status Run() {
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup_iters);
  if (iters < 1) return absl::InvalidArgumentError("--iters must be at least 1");
  if (warmup < 0) return absl::InvalidArgumentError("--warmup-iters must be >= 0");
  ASSIGN_OR_RETURN(std::vector<size_t> sizes, ParseSizes(absl::GetFlag(FLAGS_size)));
  const std::string compress = absl::GetFlag(FLAGS_compress);
  const bool auto_codec = compress == "auto", reorder = absl::GetFlag(FLAGS_reorder);
  const int zstd_level = absl::GetFlag(FLAGS_zstd_level);
  CodecSpec spec;  // auto: chosen per size below
  if (!auto_codec) {
    ASSIGN_OR_RETURN(spec, collective::ParseCodecSpec(compress, zstd_level));
  } else if (zstd_level < 0 || zstd_level > 19) {
    return absl::InvalidArgumentError("--zstd-level must be in [0, 19]");
  }
  const std::string codec_name = auto_codec ? "auto" : spec.ToString();
  ASSIGN_OR_RETURN(const BenchValues values, ParseBenchValues(absl::GetFlag(FLAGS_values)));
  if (absl::GetFlag(FLAGS_hosts).empty()) {
    return absl::InvalidArgumentError("--hosts is required (a hosts file, one HOST[:PORT] a line)");
  }
  ASSIGN_OR_RETURN(net::RingSetup setup, RingSetupFromFlags("ringtrain-bench-allreduce"));
  // Peers started with different benchmark arguments are refused at the handshake.
  setup.fingerprint = {{"bench", "allreduce"},
                       {"size", absl::GetFlag(FLAGS_size)},
                       {"codec", absl::StrCat(codec_name, " zstd=", zstd_level)},
                       {"reorder", reorder ? "yes" : "no"},
                       {"values", BenchValuesName(values)},
                       {"iters", absl::StrCat(warmup, "+", iters)}};
  ASSIGN_OR_RETURN(std::unique_ptr<net::TcpRing> ring, net::JoinRing(setup));
  LogInfo(
      "ring formed: %d peers, this peer at position %d; codec %s, %d warm-up + %d timed "
      "iterations per size",
      ring->size(), ring->rank(), codec_name, warmup, iters);

  collective::RingLinkSummary links;
  std::string probe_line, probe_json;
  if ((auto_codec || reorder) && ring->size() > 1) {
    collective::ReorderOptions ro;
    ro.reform = reorder;
    ASSIGN_OR_RETURN(collective::ReorderResult probed, collective::ProbeAndReorder(*ring, 0, ro));
    for (const std::string& line : collective::DescribeLinkMatrix(probed.matrix)) {
      LogInfo("%s", line);
    }
    if (probed.ring != nullptr) ring = std::move(probed.ring);
    links = probed.links;
    probe_line = absl::StrFormat("  probe: %.2f s; ring in use: %s\n", probed.probe_stats.seconds,
                                 collective::DescribeRing(probed.matrix, ring->order()));
    LogInfo("ring in use: %s", collective::DescribeRing(probed.matrix, ring->order()));
    probe_json = absl::StrFormat(",\"probe_s\":%.3f,\"bottleneck_bps\":%.0f",
                                 probed.probe_stats.seconds, links.bottleneck_bps);
  }
  std::optional<collective::CodecSpeeds> speeds;
  if (auto_codec && ring->size() > 1) {
    collective::CalibrationOptions co;  // at the real size (one bucket per size), capped
    co.floats =
        std::min(*std::max_element(sizes.begin(), sizes.end()), collective::kMaxCalibrationFloats);
    co.zstd_level = zstd_level > 0 ? zstd_level : 1;
    Stopwatch watch;
    const collective::CodecSpeeds mine = collective::CalibrateCodecs(co);
    LogInfo("codec calibration: %.2f s on %.1fM floats", watch.ElapsedSeconds(), co.floats / 1e6);
    ASSIGN_OR_RETURN(speeds, collective::AgreeCodecSpeeds(*ring, mine, kTimeout));
    for (const collective::DensityProfile& p : speeds->profiles) {
      LogInfo("agreed codec speeds: top-k %g: select %.2f GB/s, %.2f bytes/entry (zstd %.2f)",
              p.density, p.select_bps / 1e9, p.raw_bytes_per_entry, p.zstd_bytes_per_entry);
    }
  }
  const int peers = ring->size(), rank = ring->rank();

  std::printf(
      "bench allreduce: %d peers, rank %d, codec %s, %d warm-up + %d timed iterations,\n"
      "  seconds = mean over iterations of the slowest peer; busbw = algbw*2(N-1)/N\n%s",
      peers, rank, codec_name.c_str(), warmup, iters, probe_line.c_str());
  std::printf("  %12s %12s %14s %10s %10s %10s %11s %11s %10s\n", "elements", "bytes", "wire_bytes",
              "ms", "min ms", "max ms", "algbw GB/s", "busbw GB/s", "cpu ms");
  std::fflush(stdout);
  std::vector<SizeResult> results;
  bool any_lossy = false;  // some size was checked by conservation
  for (size_t n : sizes) {
    CodecSpec size_spec = spec;
    if (auto_codec && peers > 1) {
      ASSIGN_OR_RETURN(size_spec, ChooseAutoCodec(ring.get(), n, links, *speeds, values));
    }
    auto r = BenchOneSize(ring.get(), n, size_spec, values, warmup, iters);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrFormat("size %d: %s", n, r.status().message()));
    }
    std::printf("  %12zu %12zu %14.0f %10.2f %10.2f %10.2f %11.3f %11.3f %10.2f\n", n, n * 4,
                r->wire_bytes, r->seconds * 1e3, r->seconds_min * 1e3, r->seconds_max * 1e3,
                r->algbw(), r->algbw() * 2.0 * (peers - 1) / peers, r->cpu_seconds * 1e3);
    std::fflush(stdout);
    any_lossy = any_lossy || r->conserved;
    results.push_back(*r);
  }
  std::printf("  result check: OK (%s)\n",
              any_lossy ? "sum conserved with residuals, identical bytes"
              : values == BenchValues::kInteger
                  ? "exact integer sums on every element"
                  : "every element within fp32 rounding of the exact sum");
  const double seal_GBps = SealGBpsPerCore();
  std::printf("links %s; AES-256-GCM seal speed on one core: %.2f GB/s\n",
              ring->encrypted() ? "sealed (--encrypt on)" : "not encrypted", seal_GBps);
  std::string all;
  for (const SizeResult& r : results) {
    absl::StrAppend(&all, all.empty() ? "" : ",", "{", ResultJson(r, peers), "}");
  }
  std::printf(
      "{%s,\"codec\":\"%s\",\"encrypted\":%s,\"seal_GBps_per_core\":%.3f,\"peers\":%d,\"rank\":%d,"
      "\"host_rank\":%d,\"iters\":%d,"
      "\"warmup_iters\":%d,\"ring_order\":[%s]%s,\"verified\":true,\"results\":[%s]}\n",
      ResultJson(results.back(), peers).c_str(), codec_name.c_str(),
      ring->encrypted() ? "true" : "false", seal_GBps, peers, rank, ring->host_rank(), iters,
      warmup, absl::StrJoin(ring->order(), ",").c_str(), probe_json.c_str(), all.c_str());
  std::fflush(stdout);
  // Leave together: a peer exiting first would make the others' last frames look
  // like a failure.
  return Barrier(ring.get());
}

}  // namespace

int RunBenchAllreduce(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain bench allreduce: unexpected argument '%s'\n",
                 positional[0].c_str());
    return 2;
  }
  absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "ringtrain bench allreduce: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

std::vector<std::string> BenchAllreduceFlagNames() {
  return {"size",        "iters",   "warmup_iters", "hosts",      "self",    "rank",  "wait",
          "secret_file", "encrypt", "compress",     "zstd_level", "reorder", "values"};
}

}  // namespace rt::cli
