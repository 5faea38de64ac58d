// A test-only pause inside round sync's outer exchange, so that fault tests can kill a
// peer (or the leader) at a known moment of the exchange rather than hoping to hit it.
//
// With RINGTRAIN_TEST_HOLD_EXCHANGE=PATH in a peer's environment, every outer exchange
// of that peer, once the round's token counts are gathered (every peer of the ring is
// then inside the exchange, waiting for the others' contributions), checks whether
// PATH exists; if it does, the peer writes PATH.held (the 0-based step of the round's
// end, followed by " beside" for an exchange launched to run beside the next round
// under --outer-overlap, whose sum the others wait for at that round's end) and waits
// while PATH exists, at most 60 s, then goes on. The test arms it by creating PATH,
// sees PATH.held, and kills the peer (or removes PATH to let it go). Without the
// variable nothing happens (one getenv per process).
#pragma once

#include <cstdint>

namespace rt::train {

void HoldInExchangeForTests(int64_t step, bool beside_next_round = false);

}  // namespace rt::train
