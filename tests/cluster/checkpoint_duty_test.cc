// Checkpoint duty: the leader writes, its successor writes a copy unless shared.
#include "cluster/checkpoint_duty.h"

#include <doctest/doctest.h>

namespace rt::cluster {

TEST_CASE("leader writes -- successor writes a copy unless the directory is shared") {
  const View v{6, {"a", "b", "c"}};
  CheckpointDuty d = CheckpointDutyOf(v, "a", false);
  CHECK(d.write);
  CHECK(!d.is_copy);
  CHECK(d.epoch == 6);
  d = CheckpointDutyOf(v, "b", false);
  CHECK(d.write);
  CHECK(d.is_copy);
  CHECK(!CheckpointDutyOf(v, "c", false).write);
  CHECK(!CheckpointDutyOf(v, "b", true).write);
  CHECK(CheckpointDutyOf(v, "a", true).write);
  CHECK(!CheckpointDutyOf(v, "x", false).write);
  // Alone: the leader is its own successor; one copy only.
  const View solo{2, {"a"}};
  d = CheckpointDutyOf(solo, "a", false);
  CHECK(d.write);
  CHECK(!d.is_copy);
}

TEST_CASE("checkpoint cadence") {
  CHECK(CheckpointDue(100, 50));
  CHECK(!CheckpointDue(101, 50));
  CHECK(!CheckpointDue(0, 50));
  CHECK(!CheckpointDue(100, 0));
}

}  // namespace rt::cluster
