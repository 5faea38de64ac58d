// TcpNode's private state (tcp_node.h declares it as Impl), shared by the files that
// implement TcpNode: tcp_node.cc (listener, dialing, handing out links) and
// tcp_node_hosts.cc (the slot table). Not for other users: include tcp_node.h.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/tcp_node.h"

namespace rt::net {

struct TcpNode::Impl {
  explicit Impl(int threads) {
    for (int i = 0; i < threads; ++i) {
      contexts.push_back(std::make_unique<asio::io_context>(1));
      guards.emplace_back(asio::make_work_guard(*contexts.back()));
    }
    acceptor = std::make_unique<asio::ip::tcp::acceptor>(*contexts.front());
  }
  asio::io_context& dial_context() { return *contexts.front(); }
  asio::io_context& accept_context() { return *contexts.back(); }

  // Declared first: destroyed last, after everything holding sockets.
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;

  std::mutex mu;
  std::map<std::pair<int, uint64_t>, std::shared_ptr<PendingLink>> waiting;    // AcceptFrom
  std::map<std::pair<int, uint64_t>, std::shared_ptr<TcpConnection>> arrived;  // not yet claimed
  std::map<int, std::string> refusals;    // rank -> why its last attempt was refused
  std::set<std::string> unlisted_warned;  // unlisted endpoints already logged as warnings
  // The observer handlers are set and called under handler_mu (not `mu`): a call
  // runs to its end before SetObserverHandler/SetDataFetchHandler returns, so their
  // owners (StatusResponder, DataServer: handlers capture `this`) may be destroyed
  // right after clearing them. Copying the handler under `mu` and calling it after
  // had a call run on an owner that was already gone.
  std::mutex handler_mu;
  std::function<void(std::shared_ptr<TcpConnection>)> observer_handler;    // handler_mu
  std::function<void(std::shared_ptr<TcpConnection>)> data_fetch_handler;  // handler_mu
  std::map<std::string, FingerprintMismatch> mismatches;                   // by endpoint
  std::set<std::pair<std::string, std::string>> mismatch_warned;           // (endpoint, difference)

  // The slot table (see tcp_node.h). Leaf lock: never held while taking `mu`.
  struct Slot {
    HostEntry host;
    bool active = true;
  };
  mutable std::mutex hosts_mu;
  std::vector<Slot> slots;
};

}  // namespace rt::net
