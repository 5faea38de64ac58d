// `ringtrain bench transfer`: the state transfer a rejoining peer receives
// (cluster/state_transfer.h), timed on real links. Run by every peer of a hosts file
// (--hosts, --self or --rank), like bench allreduce.
//
// Hosts-file rank 0 is the source. It holds a state of --size floats shaped like a
// model's training state (three sections of size/3 floats: weights and AdamW's two
// moments; 124M parameters are --size 372M, 1.49 GB) filled with a pattern, and serves
// it to every other peer at once, --warmup-iters untimed then --iters timed times,
// each on a fresh link (a new channel, as each view of a training run has). Every
// fetcher times its FetchState call and checks every byte it received against the
// pattern (fails loudly otherwise). With N peers the source's uplink is shared by
// N - 1 fetchers: 2 peers measure one rejoin.
//
// Figures, per fetcher and iteration, then over iterations of the slowest fetcher:
// seconds (the whole call: link, handshake, request, manifest, every chunk, the
// acknowledgement), first_chunk_s (the call until the first chunk arrived: a few
// round trips), MBps = bytes / seconds and stream_MBps = bytes / (seconds -
// first_chunk_s): the rate once data flows, TCP's start-up included (MB = 1e6 bytes;
// compare with the link's rate: 100 Mbit/s = 12.5 MB/s of frames). The source's
// most chunks queued on a link at once is printed as source_peak_queued_chunks, and
// every peer's peak resident memory as peak_rss_mb (the source's includes its state
// and whatever the links queued: sealed copies of chunks on a sealed link).
// Output: a human table, then one JSON line.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/bench_common.h"
#include "cli/bench_kinds.h"
#include "cli/bench_size_flag.h"
#include "cli/common_flags.h"
#include "cluster/state_transfer.h"
#include "collective/small_collectives.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "net/ring_setup.h"

ABSL_DECLARE_FLAG(int, iters);
ABSL_DECLARE_FLAG(int, warmup_iters);

namespace rt::cli {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(600);  // barrier and gathers
constexpr int kSource = 0;                               // hosts-file rank

// The word at `index` of section `section`: a cheap hash, so that a chunk put at the
// wrong offset or into the wrong section shows.
uint64_t PatternWord(uint64_t section, uint64_t index) {
  uint64_t z = (section << 56) ^ index ^ 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void FillPattern(uint64_t section, std::vector<uint8_t>* bytes) {
  const size_t words = bytes->size() / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = PatternWord(section, i);
    std::memcpy(bytes->data() + i * 8, &w, 8);
  }
  for (size_t i = words * 8; i < bytes->size(); ++i) (*bytes)[i] = static_cast<uint8_t>(i);
}

// First byte offset where `bytes` differs from the pattern, or -1.
int64_t FirstMismatch(uint64_t section, const std::vector<uint8_t>& bytes) {
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i * 8, 8);
    if (w != PatternWord(section, i)) return static_cast<int64_t>(i * 8);
  }
  for (size_t i = words * 8; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<uint8_t>(i)) return static_cast<int64_t>(i);
  }
  return -1;
}

const char* const kSectionNames[3] = {"params", "adam_m", "adam_v"};

absl::Status Barrier(net::RingTransport* ring) { return BenchBarrier(ring, kTimeout); }

struct Timing {
  double seconds = -1, first_chunk_s = -1;  // -1: this peer is the source
};

cluster::TransferOptions BenchTransferOptions() {
  cluster::TransferOptions o;
  o.connect_timeout = absl::Seconds(60);
  o.idle_timeout = absl::Seconds(60);
  o.total_timeout = absl::Minutes(30);
  return o;
}

