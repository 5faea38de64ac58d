// State transfer: a joining or lagging peer fetches the agreed training state
// (weights, optimizer moments, RNG, data position: named byte sections) from the
// source named by the view's StepAgreement.
//
// Both sides use a TcpNode link on their own channel (StateChannel(epoch)), so a
// transfer never mixes with control or ring traffic or with a transfer of another
// view. The fetcher dials the source; the source accepts.
//
// Protocol (control frames carry the small messages, data frames the bytes):
//   fetcher -> source  Request  {want StateVersion}
//   source -> fetcher  Manifest {ok, reason, version, chunk_bytes, sections: name,
//                                bytes, crc32c of the whole section}
//   source -> fetcher  per chunk, in order: ChunkHeader {section, offset, bytes,
//                                crc32c} (control) + the bytes (data)
//   fetcher -> source  Ack {ok, reason} once every section verified
// The chunks stream: the source never waits for the fetcher between them, so on a
// link with a long round trip the transfer runs at the link's rate once TCP's window
// has grown (what is in flight on the wire is bounded by the socket buffers, which
// ring links size for a bandwidth-delay product: net/socket_tuning.h). Above the
// kernel the source keeps at most TransferOptions::window_bytes of chunks queued on
// the link: on a sealed link each queued chunk is a sealed copy of the state, so
// queuing every chunk at once (as before) held a second copy of the whole state per
// fetcher. The fetcher reads each chunk straight into its place in the snapshot.
// The source refuses (Manifest ok = 0, reason) when it does not hold exactly `want`:
// the fetcher then fails with FailedPrecondition, and the trainer reports
// Membership::OnStateTransferFailed. Corrupt chunks or sections are DataLoss; a
// silent or dead source fails the fetch within idle_timeout (DeadlineExceeded) or at
// once (the link's error); nothing blocks longer than the options say.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cluster/membership.h"
#include "cluster/step_agreement.h"
#include "net/tcp_node.h"

namespace rt::cluster {

// Channel of the transfers ordered by the view of `epoch` ("STAT" + epoch).
inline uint64_t StateChannel(uint64_t epoch) { return 0x54415453'00000000ull ^ epoch; }

// What a source serves: spans into buffers that stay valid and unchanged for the
// whole ServeState call (the trainer's snapshot of its state at `version`).
struct StateSectionRef {
  std::string name;
  absl::Span<const uint8_t> bytes;
};
struct StateSource {
  StateVersion version;
  std::vector<StateSectionRef> sections;
};

// What a fetcher receives.
struct StateSection {
  std::string name;
  std::vector<uint8_t> bytes;
};
struct StateSnapshot {
  StateVersion version;
  std::vector<StateSection> sections;
  const StateSection* Find(const std::string& name) const;
  StateSource AsSource() const;  // serve it on (spans into this snapshot)
};

// What one transfer measured (TransferOptions::stats; tests and `bench transfer`).
struct TransferStats {
  double seconds = 0;             // the whole ServeState / FetchState call
  double first_chunk_s = -1;      // fetcher: from the call to the first chunk's arrival (link,
                                  // handshake, request and manifest: a few round trips)
  uint64_t bytes = 0;             // section bytes sent / received and verified
  size_t peak_queued_chunks = 0;  // source: most chunks queued on the link at once
};

struct TransferOptions {
  absl::Duration connect_timeout = absl::Seconds(10);  // to get the link
  absl::Duration idle_timeout = absl::Seconds(10);     // longest silence mid-transfer
  absl::Duration total_timeout = absl::Minutes(10);    // the whole transfer
  uint32_t chunk_bytes = 4 << 20;                      // source side
  // Source side: chunks queued on the link (sealed, on a sealed link) before the kernel
  // took them, at most this many bytes (and at least 2 chunks, so that the link's
  // writer always has the next one while the source queues another). The kernel's send
  // buffer holds what is in flight on the wire (up to 32 MB on ring links, more than a
  // bandwidth-delay product of 1 Gbit/s at 128 ms), so a larger window adds memory, not
  // rate.
  uint64_t window_bytes = 16 << 20;
  uint64_t max_total_bytes = 64ull << 30;  // fetcher refuses bigger manifests
  // Polled (every kSupersededPoll) while either side waits for the link and for the
  // other side's first message: true once a newer view made this transfer pointless.
  // Without it a fetcher still handling an older view (its decisions are handled in
  // order) waited the whole connect and idle timeouts for a source that had moved on,
  // and every view proposed meanwhile went stale the same way. The transfer then
  // fails with Cancelled, and the caller handles the newer decision. Empty: never.
  std::function<bool()> superseded;
  // Polled (every kSupersededPoll) for the whole transfer, on either side: true once
  // this process was asked to stop (SIGTERM). The transfer then fails at once with
  // Cancelled ("stop requested"), whatever it was waiting for: a joiner fetching a
  // large state over a slow link used to ignore the signal until the transfer ended.
  // Empty: never.
  std::function<bool()> stop;
  // Filled in by the call when set (one transfer per TransferStats).
  TransferStats* stats = nullptr;
  // Test hooks (source side): flip one byte of the data sent at this offset of
  // section 0 (its checksum stays that of the true bytes); stop sending after this
  // many chunks and close the link; leave out the chunk of this index (counted over
  // all sections); stop sending after this many chunks and keep the link open (silent)
  // until the fetcher closes it or the total timeout passes.
  int64_t test_flip_byte_at = -1;
  int test_close_after_chunks = -1;
  int test_skip_chunk = -1;
  int test_stall_after_chunks = -1;
};

// Serves `source` to the peer of hosts-file rank `fetcher_rank`, once. Refuses (and
// returns FailedPrecondition) if the fetcher wants another version than
// source.version. OK once the fetcher acknowledged a verified copy.
absl::Status ServeState(const std::shared_ptr<net::TcpNode>& node, int fetcher_rank,
                        uint64_t channel, const StateSource& source,
                        const TransferOptions& options = {});

// Fetches exactly `want` from the peer of rank `source_rank`.
absl::StatusOr<StateSnapshot> FetchState(const std::shared_ptr<net::TcpNode>& node, int source_rank,
                                         uint64_t channel, StateVersion want,
                                         const TransferOptions& options = {});

// ---- what the trainer calls on Decision::kInstallView ----

// The node's active slot (rank) of `peer` (its endpoint string), or -1: covers
// hosts added at run time (TcpNode::SetHosts), not only the start list.
int NodeRankOf(const net::TcpNode& node, const PeerId& peer);

// The source's side: serves `source` (which must be the agreed resume version) to
// every member of install.agreement.need_state at once, on StateChannel(epoch).
// Each fetcher is served independently; returns OK or the first failure (naming
// the fetcher). Call it only if install.agreement.source is this peer.
absl::Status ServeAgreedState(const std::shared_ptr<net::TcpNode>& node, const Decision& install,
                              const StateSource& source, const TransferOptions& options = {});

// The fetcher's side (install.need_state): fetches install.agreement.resume from
// install.agreement.source. On error report MembershipService::StateTransferFailed.
absl::StatusOr<StateSnapshot> FetchAgreedState(const std::shared_ptr<net::TcpNode>& node,
                                               const Decision& install,
                                               const TransferOptions& options = {});

}  // namespace rt::cluster
