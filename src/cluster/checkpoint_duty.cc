// Who writes the checkpoints of a view (see checkpoint_duty.h).
#include "cluster/checkpoint_duty.h"

namespace rt::cluster {

CheckpointDuty CheckpointDutyOf(const View& view, const PeerId& self, bool ckpt_shared) {
  CheckpointDuty d;
  if (!view.Contains(self)) return d;
  d.epoch = view.epoch;
  if (view.leader() == self) {
    d.write = true;
  } else if (!ckpt_shared && view.Successor(view.leader()) == self) {
    d.write = true;
    d.is_copy = true;
  }
  return d;
}

bool CheckpointDue(int64_t step, int64_t every) {
  return every > 0 && step > 0 && step % every == 0;
}

}  // namespace rt::cluster
