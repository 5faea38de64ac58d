// Who writes the checkpoints of a view (DESIGN invariant 5).
//
// The leader writes every checkpoint. When the checkpoint directory is not shared
// between machines (no --ckpt-shared), the leader's ring successor writes the same
// checkpoint into its own directory, so every checkpoint exists on two machines.
// Replicas are bit-identical (invariant 2), so the successor writes from its own
// buffers: no transfer is needed. Both stamp the checkpoint with the view's epoch,
// which makes ckpt::WriteCheckpoint refuse the write of a stale leader.
#pragma once

#include <cstdint>

#include "cluster/view.h"

namespace rt::cluster {

struct CheckpointDuty {
  bool write = false;    // this peer writes the checkpoint
  bool is_copy = false;  // ... as the second copy (the leader's successor)
  uint64_t epoch = 0;    // the epoch to stamp it with (CheckpointMeta::epoch)
};

// What `self` does for a checkpoint of `view`. Nothing if self is not a member.
CheckpointDuty CheckpointDutyOf(const View& view, const PeerId& self, bool ckpt_shared);

// True if a checkpoint is due after completing `step` (>= 1) with --ckpt-every
// `every` (0 = only at the end).
bool CheckpointDue(int64_t step, int64_t every);

}  // namespace rt::cluster
