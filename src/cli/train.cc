// `ringtrain train`: flags -> TrainConfig -> [--hosts: a TcpNode and an elastic ring
// (src/train/elastic_reducer.h)] -> Trainer::Run (src/train/trainer.h).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ckpt/peer_marker.h"
#include "cli/common_flags.h"
#include "cli/fetch_setup.h"
#include "cli/subcommand.h"
#include "cli/test_hooks.h"
#include "cluster/membership_service.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "data/token_dataset.h"
#include "fetch/data_server.h"
#include "fetch/fetch_phase.h"
#include "fetch/local_data.h"
#include "model/matmul_speed.h"
#include "model/onednn_isa.h"
#include "model/param_layout.h"
#include "net/handshake.h"
#include "net/hosts_file.h"
#include "net/ring_setup.h"
#include "net/self_identity.h"
#include "net/tcp_node.h"
#include "observe/http_server.h"
#include "observe/status_board.h"
#include "observe/status_site.h"
#include "train/elastic_reducer.h"
#include "train/ring_gradient_reducer.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

ABSL_FLAG(int, eval_every, 100, "Evaluate val loss and bits per byte every N steps (0 = never)");
ABSL_FLAG(int, eval_batches, 10, "Evaluation uses eval_batches * batch fixed val windows");
ABSL_FLAG(int, ckpt_every, 0, "Also checkpoint every N steps (0 = only at the end)");
// 30 minutes by default: a run of weeks then never loses more than half an hour of the
// ring's work to a crash of every peer, and a checkpoint costs a step almost nothing
// (written beside training: about 1 ms of a 24 s step at 1B parameters), only disk
// bandwidth and space (--keep of them).
ABSL_FLAG(double, ckpt_minutes, 30,
          "With --ckpt-dir: also checkpoint once this many minutes have passed since the "
          "last checkpoint on any peer (all peers agree on the step; 0 = off)");
ABSL_FLAG(int, keep, 3, "Keep the newest N valid checkpoints (0 = all)");
ABSL_FLAG(bool, resume, true,
          "Continue from the newest valid checkpoint in --ckpt-dir if there is one (the "
          "default); --resume=false refuses a --ckpt-dir that holds a checkpoint");
ABSL_FLAG(int, check_every, 10,
          "With --hosts: compare every peer's param_hash every N steps, stop on a mismatch "
          "(0 = never)");
ABSL_FLAG(int, global_batch, 0,
          "Sequences per optimizer step over all peers, shared out among the live peers "
          "(0 = batch * accum * hosts in the file); pass it explicitly to grow a job");
ABSL_FLAG(std::string, balance, "on",
          "With --hosts: on = each peer's share of the global batch follows its measured "
          "speed (slow peers take fewer sequences); off = equal shares");
ABSL_FLAG(double, max_skew, 8,
          "With --balance on: a peer more than this many times slower than the fastest gets "
          "no slots (it is re-measured every 16 steps)");
ABSL_FLAG(double, peer_timeout, 3,
          "With --hosts: seconds of silence after which a peer is suspected and removed (a "
          "killed peer's closed sockets are noticed at once)");
ABSL_FLAG(int, min_peers, 0,
          "With --hosts: peers needed to train (0 = more than half of the hosts file)");
ABSL_FLAG(std::string, http, "",
          "Serve read-only status pages on [ADDR:]PORT: / (dashboard), /metrics (Prometheus), "
          "/api/status (JSON). A bare port binds 127.0.0.1 only; name another address "
          "explicitly (e.g. 0.0.0.0:9100) to serve other machines. Off by default");
ABSL_FLAG(std::string, events, "",
          "Append the cluster's events (view changes, peers leaving and joining and why, "
          "pauses, checkpoints) to this JSONL file; on a ring only the leader writes");
ABSL_FLAG(bool, ckpt_shared, false,
          "With --hosts: --ckpt-dir is one shared directory; only the leader writes (else its "
          "ring successor writes a copy too)");

