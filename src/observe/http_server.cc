// The bounded read-only HTTP/1.1 server (see http_server.h).
#include "observe/http_server.h"

#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "observe/http_request.h"

namespace rt::observe {
namespace {

using asio::ip::tcp;

std::string Serialize(const HttpResponse& r, bool head) {
  std::string out = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n"
      "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n%s\r\n",
      r.status, HttpReason(r.status), r.content_type, r.body.size(), r.extra_headers);
  if (!head) out += r.body;
  return out;
}

HttpResponse Error(int status, const std::string& why) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat(status, " ", HttpReason(status), ": ", why, "\n");
  return r;
}

}  // namespace

const char* HttpReason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Unknown";
}

absl::StatusOr<std::pair<std::string, uint16_t>> ParseHttpListenAddress(const std::string& spec) {
  std::string address = "127.0.0.1";
  std::string port = spec;
  if (!spec.empty() && spec.front() == '[') {
    const size_t close = spec.find("]:");
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http ", spec, ": expected [IPV6]:PORT, PORT or ADDRESS:PORT"));
    }
    address = spec.substr(1, close - 1);
    port = spec.substr(close + 2);
  } else if (const size_t colon = spec.rfind(':'); colon != std::string::npos) {
    address = spec.substr(0, colon);
    port = spec.substr(colon + 1);
  }
  uint32_t p = 0;
  if (!absl::SimpleAtoi(port, &p) || p == 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http ", spec, ": port '", port, "' is not a number in 1..65535"));
  }
  asio::error_code ec;
  asio::ip::make_address(address, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http ", spec, ": '", address, "' is not a numeric IP address (e.g. 0.0.0.0 for all)"));
  }
  return std::make_pair(address, static_cast<uint16_t>(p));
}

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  // Before io: connections still pending when io is destroyed decrement it.
  std::atomic<int> connections{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;

  // One client: read the request head, answer, close; a deadline bounds it all.
  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(Impl* s, tcp::socket sock) : server(s), socket(std::move(sock)), timer(s->io) {}
    ~Connection() { server->connections.fetch_sub(1); }

    void Start() {
      auto self = shared_from_this();
      timer.expires_after(absl::ToChronoNanoseconds(server->options.request_timeout));
      timer.async_wait([self](const asio::error_code& ec) {
        if (ec) return;  // cancelled: answered in time
        asio::error_code ignored;
        self->socket.close(ignored);  // slow client: drop it
      });
      Read();
    }

    void Read() {
      auto self = shared_from_this();
      socket.async_read_some(asio::buffer(chunk), [self](const asio::error_code& ec, size_t n) {
        if (ec) return;  // closed (or timed out): nothing to answer
        self->request.append(self->chunk.data(), n);
        self->OnData();
      });
    }

    void OnData() {
      const ParsedHead h = ParseRequestHead(request, server->options.max_request_bytes);
      switch (h.kind) {
        case ParsedHead::Kind::kNeedMore:
          return Read();
        case ParsedHead::Kind::kError: {
          HttpResponse r = Error(h.error_status, h.error_why);
          if (h.error_status == 405) r.extra_headers = "Allow: GET, HEAD\r\n";
          return Answer(r, false);
        }
        case ParsedHead::Kind::kRequest:
          return Answer(server->handler(h.request), h.request.method == "HEAD");
      }
    }

    void Answer(const HttpResponse& r, bool head) {
      response = Serialize(r, head);
      auto self = shared_from_this();
      timer.cancel();
      timer.expires_after(absl::ToChronoNanoseconds(server->options.write_timeout));
      timer.async_wait([self](const asio::error_code& ec) {
        if (ec) return;
        asio::error_code ignored;
        self->socket.close(ignored);
      });
      asio::async_write(socket, asio::buffer(response), [self](const asio::error_code&, size_t) {
        asio::error_code ignored;
        self->socket.shutdown(tcp::socket::shutdown_both, ignored);
        self->socket.close(ignored);
        self->timer.cancel();
      });
    }

    Impl* server;
    tcp::socket socket;
    asio::steady_timer timer;
    std::array<char, 4096> chunk{};
    std::string request;
    std::string response;
  };

  void Accept() {
    acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        if (connections.load() >= options.max_connections) {
          asio::error_code ignored;
          socket.close(ignored);  // over the bound: dropped at once
        } else {
          connections.fetch_add(1);
          std::make_shared<Connection>(this, std::move(socket))->Start();
        }
      }
      Accept();
    });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  asio::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(impl->options.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: '", impl->options.address, "' is not a numeric IP address"));
  }
  const tcp::endpoint ep(addr, impl->options.port);
  const std::string where = addr.is_v6() ? absl::StrFormat("[%s]:%d", addr.to_string(), ep.port())
                                         : absl::StrFormat("%s:%d", addr.to_string(), ep.port());
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--http ", where, ": cannot listen: ", ec.message(),
                     ec == asio::error::address_in_use ? " (another program, or another peer on "
                                                         "this machine, uses the port)"
                                                       : ""));
  }
  Impl* raw = impl.get();
  raw->Accept();
  raw->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() {
  asio::post(impl_->io, [raw = impl_.get()] {
    asio::error_code ignored;
    raw->acceptor.close(ignored);
  });
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string HttpServer::address() const {
  const tcp::endpoint ep = impl_->acceptor.local_endpoint();
  return ep.address().is_v6() ? absl::StrFormat("[%s]:%d", ep.address().to_string(), ep.port())
                              : absl::StrFormat("%s:%d", ep.address().to_string(), ep.port());
}

}  // namespace rt::observe
