// DataServer: answers data-fetch clients (fetch_messages.h) on a node's
// kDataFetchChannel from this peer's LocalData: its manifest, its status, and files
// streamed in chunks from any offset. A file this peer is still fetching is served as
// far as it has arrived and then as it arrives (the relay: a peer forwards what it
// receives, so N peers fetching along the ring take about the time of one copy). A
// whole file this peer did not fetch is verified once before it is served; a corrupt
// one is refused, naming the file and what is wrong, so the client fetches it elsewhere.
//
// One thread per client, at most kMaxDataClients at once (others are closed); a
// client that sends nothing for `idle_timeout` is dropped. Registers as the node's
// data-fetch handler until destroyed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "fetch/local_data.h"
#include "net/tcp_node.h"

namespace rt::fetch {

inline constexpr int kMaxDataClients = 8;

struct DataServerOptions {
  size_t chunk_bytes = size_t{1} << 20;
  absl::Duration idle_timeout = absl::Seconds(60);   // between requests
  absl::Duration stall = absl::Seconds(30);          // relaying: no progress here this long
  absl::Duration manifest_wait = absl::Seconds(10);  // relaying: for this peer's own manifest
  // Tests: sleep this long after each chunk sent, so a fetch on loopback lasts long
  // enough to be cut. Zero unless $RINGTRAIN_TEST_SERVE_PAUSE_MS is set.
  absl::Duration chunk_pause = absl::ZeroDuration();
};

class DataServer {
 public:
  DataServer(std::shared_ptr<net::TcpNode> node, std::shared_ptr<LocalData> data,
             DataServerOptions options = {});
  ~DataServer();
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;

  uint64_t bytes_served() const;

 private:
  struct Client {
    std::shared_ptr<net::TcpConnection> conn;
    std::thread thread;
    bool done = false;
  };
  void Serve(net::TcpConnection& conn);
  // Streams `file` from `offset` to its end; the error ends the connection.
  absl::Status SendFile(net::TcpConnection& conn, const std::string& file, uint64_t offset);
  absl::Status Send(net::TcpConnection& conn, const struct FetchMessage& m);
  void ReapLocked();  // joins finished client threads

  std::shared_ptr<net::TcpNode> node_;
  std::shared_ptr<LocalData> data_;
  const DataServerOptions options_;
  mutable std::mutex mu_;
  std::list<Client> clients_;
  bool stop_ = false;
  uint64_t bytes_served_ = 0;
};

}  // namespace rt::fetch
