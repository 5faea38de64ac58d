// Flags shared by several subcommands (DESIGN "Command-line contract"). A flag used
// by only one subcommand is defined in that subcommand's file instead.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "model/gpt_config.h"
#include "net/ring_setup.h"
#include "sync/round_sync.h"
#include "train/ring_gradient_reducer.h"

// Model shape and execution (train, bench, plan).
ABSL_DECLARE_FLAG(int, layers);
ABSL_DECLARE_FLAG(int, heads);
ABSL_DECLARE_FLAG(int, dim);
ABSL_DECLARE_FLAG(int, seq_len);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(int, accum);
ABSL_DECLARE_FLAG(int, vocab);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(bool, recompute);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, arch);
ABSL_DECLARE_FLAG(double, rope_theta);
ABSL_DECLARE_FLAG(int, ffn_dim);
ABSL_DECLARE_FLAG(bool, untied);

// Optimizer (train, bench).
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(double, min_lr);
ABSL_DECLARE_FLAG(int, warmup);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(double, clip);
ABSL_DECLARE_FLAG(int, steps);
ABSL_DECLARE_FLAG(uint64_t, seed);

// Data and outputs.
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, ckpt);
ABSL_DECLARE_FLAG(std::string, ckpt_dir);
ABSL_DECLARE_FLAG(std::string, metrics);
ABSL_DECLARE_FLAG(std::string, out);  // prepare, export
ABSL_DECLARE_FLAG(bool, json);        // status, sample

// The ring (train, bench allreduce).
ABSL_DECLARE_FLAG(std::string, hosts);
ABSL_DECLARE_FLAG(std::string, self);
ABSL_DECLARE_FLAG(int, rank);
ABSL_DECLARE_FLAG(double, wait);
ABSL_DECLARE_FLAG(std::string, secret_file);
ABSL_DECLARE_FLAG(std::string, encrypt);
ABSL_DECLARE_FLAG(std::string, compress);
ABSL_DECLARE_FLAG(int, zstd_level);
ABSL_DECLARE_FLAG(double, bucket_mb);
ABSL_DECLARE_FLAG(int, zero);  // optimizer sharding 0|1 (train, plan)
// Link probing and automatic codec choice (train; bench allreduce reads --compress auto).
ABSL_DECLARE_FLAG(int, probe_every);
ABSL_DECLARE_FLAG(double, comm_budget);
ABSL_DECLARE_FLAG(int, topk_warmup);
ABSL_DECLARE_FLAG(int, topk_refresh);
// Round sync (train, plan).
ABSL_DECLARE_FLAG(int, outer_every);
ABSL_DECLARE_FLAG(double, outer_lr);
ABSL_DECLARE_FLAG(double, outer_momentum);
ABSL_DECLARE_FLAG(std::string, outer_compress);
ABSL_DECLARE_FLAG(std::string, outer_overlap);
ABSL_DECLARE_FLAG(double, inner_lr_scale);
ABSL_DECLARE_FLAG(int, outer_after);  // train only (not in RoundSyncFlagNames)

namespace rt::cli {

// Flag-name groups for Subcommand::flags.
// layers heads dim seq_len batch accum precision recompute threads arch rope_theta ffn_dim
// untied
std::vector<std::string> ModelFlagNames();
std::vector<std::string> OptimizerFlagNames();  // lr min_lr warmup weight_decay clip steps seed
std::vector<std::string>
RingFlagNames();  // hosts self rank wait secret_file encrypt compress zstd_level bucket_mb

std::vector<std::string> CommFlagNames();  // probe_every comm_budget topk_warmup topk_refresh
std::vector<std::string>
RoundSyncFlagNames();  // outer_every outer_lr outer_momentum outer_compress outer_overlap
                       // inner_lr_scale (plan accepts and checks them; only H, the codec
                       // and overlap change its figures)

// --outer-every, --outer-lr, --outer-momentum, --outer-compress, --outer-after,
// --inner-lr-scale, checked;
// with H > 0 also the combinations that cannot work (--zero 1, a per-step --compress
// other than none, or with --outer-after other than none or bf16, --topk-refresh), each
// refused with a message naming the flags. train and plan both call it, so both refuse
// the same things (plan does not take --outer-after: it stays 0 there).
absl::StatusOr<sync::RoundSyncOptions> RoundSyncFromFlags();

// --compress none|bf16|topk:D|auto, --zstd-level, --probe-every, --comm-budget into
// options->buckets.codec and options->comm (channel_salt is left to the caller).
// auto: comm.auto_codec, buckets.codec = none until the first plan, the planner may
// use zstd at --zstd-level (1 when 0). Returns a summary for logs and the ring
// fingerprint (every peer must run the same), e.g.
// "auto zstd=1 probe_every=0 comm_budget=0 topk_warmup=0". Errors name the flag.
// --probe-every: N > 0 every N steps, 0 = at the first step when auto or >= 3 peers,
// -1 = never (refused with auto). --topk-warmup -1 (the default) = max(75, --steps / 10).
absl::StatusOr<std::string> ApplyCommFlags(train::RingReducerOptions* options);

// --bucket-mb as bytes (train and plan read the same flag): in (0, 4096] MB, or an error
// naming the flag and the value (NaN, infinity and absurd sizes would not fit a size_t).
absl::StatusOr<size_t> BucketBytesFromFlag();

// The ring flags (--hosts --self --rank --secret-file --wait) as a RingSetup for
// `cluster_id`; the caller adds the fingerprint. Error if --wait is not positive.
absl::StatusOr<net::RingSetup> RingSetupFromFlags(const std::string& cluster_id);

// --arch gpt2|llama and, for llama, --rope-theta --ffn-dim --untied into `config`
// (its shape flags are the caller's). Errors name the flag: an unknown arch, a llama
// flag given with --arch gpt2. The caller validates the whole config afterwards.
absl::Status ApplyArchFlags(model::GptConfig* config);

// Applies --threads (0 = all cores) to OpenMP and returns the count used.
int ApplyThreadsFlag();

}  // namespace rt::cli
