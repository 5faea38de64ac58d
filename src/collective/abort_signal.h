// AbortSignal: lets another thread make a probe, a re-form or a collective on TCP
// links fail promptly (a membership decision must not wait for timeouts).
//
// Code that blocks on a TCP connection registers it (Watch) for as long as it uses
// it; Abort(why) fails every registered connection with `why` (their blocked sends
// and receives return that error) and every connection registered later at once.
// Waits that are not on a connection (a dial, an accept) poll aborted(). All
// methods are thread-safe; Abort is idempotent (the first reason wins).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "net/tcp_connection.h"

namespace rt::collective {

class AbortSignal {
 public:
  void Abort(const absl::Status& why);
  bool aborted() const;
  absl::Status status() const;  // OK until aborted, then the reason

  // Registers `conn` until the returned id is passed to Unwatch (before the
  // connection is destroyed). If already aborted, fails it at once.
  uint64_t Watch(net::TcpConnection* conn);
  void Unwatch(uint64_t id);

 private:
  mutable std::mutex mu_;
  absl::Status why_;
  bool aborted_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, net::TcpConnection*> watched_;
};

// RAII registration of one connection; a null signal does nothing.
class AbortWatch {
 public:
  AbortWatch(AbortSignal* signal, net::TcpConnection* conn)
      : signal_(signal), id_(signal ? signal->Watch(conn) : 0) {}
  ~AbortWatch() {
    if (signal_) signal_->Unwatch(id_);
  }
  AbortWatch(const AbortWatch&) = delete;
  AbortWatch& operator=(const AbortWatch&) = delete;

 private:
  AbortSignal* signal_;
  uint64_t id_;
};

}  // namespace rt::collective
