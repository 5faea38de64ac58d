// A checkpoint built in steps: sections whose bytes arrive piece by piece, in any order,
// are written straight into their files at their offsets; the checkpoint is published
// atomically once everything is in place. WriteCheckpoint (ckpt/checkpoint.h) is this
// builder given every section whole, so both share one code path.
//
// Why: with --zero 1 no peer holds the whole AdamW moments; the leader
// receives them from the other peers over the network. Holding them in memory to call
// WriteCheckpoint would cost it 8 bytes per parameter, which sharding exists to avoid.
//
// Usage (the ZeRO-1 leader):
//   ASSIGN_OR_RETURN(auto b, CheckpointBuilder::Begin(ckpt_dir, meta));  // network thread
//   b->Add("params", params);            // optional here: the manifest lists sections in
//   b->Reserve("adam_m", n * 4);         // the order they were added or reserved
//   b->Reserve("adam_v", n * 4);
//   for each piece received: b->WriteAt("adam_m", begin * 4, bytes);  // errors: see below
//   ...hand b to the writer thread...
//   b->Add("other", bytes); b->Commit(keep);                          // writer thread
//
// Guarantees are WriteCheckpoint's (checkpoint.h): the same format, scratch directory
// and lock, stale-writer refusal (at Begin and again just before the rename), publish,
// retention. Until Commit succeeds nothing is visible to readers.
//
// ERRORS ARE STICKY. The first error of any call (a bad name or range, an I/O error such
// as a full disk) fails the builder: its files are closed and its scratch directory is
// removed at once (freeing the space), and every later call does nothing and returns
// that first error, Commit included, so nothing is ever published. A caller inside a
// network collective can keep receiving pieces and calling WriteAt (each call is then a
// cheap no-op) and abandon the builder afterwards.
//
// THREADS. Not thread-safe: calls must not overlap. A builder may move between threads
// (e.g. Begin, Reserve and WriteAt on the thread that receives pieces, then Add and
// Commit on a background writer thread) when the hand-over orders the calls (starting
// the thread, a mutex or a queue does). Buffers given to Add must stay valid and
// unchanged until Commit returns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/manifest.h"
#include "ckpt/scratch_dir.h"

namespace rt::ckpt {

class CheckpointBuilder {
 public:
  // Validates `meta` (InvalidArgument: empty ckpt_dir, negative step, empty field key),
  // creates ckpt_dir if missing, refuses a stale writer up front (FailedPrecondition /
  // AlreadyExists, as WriteCheckpoint) and creates the locked scratch directory of the
  // checkpoint of meta.step. I/O errors name the path.
  static absl::StatusOr<std::unique_ptr<CheckpointBuilder>> Begin(const std::string& ckpt_dir,
                                                                  const CheckpointMeta& meta);

  // A section whose bytes arrive later, through WriteAt, in any order: its file is
  // created with exactly `bytes` bytes, zero-filled, and its space allocated now
  // (fallocate(2), so that a full disk shows here and not halfway; on file systems
  // without it the file is only sized and a full disk shows at WriteAt or Commit).
  // InvalidArgument for a bad or duplicate name (as WriteCheckpoint); ResourceExhausted
  // naming the file for a full disk.
  absl::Status Reserve(const std::string& name, uint64_t bytes);

  // Writes `data` at byte `offset` of the reserved section `name` (pieces may overlap and
  // come in any order). InvalidArgument if `name` was not reserved or
  // [offset, offset + data.size()) is not inside it; an I/O error names the file.
  absl::Status WriteAt(const std::string& name, uint64_t offset, absl::Span<const uint8_t> data);

  // A section given whole; its bytes are written by Commit, so `bytes` must stay valid
  // and unchanged until Commit returns. InvalidArgument for a bad or duplicate name.
  absl::Status Add(const std::string& name, absl::Span<const uint8_t> bytes);

  // Writes the added sections, fsyncs the reserved ones and computes their crc32c by
  // streaming their files back (memory: one I/O chunk), writes the manifest (sections in
  // the order they were added or reserved), publishes step-<meta.step> atomically and
  // applies retention, exactly as WriteCheckpoint. Errors: the first error of an earlier
  // call; FailedPrecondition if a byte of a reserved section was never written (a lost
  // piece would otherwise be published as zeros) or if called twice; InvalidArgument for
  // a negative keep; then WriteCheckpoint's (stale writer, I/O errors with the path,
  // ResourceExhausted for a full disk). After an error nothing is published, the scratch
  // directory is removed and existing checkpoints are untouched.
  absl::Status Commit(int keep);

  // The scratch directory being built (empty once committed or failed).
  std::string scratch_path() const;

  // An uncommitted builder removes its scratch directory.
  ~CheckpointBuilder();
  CheckpointBuilder(const CheckpointBuilder&) = delete;
  CheckpointBuilder& operator=(const CheckpointBuilder&) = delete;

 private:
  // One section: reserved (its file is open, filled by WriteAt) or added (`whole`).
  struct Section {
    std::string name;
    uint64_t bytes = 0;
    bool reserved = false;
    int fd = -1;                           // reserved: open for writing until Commit
    std::map<uint64_t, uint64_t> written;  // reserved: byte ranges written, merged: begin->end
    absl::Span<const uint8_t> whole;       // added: the bytes
  };

  CheckpointBuilder(std::string ckpt_dir, CheckpointMeta meta, ScratchDir scratch);

  // The status to return before doing anything: the first error, or FailedPrecondition
  // after Commit.
  absl::Status Usable() const;
  // Records the first error, closes every file and removes the scratch directory.
  absl::Status Fail(absl::Status error);
  // Commit's work; any error is turned into Fail by Commit.
  absl::Status CommitSteps(int keep);
  void CloseFiles();
  std::string SectionPath(const std::string& name) const;

  const std::string ckpt_dir_;
  const CheckpointMeta meta_;
  std::optional<ScratchDir> scratch_;  // reset once committed or failed
  std::vector<Section> sections_;      // in manifest order
  std::set<std::string> names_;
  absl::Status error_;  // the first error; sticky
  bool committed_ = false;
};

}  // namespace rt::ckpt
