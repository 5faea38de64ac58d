// `ringtrain status` over the authenticated control channel.
//
// Every ring peer answers observers (net/tcp_node.h: dialers that prove the shared
// secret but have no hosts-file entry) with its StatusJson (no history, the newest
// 50 events). One request per connection:
//   request  kControl frame: "RTSQ" u32 | version u8 = 1
//   answer   kControl frame: the JSON text
// The responder serves one observer at a time on its own thread; at most
// kMaxPendingObservers wait, others are closed; each gets `answer_timeout` to send
// its request. Nothing an observer sends reaches the membership or the ring.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/hosts_file.h"
#include "net/tcp_node.h"
#include "observe/status_board.h"

namespace rt::observe {

inline constexpr size_t kMaxPendingObservers = 8;

class StatusResponder {
 public:
  // Registers as `node`'s observer handler until destroyed.
  StatusResponder(std::shared_ptr<net::TcpNode> node, std::shared_ptr<StatusBoard> board,
                  absl::Duration answer_timeout = absl::Seconds(3));
  ~StatusResponder();
  StatusResponder(const StatusResponder&) = delete;
  StatusResponder& operator=(const StatusResponder&) = delete;

 private:
  void Loop();

  std::shared_ptr<net::TcpNode> node_;
  std::shared_ptr<StatusBoard> board_;
  absl::Duration answer_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<net::TcpConnection>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

struct StatusAnswer {
  std::string peer;  // who answered (HOST:PORT)
  std::string json;  // its StatusJson
};

// Asks the peers of `hosts` (all at once) for their status; the first that answers
// wins. Unavailable naming every peer's problem when none answers within `timeout`.
absl::StatusOr<StatusAnswer> QueryRingStatus(const std::vector<net::HostEntry>& hosts,
                                             const std::string& secret,
                                             const std::string& cluster_id, absl::Duration timeout,
                                             bool encrypt = false);

}  // namespace rt::observe