namespace rt::cli {
namespace {

// --precision bf16 where oneDNN has no native bf16 (no avx512_bf16/AMX, or an ISA cap):
// an error where it has no bf16 matmul at all (AVX2), else one warning with the
// slowdown measured on a 512^3 matmul (under 0.1 s), so the cost is a figure, not a
// guess. --precision auto already picks fp32 there.
absl::Status CheckBf16Speed() {
  const model::Bf16Support support = model::GetBf16Support();
  if (support == model::Bf16Support::kNative) return absl::OkStatus();
  const std::string isa = model::OnednnIsaName();  // the cap is applied by now
  if (support == model::Bf16Support::kUnavailable) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "error: --precision bf16: bf16 is not available on this CPU (oneDNN ISA %s has no bf16 "
        "matmul); use --precision fp32 or auto",
        isa));
  }
  ASSIGN_OR_RETURN(model::MatmulSpeed fp32, model::MeasureMatmul(model::MatType::kF32, 512, 3));
  ASSIGN_OR_RETURN(model::MatmulSpeed bf16, model::MeasureMatmul(model::MatType::kBf16, 512, 3));
  LogWarning(
      "--precision bf16 is emulated on this CPU (oneDNN ISA %s, no avx512_bf16/AMX): a 512^3 "
      "bf16 matmul runs %.1fx slower than fp32 (%.0f against %.0f GFLOP/s); --precision fp32 "
      "(or auto) trains faster here",
      isa, fp32.gflops / bf16.gflops, bf16.gflops, fp32.gflops);
  return absl::OkStatus();
}

// The test fault of train::AllgatherStop from $RINGTRAIN_TEST_STOP_IN_ALLGATHER (unset
// or empty: none; main checked its syntax at start-up). Only fault tests set it.
absl::StatusOr<train::AllgatherStop> AllgatherStopFromEnv() {
  const char* env = std::getenv("RINGTRAIN_TEST_STOP_IN_ALLGATHER");
  return ParseAllgatherStopHook(env == nullptr ? "" : env);
}

// m.jsonl -> m.rank1.jsonl (other names: FILE -> FILE.rank1): every peer of a local
// ring gets the same arguments, so each needs its own file.
std::string PerPeerMetricsPath(const std::string& path, int rank) {
  if (absl::EndsWith(path, ".jsonl")) {
    return absl::StrCat(path.substr(0, path.size() - 6), ".rank", rank, ".jsonl");
  }
  return absl::StrCat(path, ".rank", rank);
}

std::string FileCrc(const std::string& path) {
  if (path.empty()) return "none";
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::StrFormat("%08x (%d bytes)", Crc32c(bytes.data(), bytes.size()), bytes.size());
}

// The hosts file, this peer's identity, the secret and a listening node whose
// handshake refuses peers that differ in `fingerprint` (naming the key).
absl::StatusOr<std::shared_ptr<net::TcpNode>> StartTrainNode(const net::RingSetup& setup) {
  ASSIGN_OR_RETURN(std::vector<net::HostEntry> hosts, net::LoadHostsFile(setup.hosts_path));
  ASSIGN_OR_RETURN(net::IdentityInputs inputs,
                   net::IdentityInputsFromEnvironment(setup.self, setup.rank));
  ASSIGN_OR_RETURN(net::SelfIdentity self, net::ResolveSelfIdentity(hosts, inputs));
  SetLogRank(self.rank);
  LogInfo("this peer is rank %d of %d (%s, from %s)", self.rank, hosts.size(),
          hosts[self.rank].Endpoint(), self.how);
  ASSIGN_OR_RETURN(const bool encrypt, net::ResolveEncrypt(setup.encrypt, hosts));
  ASSIGN_OR_RETURN(std::string secret, net::LoadSharedSecret(setup.secret_file, hosts, encrypt));
  if (secret.empty()) LogInfo("no shared secret: every host is loopback");
  LogInfo("links are %s (--encrypt %s)", encrypt ? "sealed with AES-256-GCM" : "not encrypted",
          setup.encrypt);
  net::TcpNodeOptions o;
  o.hosts = std::move(hosts);
  o.self_rank = self.rank;
  o.secret = std::move(secret);
  o.encrypt = encrypt;
  o.cluster_id = setup.cluster_id;
  o.fingerprint = setup.fingerprint;
  return net::TcpNode::Start(std::move(o));
}

