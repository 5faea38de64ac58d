// RingTransport: what a collective needs from the network, and nothing more.
//
// A peer at ring position rank() exchanges ordered, reliable, checksummed messages
// with its successor ((rank+1) % size) and its predecessor. Collectives
// (src/collective/) are written against this interface only, so they run and are
// tested on an in-process transport as well as on Asio TCP (STYLE: Gloo keeps
// transport and algorithm apart).
//
// Thread contract: one thread at a time (the collective's thread) calls the methods
// below. Actual socket I/O happens on the transport's own thread(s); compute threads
// never call into a transport, so they never block on sockets (DESIGN "Wire").
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace rt::net {

class RingTransport {
 public:
  virtual ~RingTransport() = default;

  virtual int rank() const = 0;  // this peer's ring position, 0..size()-1
  virtual int size() const = 0;  // peers in the ring (1 = alone: no messages flow)

  // Queues `data` as one message to the successor and returns without waiting for
  // the network. The bytes must stay valid and unchanged until WaitSendsDone()
  // returns OK. Messages are delivered in the order they were queued.
  virtual absl::Status SendToNext(absl::Span<const uint8_t> data) = 0;

  // SendToNext for a caller that computed the CRC32C (core/crc32c.h) of `data`
  // itself, e.g. while writing the bytes: a transport that checksums its frames uses
  // it instead of reading the bytes once more. A wrong value makes the receiver
  // refuse the message as corrupt. Default: SendToNext (the value is not used).
  virtual absl::Status SendToNextWithCrc32c(absl::Span<const uint8_t> data, uint32_t crc32c) {
    (void)crc32c;
    return SendToNext(data);
  }

  // Blocks until every message queued so far has been handed to the kernel (or an
  // error / the timeout ends the wait; the error names the peer and the problem).
  // After any result but DeadlineExceeded the transport no longer reads queued
  // bytes, even those of messages it could not send: a caller that stopped on an
  // error may free them then.
  virtual absl::Status WaitSendsDone(absl::Duration timeout) = 0;

  // Blocks until the next message from the predecessor has arrived and been
  // verified, then replaces *message with it (its capacity is reused).
  virtual absl::Status RecvFromPrev(std::vector<uint8_t>* message, absl::Duration timeout) = 0;

  // Optional: receives the next message from the predecessor into `dst`, which must
  // be exactly its size (a message of another size is consumed and reported as
  // DataLoss naming both sizes). Transports may read it there straight from the
  // socket, saving a copy; `dst` is written only during this call. `scratch` is a
  // buffer the default implementation may use (RecvFromPrev, then a copy).
  virtual absl::Status RecvFromPrevInto(absl::Span<uint8_t> dst, std::vector<uint8_t>* scratch,
                                        absl::Duration timeout) {
    absl::Status st = RecvFromPrev(scratch, timeout);
    if (!st.ok()) return st;
    if (scratch->size() != dst.size()) return SizeMismatch(dst.size(), scratch->size());
    if (!dst.empty()) std::memcpy(dst.data(), scratch->data(), dst.size());
    return absl::OkStatus();
  }

  // The next dsts.size() messages, each into its destination: the same as one
  // RecvFromPrevInto per destination, in order (timeout: for each). A transport that
  // reads announced messages in place may wait for all of them at once, waking the
  // caller once instead of once per message.
  virtual absl::Status RecvFromPrevIntoAll(absl::Span<const absl::Span<uint8_t>> dsts,
                                           std::vector<uint8_t>* scratch, absl::Duration timeout) {
    for (absl::Span<uint8_t> dst : dsts) {
      absl::Status st = RecvFromPrevInto(dst, scratch, timeout);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

  // Optional: announces where later messages from the predecessor go, so a transport
  // can read each one straight into place whenever it arrives, even while earlier
  // messages still wait to be received. dsts[i] is for the message `skip + i`
  // positions after the next one not yet received (skip = 0: the next one). The
  // caller receives each of them with RecvFromPrevInto(dsts[i], ...), in order, and
  // must not touch dsts[i] from the moment its message may have been sent until that
  // call returns (it arrives after everything the predecessor sent before it). A
  // second announcement must continue where the previous one ended. Default: nothing
  // is announced (RecvFromPrevInto receives, then copies).
  virtual absl::Status PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts) {
    (void)skip;
    (void)dsts;
    return absl::OkStatus();
  }
  // Withdraws the announced destinations not received yet (a collective that stops
  // on an error calls it before its buffers go away). On return the transport writes
  // into none of them; a message already (half-)read into one fails the link.
  virtual void CancelRecvsInto() {}

 protected:
  static absl::Status SizeMismatch(size_t expected, size_t got) {
    return absl::DataLossError("expected a " + std::to_string(expected) +
                               "-byte message from the predecessor, got " + std::to_string(got) +
                               " bytes");
  }
};

}  // namespace rt::net
