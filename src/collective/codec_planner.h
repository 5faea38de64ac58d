// Automatic codec choice (`--compress auto`): a pure planner.
//
// Given the buckets (sizes in floats), the ring (N peers, bottleneck bandwidth, RTT),
// measured codec speeds (codec_calibration.h) and the time available to hide
// communication (backward compute, or --comm-budget x step time), it picks per bucket
// one rung of the ladder, ordered from least to most lossy:
//   none, bf16, topk:D for each D of `densities` (descending), each top-k rung with
//   or without zstd (lossless: whichever is predicted faster; so zstd is skipped when
//   the link is faster than zstd).
// Objective: the least lossy plan whose predicted total communication time fits the
// budget; if no plan fits, the fastest one. Without a measured budget (inputs.measured
// false: the first step of a run) every bucket gets the least lossy rung, none. Greedy: start with
// every bucket at "none"; while the total exceeds the budget, move the bucket whose move saves the
// most time one step down to the least lossy rung that is faster than its current one (ties: lowest
// bucket index). A bucket stops when no lossier rung is faster, so buckets that never fit end at
// their fastest rung.
//
// Time model per bucket of n floats (B = bandwidth bytes/s, L = RTT/2 one-way, N peers):
//   none   max(2(N-1)/N * 4n / B, (N-1)/N * 4n / add) + 2(N-1) L
//   bf16   4n / bf16 + max(2(N-1)/N * 2n / B, (N-1)/N * 4n / add) + 2(N-1) L
//   topk   4n / select + e / encode [+ raw / zstd_c]                  (e = k + dense)
//          + (N-1) * wire / B + (N-1) L                               (ring allgather)
//          + N * e / decode [+ (N-1) raw / zstd_d] + 4n / add         (decode, sum, zero)
// with raw / wire = e * bytes per entry at D (calibrated, without / with zstd).
// A top-k rung with N*D >= 2 is never chosen (BucketExchange would run it dense).
// Sparse cost grows with N*D while the dense cost stays ~2 * 4n / B: the planner picks
// dense where sparse would cost more.
//
// Measured times override the model: inputs.measured_s[b] maps a spec (ToString())
// to the seconds a real exchange of bucket b took with it (on this ring, as a caller
// timed and agreed it). On CPU-bound links (4 peers on 2 cores, unshaped veths) the
// model's terms interact in ways it does not capture (selection, the kernel's socket
// copies and the reduce all share the same cores), so callers time the fastest
// predicted candidates (FastestCandidates) on the real buffers and plan again.
//
// Determinism: a pure function of its inputs. Peers must feed it identical inputs
// (the shared link matrix and AgreeCodecSpeeds), then every peer gets the same plan.
// Hysteresis: Replan keeps the previous plan unless an input changed by more than
// `hysteresis` (relative), so noise in re-probed links does not flap the choice.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/codec_spec.h"

namespace rt::collective {

// Encoded size of top-k output at one density (from calibration).
struct DensityProfile {
  double density = 0;
  double raw_bytes_per_entry = 0;   // EncodeSparse without zstd
  double zstd_bytes_per_entry = 0;  // with zstd at CodecSpeeds::zstd_level
  double select_bps = 0;            // selection at this density (0 = CodecSpeeds::select_bps)
};

// Measured on this CPU (1 thread). Rates in bytes or entries per second.
struct CodecSpeeds {
  double select_bps = 1e9;         // top-k selection + feedback, fp32 input bytes/s (default)
  double encode_eps = 2e8;         // sparse encode (no zstd), entries/s
  double decode_eps = 2e8;         // sparse decode + add into the bucket, entries/s
  double bf16_bps = 4e9;           // bf16 rounding with feedback, fp32 input bytes/s
  double add_bps = 8e9;            // dense fp32 a += b, bytes of b per second
  int zstd_level = 1;              // level the zstd figures were measured at
  double zstd_compress_bps = 5e8;  // raw encoded bytes/s
  double zstd_decompress_bps = 1.5e9;
  std::vector<DensityProfile> profiles;  // by density; empty = a formula estimate
};

struct PlanBucket {
  size_t floats = 0;        // bucket length
  size_t dense_floats = 0;  // of which always sent under top-k (biases, LayerNorm)
};

struct PlannerInputs {
  std::vector<PlanBucket> buckets;
  int peers = 1;             // N
  double bandwidth_bps = 0;  // ring bottleneck, bytes/s
  double rtt_s = 0;          // largest RTT along the ring
  double budget_s = 0;       // time communication may take per step (hidden)
  // Per bucket (empty, or one map per bucket): measured seconds by spec.ToString().
  std::vector<std::map<std::string, double>> measured_s;
  bool measured = true;  // false: budget_s is not known yet (plan none everywhere)
  CodecSpeeds speeds;
};

struct PlannerOptions {
  std::vector<double> densities = {0.1, 0.03, 0.01, 0.003, 0.001};  // top-k ladder
  bool allow_bf16 = true;
  bool allow_topk = true;
  double hysteresis = 0.25;  // Replan: relative change of an input that forces a new plan
};

struct BucketChoice {
  CodecSpec spec;               // what BucketExchange::Run should use
  double predicted_s = 0;       // predicted exchange time of this bucket
  double predicted_none_s = 0;  // the same bucket uncompressed (for logs)
};

struct CodecPlan {
  std::vector<BucketChoice> buckets;
  double predicted_s = 0;  // sum over buckets
  bool fits = false;       // predicted_s <= budget_s
  PlannerInputs inputs;    // what it was made from (for Replan)
};

// Predicted exchange time (s) of one bucket with `spec` (the model only).
double PredictBucketSeconds(const PlanBucket& bucket, const CodecSpec& spec,
                            const PlannerInputs& in);
// The measured time of bucket b with `spec` if inputs.measured_s has one, else the
// model's prediction.
double BucketSeconds(size_t b, const CodecSpec& spec, const PlannerInputs& in);

// The `count` rungs of the ladder (each with its faster zstd choice) predicted
// fastest for bucket b, fastest first, except that a top-k favourite is followed by
// its other zstd choice (with zstd on); then the sparsest top-k density of the ladder
// if it is not among them (so count + 1 at most): what a caller should time for
// measured_s.
std::vector<CodecSpec> FastestCandidates(const PlannerInputs& inputs, const PlannerOptions& options,
                                         size_t b, size_t count);

// Validates inputs (N >= 1, positive bandwidth when N > 1, finite values, a
// non-empty descending density ladder in (0, 1]) and plans.
absl::StatusOr<CodecPlan> PlanCodecs(const PlannerInputs& inputs, const PlannerOptions& options);

// New measurements: keeps `previous` (with predictions updated) when the bucket
// shapes, N and budget are unchanged and bandwidth, RTT, budget and codec speeds
// moved by at most options.hysteresis (relative); otherwise plans anew.
// *replanned (optional) says which happened.
absl::StatusOr<CodecPlan> Replan(const CodecPlan& previous, const PlannerInputs& inputs,
                                 const PlannerOptions& options, bool* replanned = nullptr);

// One human line per distinct choice plus a summary line, e.g.
//   "auto codec: topk:0.01+zstd1 for 10 buckets (98.3M floats): 85.2 ms (none: 7.9 s)"
//   "auto codec plan: 4 peers, link 11.8 MB/s rtt 0.40 ms: 120 ms predicted, budget 300 ms (fits)"
std::vector<std::string> DescribePlan(const CodecPlan& plan);

}  // namespace rt::collective