// This peer's marker in --ckpt-dir (ckpt/peer_marker.h), held for the whole run, and
// the test of whether a given leader's marker is live there too. Peers already running
// on the same directory are named now; the first peer of a shared directory learns it
// at its first checkpoint. A directory that cannot take the marker (read-only, full) is
// only warned about: checkpoint writes report their own errors.
absl::StatusOr<std::function<bool(const cluster::PeerId&)>> WatchSharedCkptDir(
    const std::string& ckpt_dir, const net::TcpNode& node) {
  absl::StatusOr<std::unique_ptr<ckpt::PeerMarker>> marker =
      ckpt::PeerMarker::Create(ckpt_dir, node.self_endpoint());
  if (absl::IsFailedPrecondition(marker.status())) return marker.status();
  if (!marker.ok()) {
    LogWarning(
        "--ckpt-dir %s: cannot write this peer's marker (%s): a directory shared with "
        "other peers will not be detected",
        ckpt_dir, marker.status().message());
    return std::function<bool(const cluster::PeerId&)>();
  }
  const std::vector<std::string> others = (*marker)->LiveOthers();
  if (!others.empty()) {
    LogWarning(
        "--ckpt-dir %s is also used by running peer(s) %s: a shared directory (NFS, or peers "
        "on one machine) without --ckpt-shared; handled as --ckpt-shared: only the leader "
        "writes checkpoints into it",
        ckpt_dir, absl::StrJoin(others, " "));
  }
  std::shared_ptr<ckpt::PeerMarker> held = *std::move(marker);
  return std::function<bool(const cluster::PeerId&)>(
      [held](const cluster::PeerId& leader) { return held->IsLive(leader); });
}

