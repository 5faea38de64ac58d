// Membership control messages and their wire envelope.
//
// These are the payloads of net kControl frames (or of any other reliable, ordered
// channel). Each message travels in an Envelope that names the sender and carries
// the sender's epoch; receivers refuse envelopes from an epoch older than their own
// (EpochGate), so a peer that slept through a view change cannot act on the new
// view until it has learned the new epoch (it learns it from heartbeats it receives).
//
// Encoding (little-endian):
//   0 magic u32 'RTCM' | 4 version u8 = 2 | 5 type u8 | 6 reserved u16 = 0 |
//   8 epoch u64 | 16 body_bytes u32 | 20 crc32c u32 of bytes 0..19 and the body |
//   24 body: sender (string) then the message fields in declaration order.
// Strings are u32 length + bytes (<= kMaxStringBytes), lists are u32 count + items
// (<= kMaxListItems), byte blobs u32 length + bytes (<= kMaxReportBytes), bools one byte 0/1,
// StateVersion = epoch u64 + step i64, View = epoch u64 + list of strings. Decoding validates
// everything (DataLoss).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cluster/step_agreement.h"
#include "cluster/view.h"

namespace rt::cluster {

inline constexpr uint32_t kEnvelopeMagic = 0x4D435452u;  // "RTCM" in memory order
inline constexpr uint8_t kEnvelopeVersion = 2;           // 2: heartbeats carry a status report
inline constexpr size_t kEnvelopeHeaderBytes = 24;
inline constexpr size_t kMaxStringBytes = 4096;
inline constexpr size_t kMaxListItems = 65536;
inline constexpr size_t kMaxReportBytes = 8192;

// Sent every heartbeat interval to every host of the file (members or not), so
// that failures are detected and stale or partitioned peers learn the current view.
struct Heartbeat {
  View view;           // the sender's installed view (empty if none)
  StateVersion state;  // the sender's training state
  uint32_t hosts_fingerprint = 0;
  bool training = false;         // the sender can train right now
  bool disrupted = false;        // the sender's ring is broken: it needs a new view
  std::vector<PeerId> suspects;  // view members the sender cannot reach
  // The sender's status report (src/observe/peer_report.h: its figures and recent
  // events), opaque here; empty when unchanged since the last one sent on this link.
  std::vector<uint8_t> report;
};
// A peer outside the view asks the view's leader to be admitted.
struct JoinRequest {
  StateVersion state;
  uint32_t hosts_fingerprint = 0;
};
// Phase 1 of a view change: the proposer (lowest-ranked live member) asks every
// proposed member to stop training and report its state.
struct ViewProposal {
  View view;  // view.epoch is the proposed epoch
};
struct ViewAck {
  uint64_t epoch = 0;  // the proposal acknowledged
  StateVersion state;  // the acknowledging member's state
};
struct ViewNack {
  uint64_t epoch = 0;           // the proposal refused
  uint64_t promised_epoch = 0;  // what the refusing member promised or installed
  PeerId promised_to;           // to whom ("" if it installed a view)
};
// Phase 2: every proposed member acknowledged; this is the new view and where it
// resumes. Members install it; those in agreement.need_state fetch state first.
struct ViewCommit {
  View view;
  StepAgreement agreement;
};
// The sender leaves at a step boundary (removed from the hosts file, or stopping).
struct Leave {
  std::string reason;
  // >= 0: the whole job ends after this step on every member (training finished, or
  // an agreed stop), so the receivers finish it too instead of re-forming without
  // the sender; -1: only the sender leaves.
  int64_t last_step = -1;
};

using Message =
    std::variant<Heartbeat, JoinRequest, ViewProposal, ViewAck, ViewNack, ViewCommit, Leave>;
const char* MessageName(const Message& m);

struct Envelope {
  uint64_t epoch = 0;  // the sender's epoch (max of installed and promised)
  PeerId from;
  Message message;
};

std::vector<uint8_t> EncodeEnvelope(const Envelope& envelope);
// Validates magic, version, type, lengths, checksum and every field. `where` names
// the channel in errors ("control link to 10.0.0.2:29500"). Errors are DataLoss.
absl::StatusOr<Envelope> DecodeEnvelope(absl::Span<const uint8_t> bytes, const std::string& where);

// Refuses envelopes from epochs older than the receiver's (DESIGN invariant 4).
class EpochGate {
 public:
  explicit EpochGate(uint64_t epoch = 0) : epoch_(epoch) {}
  // Raises the current epoch (never lowers it).
  void Advance(uint64_t epoch) { epoch_ = epoch > epoch_ ? epoch : epoch_; }
  uint64_t epoch() const { return epoch_; }
  // OK if envelope.epoch >= epoch(); else FailedPrecondition naming the sender,
  // the message and both epochs.
  absl::Status Admit(const Envelope& envelope) const;

 private:
  uint64_t epoch_;
};

}  // namespace rt::cluster