// One transfer: the source serves every other peer, each fetcher fetches and checks.
absl::StatusOr<Timing> TransferOnce(net::TcpRing* ring, const std::vector<size_t>& section_bytes,
                                    const cluster::StateSource* source, int iteration,
                                    size_t* peak_queued) {
  const std::shared_ptr<net::TcpNode>& node = ring->node();
  const uint64_t channel = cluster::StateChannel(1000 + iteration);
  const cluster::StateVersion version{1000 + static_cast<uint64_t>(iteration), 1};
  if (source != nullptr) {
    cluster::StateSource src = *source;
    src.version = version;
    std::vector<int> fetchers;
    for (int r : ring->order()) {
      if (r != kSource) fetchers.push_back(r);
    }
    std::vector<absl::Status> results(fetchers.size());
    std::vector<cluster::TransferStats> stats(fetchers.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < fetchers.size(); ++i) {
      threads.emplace_back([&, i] {
        cluster::TransferOptions o = BenchTransferOptions();
        o.stats = &stats[i];
        results[i] = cluster::ServeState(node, fetchers[i], channel, src, o);
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < fetchers.size(); ++i) {
      RETURN_IF_ERROR(results[i]);
      *peak_queued = std::max(*peak_queued, stats[i].peak_queued_chunks);
    }
    return Timing{};
  }
  cluster::TransferStats stats;
  cluster::TransferOptions o = BenchTransferOptions();
  o.stats = &stats;
  ASSIGN_OR_RETURN(cluster::StateSnapshot snap,
                   cluster::FetchState(node, kSource, channel, version, o));
  if (snap.sections.size() != section_bytes.size()) {
    return absl::DataLossError(absl::StrFormat("received %d sections, expected %d",
                                               snap.sections.size(), section_bytes.size()));
  }
  for (size_t k = 0; k < snap.sections.size(); ++k) {
    const cluster::StateSection& s = snap.sections[k];
    if (s.name != kSectionNames[k] || s.bytes.size() != section_bytes[k]) {
      return absl::DataLossError(
          absl::StrFormat("received section '%s' of %d bytes, expected "
                          "'%s' of %d",
                          s.name, s.bytes.size(), kSectionNames[k], section_bytes[k]));
    }
    const int64_t bad = FirstMismatch(k, s.bytes);
    if (bad >= 0) {
      return absl::DataLossError(absl::StrFormat(
          "state transfer is WRONG: section '%s' differs from the source's at byte %d", s.name,
          bad));
    }
  }
  return Timing{stats.seconds, stats.first_chunk_s};
}

absl::Status Run() {
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup_iters);
  if (iters < 1) return absl::InvalidArgumentError("--iters must be at least 1");
  if (warmup < 0) return absl::InvalidArgumentError("--warmup-iters must be >= 0");
  ASSIGN_OR_RETURN(const int64_t floats, ParseElementCount(absl::GetFlag(FLAGS_size)));
  if (floats < 3 || floats > (int64_t{16} << 30) / 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--size %d: the state must hold 3 to 4G floats (16 GB)", floats));
  }
  if (absl::GetFlag(FLAGS_hosts).empty()) {
    return absl::InvalidArgumentError("--hosts is required (a hosts file, one HOST[:PORT] a line)");
  }
  ASSIGN_OR_RETURN(net::RingSetup setup, RingSetupFromFlags("ringtrain-bench-transfer"));
  setup.fingerprint = {{"bench", "transfer"},
                       {"size", absl::GetFlag(FLAGS_size)},
                       {"iters", absl::StrCat(warmup, "+", iters)}};
  ASSIGN_OR_RETURN(std::unique_ptr<net::TcpRing> ring, net::JoinRing(setup));
  if (ring->size() < 2) return absl::InvalidArgumentError("bench transfer needs 2 or more peers");
  const bool is_source = ring->host_rank() == kSource;
  std::vector<size_t> section_bytes(3, static_cast<size_t>(floats / 3) * 4);
  section_bytes[0] += static_cast<size_t>(floats % 3) * 4;
  uint64_t total = 0;
  for (size_t b : section_bytes) total += b;

  std::vector<std::vector<uint8_t>> state;
  cluster::StateSource source;
  if (is_source) {
    state.resize(3);
    for (size_t k = 0; k < 3; ++k) {
      state[k].resize(section_bytes[k]);
      FillPattern(k, &state[k]);
      source.sections.push_back({kSectionNames[k], state[k]});
    }
  }
  std::printf(
      "bench transfer: %d peers, rank %d %s; state %.1f MB in 3 sections; %d warm-up + %d timed "
      "transfers; links %s\n",
      ring->size(), ring->host_rank(), is_source ? "(the source)" : "(a fetcher)", total / 1e6,
      warmup, iters, ring->encrypted() ? "sealed" : "not encrypted");
  std::printf("  %4s %6s %10s %14s %10s %12s\n", "iter", "peer", "seconds", "first_chunk_s", "MB/s",
              "stream MB/s");
  std::fflush(stdout);

  std::vector<double> mine;  // seconds, first_chunk_s per timed iteration
  size_t peak_queued = 0;
  for (int it = 0; it < warmup + iters; ++it) {
    RETURN_IF_ERROR(Barrier(ring.get()));
    absl::StatusOr<Timing> t =
        TransferOnce(ring.get(), section_bytes, is_source ? &source : nullptr, it, &peak_queued);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrFormat("transfer %d: %s", it, t.status().message()));
    }
    if (it >= warmup) {
      mine.push_back(t->seconds);
      mine.push_back(t->first_chunk_s);
    }
  }
  RETURN_IF_ERROR(Barrier(ring.get()));
  absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(mine.data()),
                                  mine.size() * sizeof(double));
  ASSIGN_OR_RETURN(auto all, collective::AllgatherBytes(ring.get(), bytes, kTimeout));
  // Per iteration, the slowest fetcher.
  double sum_s = 0, sum_first = 0, sum_stream = 0, worst_stream = 1e300;
  for (int i = 0; i < iters; ++i) {
    double slowest = 0, first = 0;
    for (size_t p = 0; p < all.size(); ++p) {
      double v[2];
      if (all[p].size() != mine.size() * sizeof(double)) {
        return absl::InternalError("bench transfer: peers timed different iteration counts");
      }
      std::memcpy(v, all[p].data() + 2 * i * sizeof(double), sizeof(v));
      if (v[0] < 0) continue;  // the source
      std::printf("  %4d %6zu %10.3f %14.3f %10.2f %12.2f\n", i, p, v[0], v[1], total / v[0] / 1e6,
                  total / (v[0] - v[1]) / 1e6);
      if (v[0] > slowest) {
        slowest = v[0];
        first = v[1];
      }
    }
    sum_s += slowest;
    sum_first += first;
    const double stream = total / (slowest - first) / 1e6;
    sum_stream += stream;
    worst_stream = std::min(worst_stream, stream);
  }
  const double seconds = sum_s / iters;
  std::printf("  mean of the slowest fetcher: %.3f s, %.2f MB/s (%.2f MB/s once data flows)\n",
              seconds, total / seconds / 1e6, sum_stream / iters);
  std::fputs(absl::StrFormat(
                 "{\"bytes\":%d,\"peers\":%d,\"rank\":%d,\"iters\":%d,\"warmup_iters\":%d,"
                 "\"encrypted\":%s,"
                 "\"seconds\":%.4f,\"first_chunk_s\":%.4f,\"MBps\":%.3f,\"stream_MBps\":%.3f,"
                 "\"stream_MBps_min\":%.3f,\"source_peak_queued_chunks\":%d,\"peak_rss_mb\":%.0f,"
                 "\"verified\":true}\n",
                 total, ring->size(), ring->host_rank(), iters, warmup,
                 ring->encrypted() ? "true" : "false", seconds, sum_first / iters,
                 total / seconds / 1e6, sum_stream / iters, worst_stream,
                 is_source ? static_cast<int64_t>(peak_queued) : -1, PeakRssMb())
                 .c_str(),
             stdout);
  std::fflush(stdout);
  return Barrier(ring.get());
}

}  // namespace

int RunBenchTransfer(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain bench transfer: unexpected argument '%s'\n",
                 positional[0].c_str());
    return 2;
  }
  absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "ringtrain bench transfer: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

std::vector<std::string> BenchTransferFlagNames() {
  return {"size", "iters", "warmup_iters", "hosts",  "self",
          "rank", "wait",  "secret_file",  "encrypt"};
}

}  // namespace rt::cli