// The elastic ring of --hosts: a node with a fingerprint of everything every peer
// must agree on, the membership (started by the trainer once its state is loaded)
// and, per view, a RingGradientReducer. Sets c->global_batch (default: batch * accum *
// hosts).
//
// Data from peers: a --data directory that is missing or incomplete is fetched first
// (fetch/fetch_phase.h: a phase of its own on this peer's port, before the ring's node
// exists, because the ring's handshake compares data fingerprints and this peer has
// none yet). Once the ring's node listens, *data_server serves this peer's complete
// copy on it (kDataFetchChannel) to peers fetching later, for as long as it lives.
// Other data problems are reported before any peer is contacted.
absl::StatusOr<std::unique_ptr<train::ElasticReducer>> JoinTrainCluster(
    train::TrainConfig* c, std::shared_ptr<observe::StatusBoard> board,
    std::unique_ptr<fetch::DataServer>* data_server) {
  RETURN_IF_ERROR(c->Validate());
  ASSIGN_OR_RETURN(net::RingSetup setup, RingSetupFromFlags(kTrainClusterId));
  if (!fetch::DataDirComplete(c->data_dir)) {
    LogInfo("--data %s is missing or incomplete: fetching it from the peers first", c->data_dir);
    ASSIGN_OR_RETURN(fetch::FetchPhaseOptions fetch_options,
                     FetchPhaseOptionsFrom(setup, c->data_dir));
    // SIGTERM/SIGINT during the fetch stop it at once (Cancelled): the run has not begun,
    // and what arrived stays checked on disk for the next run.
    fetch_options.stop = [] { return train::StopRequested(); };
    fetch::FetchReport report;
    const absl::Status fetched = fetch::RunFetchPhase(fetch_options, &report);
    LogFetchReport(report);
    if (!fetched.ok()) {
      return absl::Status(fetched.code(),
                          absl::StrCat("--data ", c->data_dir, ": ", fetched.message()));
    }
  }
  absl::StatusOr<data::TokenDataset> opened = data::TokenDataset::Open(c->data_dir, "train");
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("--data ", c->data_dir, ": ", opened.status().message()));
  }
  const data::TokenDataset& train_data = *opened;
  model::GptConfig shape = c->model;
  shape.vocab_size = train_data.vocab_size();
  RETURN_IF_ERROR(shape.Validate());
  const model::ParamLayout layout(shape);

  ASSIGN_OR_RETURN(const size_t bucket_bytes, BucketBytesFromFlag());
  const double bucket_mb = absl::GetFlag(FLAGS_bucket_mb);  // for the logs and fingerprint
  const double peer_timeout_s = absl::GetFlag(FLAGS_peer_timeout);
  if (!(peer_timeout_s >= 0.1) || peer_timeout_s > 3600) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--peer-timeout must be in [0.1, 3600] seconds, got %g", peer_timeout_s));
  }
  const int check_every = absl::GetFlag(FLAGS_check_every);
  if (check_every < 0) return absl::InvalidArgumentError("--check-every must be >= 0");
  train::RingReducerOptions ring_options;
  ASSIGN_OR_RETURN(const std::string comm, ApplyCommFlags(&ring_options));
  const int zero = absl::GetFlag(FLAGS_zero);
  if (zero != 0 && zero != 1) {
    return absl::InvalidArgumentError(absl::StrFormat("--zero must be 0 or 1, got %d", zero));
  }
  if (zero == 1 && (ring_options.comm.auto_codec ||
                    ring_options.buckets.codec.kind == collective::CodecKind::kTopK)) {
    return absl::InvalidArgumentError(
        "--zero 1 works with --compress none or bf16: a top-k sum is not reduce-scattered (it "
        "reaches every peer whole), so sharding would add a 4-byte-per-parameter allgather to "
        "a codec that exists to avoid such bytes");
  }
  ring_options.shard_optimizer = zero == 1;
  ASSIGN_OR_RETURN(ring_options.test_stop_in_allgather, AllgatherStopFromEnv());
  // Round sync: the options above are the per-step exchange's (all of the run without
  // --outer-every, the steps before --outer-after with it); the trainer turns the
  // reducers to the outer exchange when round sync begins (GradientReducer::UseRoundSync:
  // --outer-compress, its error feedback kept per peer across rounds and views, the
  // replicas compared at every outer step).
  ASSIGN_OR_RETURN(std::vector<net::HostEntry> hosts, net::LoadHostsFile(setup.hosts_path));
  if (c->global_batch == 0) c->global_batch = c->batch * c->accum * static_cast<int>(hosts.size());

  setup.fingerprint = {
      {"model", shape.ToString()},
      // --precision auto is settled per peer: each computes in what its CPU does well
      // (bf16 only rounds matmul inputs; weights, optimizer state and the exchanged
      // gradients stay fp32, and the reduction is the same on every peer, so replicas
      // stay bit-identical), and a fleet of mixed CPU generations trains under default
      // flags. An explicit fp32 or bf16 must match.
      {"precision", absl::GetFlag(FLAGS_precision) == "auto"
                        ? std::string("auto (per peer)")
                        : std::string(model::PrecisionName(c->precision))},
      {"global_batch",
       absl::StrFormat("%d sequences per step (--global-batch; the default is batch * accum * "
                       "hosts)",
                       c->global_batch)},
      {"batch", absl::StrFormat("%d sequences per micro-step", c->batch)},
      {"balance", absl::StrFormat("--balance %s --max-skew %g", c->balance.enabled ? "on" : "off",
                                  c->balance.max_skew)},
      {"lr", absl::StrCat(c->lr)},
      {"min_lr", absl::StrCat(c->min_lr)},
      {"warmup", absl::StrCat(c->warmup)},
      {"weight_decay", absl::StrCat(c->adamw.weight_decay)},
      {"clip", absl::StrCat(c->clip)},
      {"adamw",
       absl::StrFormat("beta1=%g beta2=%g eps=%g", c->adamw.beta1, c->adamw.beta2, c->adamw.eps)},
      {"steps", absl::StrCat(c->steps)},
      {"seed", absl::StrCat(c->seed)},
      {"data", train_data.fingerprint()},
      {"tokenizer", FileCrc(train_data.tokenizer_path())},
      {"compress", comm},
      {"bucket_mb", absl::StrCat(bucket_mb)},
      {"check_every", absl::StrCat(check_every)},
      {"ckpt_every", absl::StrCat(c->ckpt_every)},
      {"zero", absl::StrFormat("--zero %d", zero)},
      {"outer", c->round.enabled() ? c->round.ToString() : "per-step sync"},
  };
  ASSIGN_OR_RETURN(std::shared_ptr<net::TcpNode> node, StartTrainNode(setup));
  ASSIGN_OR_RETURN(std::shared_ptr<fetch::LocalData> local_data,
                   fetch::LocalData::Open(c->data_dir));
  *data_server = std::make_unique<fetch::DataServer>(node, std::move(local_data));

  ring_options.buckets.bucket_bytes = bucket_bytes;
  for (const model::TensorView& t : layout.tensors()) {
    if (!t.weight_decay) {
      ring_options.buckets.dense_ranges.push_back({t.offset, t.offset + t.count});
    }
  }
  std::sort(ring_options.buckets.dense_ranges.begin(), ring_options.buckets.dense_ranges.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  ring_options.check_every = check_every;
  // A receive on the ring gives up no sooner than the membership would declare the
  // sender dead: with a long --peer-timeout (peers that may be paused for minutes: a
  // VM migrating, a frozen cgroup) a paused ring resumes instead of failing its step
  // on every peer at once and then waiting a whole peer timeout for a new view.
  const absl::Duration ring_wait = std::max(absl::Seconds(120), absl::Seconds(2 * peer_timeout_s));
  ring_options.timeout = ring_wait;
  ring_options.buckets.allreduce.timeout = ring_wait;
  ring_options.comm.probe.probe.timeout = std::max(absl::Seconds(30), ring_wait / 2);
  // Residuals, calibration and measurements outlive each view's reducer.
  ring_options.carried = std::make_shared<train::CarriedCommState>();

  train::ElasticOptions e;
  e.node = node;
  e.min_peers = absl::GetFlag(FLAGS_min_peers);
  e.peer_timeout_ms = static_cast<int64_t>(peer_timeout_s * 1000);
  e.wait = setup.wait;
  // The first view waits for every host for min(10 s, --wait / 2), then forms with a
  // quorum of those present: half of --wait, so that a short --wait (say 10 s with
  // --min-peers 1 and a host down) still leaves time to form before it runs out.
  e.startup_grace_ms = std::min<int64_t>(10000, absl::ToInt64Milliseconds(setup.wait) / 2);
  e.ckpt_shared = absl::GetFlag(FLAGS_ckpt_shared);
  if (!c->ckpt_dir.empty() && !e.ckpt_shared) {
    ASSIGN_OR_RETURN(e.ckpt_dir_shared_with, WatchSharedCkptDir(c->ckpt_dir, *node));
  }
  e.steps = c->steps;
  e.hosts_path = setup.hosts_path;
  e.board = std::move(board);
  e.precondition_from = ring_options.buckets.precondition_from;
  e.shard_optimizer = ring_options.shard_optimizer;
  // A transfer partner that died is noticed by the membership within peer_timeout.
  e.transfer.connect_timeout = absl::Seconds(std::max(2.0, 2 * peer_timeout_s));
  e.transfer.idle_timeout = std::max(e.transfer.idle_timeout, absl::Seconds(2 * peer_timeout_s));
  // A reducer per view; its probe and re-form channels are salted with the view's
  // ring channel, so views never share a link.
  e.make_reducer = [ring_options](std::unique_ptr<net::TcpRing> ring, const cluster::View& view)
      -> absl::StatusOr<std::unique_ptr<train::GradientReducer>> {
    train::RingReducerOptions o = ring_options;
    o.comm.channel_salt = cluster::RingChannel(view);
    return std::unique_ptr<train::GradientReducer>(
        std::make_unique<train::RingGradientReducer>(std::move(ring), std::move(o)));
  };
  LogInfo(
      "elastic ring: global batch %d sequences, compress %s, buckets of %g MB, peer "
      "timeout %g s",
      c->global_batch, comm, bucket_mb, peer_timeout_s);
  return train::ElasticReducer::Create(std::move(e));
}

