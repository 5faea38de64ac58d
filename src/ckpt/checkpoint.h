// Checkpoints: atomic, checksummed, validated on load, with retention and
// stale-writer protection (DESIGN invariant 5).
//
// ON-DISK FORMAT (version 1)
//
//   <ckpt_dir>/step-00001234/          one directory per checkpoint; the step is written
//       manifest.txt                   with at least 8 digits (more if step >= 10^8)
//       <name>.bin                     one file per section: the raw bytes, nothing else
//
// manifest.txt is text, one record per line, every line ending in '\n', single spaces
// between tokens, in exactly this order:
//
//   ringtrain-checkpoint 1             magic and format version
//   step 1234                          decimal, >= 0
//   epoch 5                            decimal, >= 0 (the cluster view's epoch)
//   field <key> <value>                zero or more, keys unique and in byte order
//   section <name> <bytes> <crc32c>    zero or more, names unique; bytes decimal,
//                                      crc32c 8 lowercase hex digits (rt::Crc32c)
//   manifest-crc32c <crc32c>           crc32c of every manifest byte before this line
//
// Field keys and values may hold any bytes: they are escaped so that a token contains
// only bytes 0x21..0x7E. Every byte outside that range, and '%', is written as %XX
// (two uppercase hex digits); the empty string is written as nothing (so a "field k "
// line has an empty value). Keys must not be empty. Section names are 1..128 bytes of
// [A-Za-z0-9_.-], do not start with '.', and are not "manifest".
//
// ATOMICITY. WriteCheckpoint, built on CheckpointBuilder (ckpt/checkpoint_builder.h: the
// same guarantees for a checkpoint whose sections arrive piece by piece), writes
// everything into a scratch directory <ckpt_dir>/.tmp-step-<step>-<tag>/ (a name of its
// own per write: ckpt/scratch_dir.h), fsyncs every file and that directory, renames it
// to step-<step> and fsyncs ckpt_dir. A crash or an I/O error (a full disk, a file
// system turned read-only) at any point leaves either the complete checkpoint or a
// scratch directory that readers ignore; a failed write removes its own, and a later
// write removes those of writers that died. If step-<step> already exists it is kept
// when it is the very same checkpoint (same manifest: another writer of a shared
// directory wrote it), else it is renamed to .old-step-<step>-<tag> and deleted after
// the new one is in place.
//
// STALE WRITERS. A checkpoint is "newer" than another if its (epoch, step) pair is
// larger (epoch first). WriteCheckpoint refuses when ckpt_dir holds a checkpoint whose
// manifest validates and which is newer than `meta`, checked before writing and again
// just before the rename: FailedPrecondition if its epoch is newer, AlreadyExists if it
// has the same epoch and a later step (another writer of a shared directory ran ahead;
// nothing is lost by not writing). So a leader that was paused and
// resumes with an old epoch cannot overwrite or go behind its successor's work.
// Consequence for callers: a run that resumes from a checkpoint must use an epoch
// >= the checkpoint's epoch (the cluster starts at resumed.epoch + 1).
//
// RETENTION. After a successful write, the `keep` newest checkpoints whose manifest
// validates are kept (never deleting the one just written); older valid ones are
// deleted, as are invalid step directories whose step is below the oldest kept one.
// keep == 0 keeps everything.
//
// CONCURRENCY. Functions here hold no global state and may run on any thread. Several
// writers may share one ckpt_dir (NFS, a local ring on one machine): scratch names never
// collide, no writer removes another's scratch directory while that writer lives, and
// two writers of the same checkpoint (bit-identical replicas) end with one copy of it.
// The stale-writer check narrows but cannot close races between writers of different
// epochs; the cluster's epochs and quorum prevent those.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ckpt/manifest.h"

namespace rt::ckpt {

// One section to write: `bytes` must stay valid during WriteCheckpoint.
struct SectionRef {
  std::string name;
  absl::Span<const uint8_t> bytes;
};

// Writes `sections` and `meta` as ckpt_dir/step-<meta.step>/ (ckpt_dir is created if
// missing) atomically, then applies retention (see the file comment). Errors:
// InvalidArgument (bad section name, duplicate name, empty field key, negative step
// or keep), FailedPrecondition (a checkpoint of a newer epoch exists: stale writer),
// AlreadyExists (a later step of the same epoch exists), or the I/O
// error with the path (e.g. ResourceExhausted for a full disk). On any error the
// temporary directory is removed and existing checkpoints are untouched.
absl::Status WriteCheckpoint(const std::string& ckpt_dir, const CheckpointMeta& meta,
                             const std::vector<SectionRef>& sections, int keep);

// An opened checkpoint whose manifest validated (magic, version, syntax, crc) and
// whose section files exist with exactly the sizes the manifest states. Section
// contents are checked (size + crc32c) when read. Copyable; holds no open files.
class Checkpoint {
 public:
  // `step_dir` is a checkpoint directory (any name; if its name is step-N, N must
  // equal the manifest's step). Errors: NotFound (no directory / no manifest),
  // DataLoss (anything invalid; the message names the file and the problem).
  static absl::StatusOr<Checkpoint> Open(const std::string& step_dir);

  const CheckpointMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  const std::vector<SectionInfo>& sections() const { return sections_; }

  bool HasSection(absl::string_view name) const;
  // Size in bytes of section `name`; 0 if there is no such section.
  size_t SectionBytes(absl::string_view name) const;

  // Reads section `name` into `out`, which must have exactly SectionBytes(name)
  // bytes. Checks that the file still has that size and that the crc32c matches.
  // Errors: NotFound (no such section), InvalidArgument (wrong out size), DataLoss.
  absl::Status ReadSection(absl::string_view name, absl::Span<uint8_t> out) const;

  // Reads out.size() bytes of section `name` from byte `offset` on (a part of the
  // AdamW moments, for a peer that keeps only its pieces: --zero 1). Checks the file's
  // size, not the crc32c: OpenLatestValidCheckpoint verified every section whole.
  // Errors: NotFound (no such section), DataLoss (size, or the range outside it).
  absl::Status ReadSectionRange(absl::string_view name, uint64_t offset,
                                absl::Span<uint8_t> out) const;

  // Convenience: the section's bytes in a new vector (same checks as ReadSection).
  absl::StatusOr<std::vector<uint8_t>> ReadSectionBytes(absl::string_view name) const;

  // Reads every section once and checks its crc32c (bounded memory: streams in chunks).
  absl::Status VerifyAllSections() const;

 private:
  Checkpoint() = default;
  const SectionInfo* Find(absl::string_view name) const;

  std::string path_;
  CheckpointMeta meta_;
  std::vector<SectionInfo> sections_;
};

// The newest (by (epoch, step)) checkpoint under ckpt_dir whose manifest and all
// section checksums validate. Every invalid checkpoint met is skipped and described
// in *problems (if non-null), e.g. "step-00000020: params.bin truncated: 1000 of 4096
// bytes". If ckpt_dir itself is a checkpoint directory (has manifest.txt or is named
// step-N) that one is validated and returned, without fallback. Errors: NotFound if
// ckpt_dir does not exist or holds no valid checkpoint (the message sums up why).
absl::StatusOr<Checkpoint> OpenLatestValidCheckpoint(const std::string& ckpt_dir,
                                                     std::vector<std::string>* problems);

}  // namespace rt::ckpt
