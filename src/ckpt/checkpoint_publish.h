// The directory-level steps every checkpoint write shares, before and after it fills its
// scratch directory: request validation, the checkpoint directory made ready (created,
// stale writers refused, abandoned scratch directories swept), and publishing (manifest,
// stale-writer check again, rename, retention). Format and guarantees: ckpt/checkpoint.h.
//
// Used by CheckpointBuilder (ckpt/checkpoint_builder.h), on which WriteCheckpoint is
// built: one code path for every checkpoint written. Functions hold no state.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/manifest.h"
#include "ckpt/scratch_dir.h"

namespace rt::ckpt {

// ckpt_dir without trailing slashes (but "/" stays "/").
std::string StripTrailingSlashes(std::string path);

// InvalidArgument for an empty ckpt_dir, a negative step or an empty field key.
absl::Status ValidateCheckpointMeta(const std::string& ckpt_dir, const CheckpointMeta& meta);

// InvalidArgument for a negative keep.
absl::Status ValidateKeep(int keep);

// InvalidArgument unless `name` is a valid section name (IsValidSectionName) not yet in
// *names; on success adds it to *names.
absl::Status AddSectionName(const std::string& name, std::set<std::string>* names);

// Makes ckpt_dir ready for writing `meta`: creates it if missing (durably), refuses a
// stale writer (FailedPrecondition / AlreadyExists, see checkpoint.h) and removes what
// dead writers left (on a full disk that may be the space this write needs).
absl::Status PrepareCheckpointDir(const std::string& ckpt_dir, const CheckpointMeta& meta);

// The last steps of a write whose section files are all in `scratch` (durable, with
// the sizes and crc32c in `sections`, listed in manifest order): writes the manifest,
// checks for a stale writer again (a newer leader may have written meanwhile), removes
// the scratch lock file, fsyncs the scratch directory, renames it to step-<meta.step>
// (keeping an identical checkpoint another writer published) and applies retention.
// On success `scratch` is disowned when it became the checkpoint; on error it is left
// to the caller to remove (its destructor).
absl::Status PublishCheckpoint(const std::string& ckpt_dir, const CheckpointMeta& meta,
                               const std::vector<SectionInfo>& sections, ScratchDir* scratch,
                               int keep);

}  // namespace rt::ckpt