int RunTrain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain train: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  // Round sync's refusals first: they name the combination (--zero 1 alone would
  // otherwise be refused only for lacking --hosts).
  const absl::StatusOr<sync::RoundSyncOptions> round = RoundSyncFromFlags();
  if (!round.ok()) {
    std::fprintf(stderr, "ringtrain train: %s\n", std::string(round.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_hosts).empty()) {
    const char* ring_only = !absl::GetFlag(FLAGS_self).empty()          ? "--self"
                            : absl::GetFlag(FLAGS_rank) >= 0            ? "--rank"
                            : !absl::GetFlag(FLAGS_secret_file).empty() ? "--secret-file"
                            : absl::GetFlag(FLAGS_encrypt) != "auto"    ? "--encrypt"
                            : absl::GetFlag(FLAGS_compress) != "none"   ? "--compress"
                            : absl::GetFlag(FLAGS_min_peers) != 0       ? "--min-peers"
                            : absl::GetFlag(FLAGS_ckpt_shared)          ? "--ckpt-shared"
                            : absl::GetFlag(FLAGS_zero) != 0            ? "--zero"
                                                                        : nullptr;
    if (ring_only != nullptr) {
      std::fprintf(stderr,
                   "ringtrain train: %s needs --hosts (a ring); without it train runs alone\n",
                   ring_only);
      return 2;
    }
  }
  train::TrainConfig c;
  c.data_dir = absl::GetFlag(FLAGS_data);
  c.model.n_layers = absl::GetFlag(FLAGS_layers);
  c.model.n_heads = absl::GetFlag(FLAGS_heads);
  c.model.dim = absl::GetFlag(FLAGS_dim);
  c.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  if (absl::Status s = ApplyArchFlags(&c.model); !s.ok()) {
    std::fprintf(stderr, "ringtrain train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<model::Precision> precision =
      model::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) {
    std::fprintf(stderr, "ringtrain train: --precision: %s\n",
                 std::string(precision.status().message()).c_str());
    return 2;
  }
  c.precision = *precision;
  c.recompute = absl::GetFlag(FLAGS_recompute);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.accum = absl::GetFlag(FLAGS_accum);
  c.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  c.min_lr = static_cast<float>(absl::GetFlag(FLAGS_min_lr));
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.adamw.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  c.clip = static_cast<float>(absl::GetFlag(FLAGS_clip));
  c.steps = absl::GetFlag(FLAGS_steps);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.eval_every = absl::GetFlag(FLAGS_eval_every);
  c.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  c.ckpt_dir = absl::GetFlag(FLAGS_ckpt_dir);
  c.ckpt_every = absl::GetFlag(FLAGS_ckpt_every);
  c.ckpt_minutes = absl::GetFlag(FLAGS_ckpt_minutes);
  c.ckpt_keep = absl::GetFlag(FLAGS_keep);
  c.global_batch = absl::GetFlag(FLAGS_global_batch);
  const std::string balance = absl::GetFlag(FLAGS_balance);
  if (balance != "on" && balance != "off") {
    std::fprintf(stderr, "ringtrain train: --balance must be on or off, got '%s'\n",
                 balance.c_str());
    return 2;
  }
  c.balance.enabled = balance == "on";
  c.balance.max_skew = absl::GetFlag(FLAGS_max_skew);
  // Resuming is the default; without a --ckpt-dir there is nothing to resume from.
  c.resume = absl::GetFlag(FLAGS_resume) && !c.ckpt_dir.empty();
  c.metrics_path = absl::GetFlag(FLAGS_metrics);
  c.round = *round;

  // Status pages and the event log first: a port in use or an unwritable --events
  // file is an error before any data is read or any peer is contacted. A ring peer
  // always keeps a board: its reports reach the peers that serve pages.
  const bool ring = !absl::GetFlag(FLAGS_hosts).empty();
  std::shared_ptr<observe::StatusBoard> board;
  std::unique_ptr<observe::HttpServer> http;
  const std::string http_spec = absl::GetFlag(FLAGS_http);
  if (ring || !http_spec.empty() || !absl::GetFlag(FLAGS_events).empty()) {
    observe::BoardOptions bo;
    bo.ckpt_dir = c.ckpt_dir;
    bo.events_path = absl::GetFlag(FLAGS_events);
    board = std::make_shared<observe::StatusBoard>(bo);
    absl::Status started = board->Start();
    if (!started.ok()) {
      std::fprintf(stderr, "ringtrain train: %s\n", std::string(started.message()).c_str());
      return 2;
    }
  }
  if (!http_spec.empty()) {
    absl::StatusOr<std::pair<std::string, uint16_t>> where =
        observe::ParseHttpListenAddress(http_spec);
    absl::StatusOr<std::unique_ptr<observe::HttpServer>> server =
        where.ok() ? observe::HttpServer::Start({where->first, where->second},
                                                observe::StatusSiteHandler(board))
                   : where.status();
    if (!server.ok()) {
      std::fprintf(stderr, "ringtrain train: %s\n", std::string(server.status().message()).c_str());
      return 2;
    }
    http = *std::move(server);
    LogInfo("status pages on http://%s/ (/metrics, /api/status)", http->address());
  }

  const int threads = ApplyThreadsFlag();
  LogInfo("ringtrain train: %d threads, %s", threads, model::DescribeComputePaths());
  absl::Status status;
  if (c.precision == model::Precision::kBf16) status = CheckBf16Speed();
  std::unique_ptr<train::GradientReducer> reducer;
  // Serves this peer's data to peers fetching theirs, as long as the ring's node lives.
  std::unique_ptr<fetch::DataServer> data_server;
  // SIGTERM/SIGINT stop cleanly after the step in flight, with a checkpoint: alone
  // as in a ring.
  train::InstallStopSignalHandlers();
  if (!status.ok()) {
    // Nothing started yet: the cleanup below reports it.
  } else if (!ring) {
    reducer = std::make_unique<train::LocalGradientReducer>(/*watch_signals=*/true);
  } else {
    absl::StatusOr<std::unique_ptr<train::ElasticReducer>> elastic =
        JoinTrainCluster(&c, board, &data_server);
    status = elastic.status();
    if (status.ok()) {
      if (!c.metrics_path.empty()) {
        c.metrics_path = PerPeerMetricsPath(c.metrics_path, (*elastic)->host_rank());
        LogInfo("metrics of this peer go to %s", c.metrics_path);
      }
      reducer = *std::move(elastic);
    }
  }
  if (status.ok()) {
    absl::StatusOr<std::unique_ptr<train::Trainer>> trainer =
        train::Trainer::Create(c, std::move(reducer), board);
    status = trainer.ok() ? (*trainer)->Run() : trainer.status();
    if (board) {
      observe::ClusterEvent e;
      e.kind = status.ok() ? "stopped" : "failed";
      e.message = status.ok() ? "training ended cleanly"
                              : absl::StrCat("training failed: ", status.message());
      board->Record(std::move(e));
      board->SetActivity(status.ok() ? "stopped" : "failed",
                         status.ok() ? "" : std::string(status.message()));
    }
  }
  http.reset();
  if (board) board->Stop();
  if (absl::IsCancelled(status) && train::StopRequested()) {
    // Stopped by SIGTERM/SIGINT before training began (e.g. while fetching --data):
    // the stop the user asked for, so exit 0 as a stop during training does.
    std::fprintf(stderr, "ringtrain train: stopped by %s before training began: %s\n",
                 train::StopSignal() == SIGINT ? "SIGINT" : "SIGTERM",
                 std::string(status.message()).c_str());
    return 0;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ringtrain train: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

std::vector<std::string> TrainFlagNames() {
  std::vector<std::string> names = ModelFlagNames();
  for (const std::string& n : OptimizerFlagNames()) names.push_back(n);
  for (const char* n :
       {"data",         "ckpt_dir",     "metrics",    "eval_every",  "eval_batches", "ckpt_every",
        "ckpt_minutes", "keep",         "resume",     "check_every", "global_batch", "balance",
        "max_skew",     "peer_timeout", "min_peers",  "ckpt_shared", "http",         "events",
        "zero",         "fetch_wait",   "outer_after"}) {
    names.push_back(n);
  }
  for (const std::string& n : RingFlagNames()) names.push_back(n);
  for (const std::string& n : CommFlagNames()) names.push_back(n);
  for (const std::string& n : RoundSyncFlagNames()) names.push_back(n);
  return names;
}

}  // namespace

const Subcommand& TrainSubcommand() {
  static const Subcommand sub{
      "train",
      "Train a GPT on prepared token shards (one peer, or a ring with --hosts)",
      "ringtrain train --data DIR [--layers 6 --heads 6 --dim 384 --seq-len 256] [--batch 8]\n"
      "                [--accum 1 | --global-batch N] [--steps 1000] [--lr 6e-4]\n"
      "                [--ckpt-dir DIR [--ckpt-minutes 30] [--ckpt-every N] [--keep 3] "
      "[--resume=false]]\n"
      "                [--metrics FILE.jsonl] [--eval-every 100]\n"
      "                [--http [ADDR:]PORT] [--events FILE.jsonl]\n"
      "                [--hosts FILE [--self HOST:PORT | --rank N] [--secret-file F] [--wait 120]\n"
      "                 [--peer-timeout 3] [--min-peers N] [--ckpt-shared]\n"
      "                 [--balance on|off] [--max-skew 8]\n"
      "                 [--compress none|bf16|topk:D|auto] [--bucket-mb 25] [--check-every 10]\n"
      "                 [--zero 0|1]]\n"
      "                [--outer-every H [--outer-lr 0.7] [--outer-momentum 0.9] [--outer-after N]\n"
      "                 [--outer-compress none|bf16|int8|int4|topk:D] [--outer-overlap on|off]\n"
      "                 [--inner-lr-scale 1] [--outer-shard on|off]]\n"
      "Prints one line per step (loss, learning rate, gradient norm, tokens/s, step time);\n"
      "with --eval-every, the validation loss and bits per byte. Resumes from the newest valid\n"
      "checkpoint in --ckpt-dir. With --hosts, the peers form a fault-tolerant ring: each\n"
      "trains on its share of the global batch; a peer that dies is dropped and the others\n"
      "carry on; a restarted peer rejoins and receives the state; the leader (lowest live\n"
      "rank) writes checkpoints (its successor a copy unless --ckpt-shared). SIGTERM/SIGINT\n"
      "stop every peer (or the one peer alone) at a step boundary after a checkpoint, exit 0;\n"
      "before training begins (waiting for peers, fetching --data) they stop at once, exit 0,\n"
      "writing nothing (a cut fetch resumes where it stopped). SIGHUP\n"
      "re-reads the hosts file. --balance on (the default) gives faster peers more of each\n"
      "step's sequences (metrics: slots, wait_ms). --zero 1 shards the AdamW moments over\n"
      "the ring (each peer keeps its pieces and a replica of its predecessor's).\n"
      "--outer-every H syncs once per round of H steps instead of every step (DiLoCo):\n"
      "each peer trains on its own slots with its own AdamW, then the ring averages the\n"
      "pseudo-gradients by tokens and an outer Nesterov step updates the shared parameters\n"
      "(docs/round-sync.md); checkpoints, evaluations and stops happen at round ends.\n"
      "--outer-overlap on (the default) sends each round's exchange beside the next round\n"
      "and applies its outer step one round late. --outer-after N takes N per-step steps\n"
      "(with --compress none or bf16) before round sync begins, in the same run.\n"
      "--inner-lr-scale F multiplies the learning rate of round sync's inner steps.\n"
      "--outer-shard on (with --outer-compress none --outer-overlap off) holds the round-start\n"
      "copy and the outer momentum in pieces over the ring instead of whole on every peer.\n"
      "--metrics m.jsonl becomes m.rank<R>.jsonl per peer.",
      TrainFlagNames(),
      &RunTrain,
      /*flag_defaults=*/{},
      /*runs_openmp=*/true};
  return sub;
}

}  // namespace rt::cli
