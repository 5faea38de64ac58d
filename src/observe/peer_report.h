// What one peer tells the others about itself: its figures and its
// most recent cluster events, as the opaque, bounded report that rides on its
// heartbeats (cluster/membership_service.h, Heartbeat::report).
//
// Encoding (little-endian, core/byte_codec.h): "RTPR" u32 | version u8 = 1 | figures
// in declaration order (strings u32 length + bytes, doubles as IEEE bits) | u32
// event count | events. Strings are cut to kMaxFieldBytes when encoded; decoding
// refuses anything longer, more than kMaxLinks links, kMaxEventsPerReport events or
// kMaxEventMembers members of a list, and trailing bytes (DataLoss naming the peer).
// EncodePeerReport drops the oldest events until the report fits `max_bytes`.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::observe {

inline constexpr size_t kMaxFieldBytes = 512;
inline constexpr size_t kMaxLinks = 64;
inline constexpr size_t kMaxEventsPerReport = 16;
inline constexpr size_t kMaxEventMembers = 64;

// A probed link from this peer (collective/link_probe.h): to `to`, bytes per second
// and round trip in seconds.
struct LinkFigure {
  std::string to;
  double bytes_per_s = 0;
  double rtt_s = 0;
};

// One peer's figures. NaN / -1 mean "not known (yet)".
struct PeerFigures {
  std::string peer;     // its hosts-file entry, HOST:PORT
  std::string version;  // binary version (RINGTRAIN_VERSION)
  // training, paused, joining, forming, changing, receiving_state, stopping, stopped,
  // left, starting; `reason` says why for everything but training.
  std::string state = "starting";
  std::string reason;
  int64_t unix_ms = 0;  // when these figures were taken
  int64_t started_unix_ms = 0;
  uint64_t epoch = 0;
  int64_t step = -1;   // optimizer steps completed
  int64_t tokens = 0;  // trained so far, all peers
  double loss = NAN;   // of the last step (nats per token)
  double val_loss = NAN, val_bpb = NAN;
  int64_t val_step = -1;  // the step of val_loss / val_bpb
  double tokens_per_s = NAN;
  double step_ms = NAN, compute_ms = NAN, comm_ms = NAN, wait_ms = NAN;
  int32_t slots = -1;
  uint64_t bytes_sent = 0;  // payload bytes this peer sent since it started
  // The system (/proc, statvfs; observe/system_figures.h).
  int64_t rss_bytes = -1, mem_available_bytes = -1, mem_total_bytes = -1;
  double cpu_steal = NAN;  // fraction of CPU time stolen by the hypervisor, recent
  double load1 = NAN;
  int32_t cpus = 0;
  int64_t disk_free_bytes = -1;  // of --ckpt-dir
  // The last checkpoint this peer wrote.
  int64_t ckpt_step = -1;
  int64_t ckpt_unix_ms = 0;
  std::string ckpt_where;  // the directory
  std::vector<LinkFigure> links;
};

// One event of the cluster's log: view changes, leaders, peers that
// left or joined and why, failed checkpoints, pauses. (origin, seq) identifies it.
struct ClusterEvent {
  int64_t unix_ms = 0;
  std::string origin;  // the peer that recorded it
  uint32_t seq = 0;    // per origin, from 1, in the order recorded
  std::string kind;    // view_change, pause, excluded, leave, peer_left, config_mismatch,
                       // warning, checkpoint, ...
  uint64_t epoch = 0;
  int64_t step = -1;
  std::string message;  // one line for people
  // view_change only: the new view.
  std::string leader;
  std::vector<std::string> members, left, joined;
};

struct PeerReport {
  PeerFigures figures;
  std::vector<ClusterEvent> events;  // the origin's most recent ones, oldest first
};

std::vector<uint8_t> EncodePeerReport(const PeerReport& report, size_t max_bytes);
absl::StatusOr<PeerReport> DecodePeerReport(absl::Span<const uint8_t> bytes,
                                            const std::string& from);

}  // namespace rt::observe
