// HttpServer: a small read-only HTTP/1.1 server for status pages, on a thread of its
// own (Asio), so requests never touch the training or heartbeat threads.
//
// Bounded in every way a client controls: a request (line and headers) larger than
// `max_request_bytes` is answered 431 (414 if the request line alone is too long) and
// closed; a request not complete within `request_timeout` (a slow client) is dropped,
// as is a response not taken within `write_timeout`; more than `max_connections` at
// once are closed as soon as they are accepted. Only GET and HEAD (405 otherwise);
// every answer closes the connection (`Connection: close`); request bodies and
// headers are ignored. Memory is at most max_connections x (max_request_bytes + the
// largest response).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rt::observe {

struct HttpRequest {
  std::string method;  // GET or HEAD
  std::string path;    // "/api/status" (without the query)
  std::string query;   // after '?', "" if none
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string extra_headers;  // "Name: value\r\n" lines
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";  // numeric IPv4 or IPv6
  uint16_t port = 0;                  // 0: any free port (see port())
  size_t max_request_bytes = 8192;
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(10);
  int max_connections = 32;
};

// Called on the server's thread for every well-formed GET/HEAD request; must not block.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// "9100" -> 127.0.0.1:9100; "0.0.0.0:9100", "10.0.0.2:9100", "[::]:9100" as given.
// Errors (InvalidArgument) name the bad part.
absl::StatusOr<std::pair<std::string, uint16_t>> ParseHttpListenAddress(const std::string& spec);

class HttpServer {
 public:
  // Binds and listens (an address in use is a FailedPrecondition naming it), then
  // serves until destroyed.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  std::string address() const;  // "127.0.0.1:9100"

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of a status code ("Not Found").
const char* HttpReason(int status);

}  // namespace rt::observe
