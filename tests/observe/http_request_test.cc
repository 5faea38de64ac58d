// The status server's request-head parser, without sockets: what it accepts, what it
// refuses with which status, and when it asks for more bytes.
#include "observe/http_request.h"

#include <doctest/doctest.h>

#include <string>

namespace rt::observe {
namespace {

using Kind = ParsedHead::Kind;

TEST_CASE("http request head: GET and HEAD with path and query") {
  ParsedHead h = ParseRequestHead("GET /api/status?history=0 HTTP/1.1\r\nHost: x\r\n\r\n", 8192);
  REQUIRE(h.kind == Kind::kRequest);
  CHECK(h.request.method == "GET");
  CHECK(h.request.path == "/api/status");
  CHECK(h.request.query == "history=0");
  h = ParseRequestHead("HEAD / HTTP/1.0\n\n", 8192);  // lenient line ends
  REQUIRE(h.kind == Kind::kRequest);
  CHECK(h.request.method == "HEAD");
  CHECK(h.request.path == "/");
  CHECK(h.request.query.empty());
}

TEST_CASE("http request head: incomplete heads ask for more until the limit") {
  CHECK(ParseRequestHead("", 64).kind == Kind::kNeedMore);
  CHECK(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n", 64).kind == Kind::kNeedMore);
  const ParsedHead line = ParseRequestHead("GET /" + std::string(100, 'a'), 64);
  CHECK(line.kind == Kind::kError);
  CHECK(line.error_status == 414);
  const ParsedHead headers = ParseRequestHead("GET / HTTP/1.1\r\nX: " + std::string(100, 'a'), 64);
  CHECK(headers.kind == Kind::kError);
  CHECK(headers.error_status == 431);
  // A head that ends, but past the limit (it arrived in one read), is refused too.
  const ParsedHead late =
      ParseRequestHead("GET / HTTP/1.1\r\nX: " + std::string(100, 'a') + "\r\n\r\n", 64);
  CHECK(late.kind == Kind::kError);
  CHECK(late.error_status == 431);
}

TEST_CASE("http request head: malformed, other methods and versions") {
  auto status = [](const std::string& head) {
    const ParsedHead h = ParseRequestHead(head, 8192);
    return h.kind == Kind::kError ? h.error_status : 0;
  };
  CHECK(status("GET\r\n\r\n") == 400);
  CHECK(status("GET  HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET relative HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1 extra\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/2\r\n\r\n") == 505);
  CHECK(status("POST / HTTP/1.1\r\n\r\n") == 405);
  CHECK(status("DELETE /metrics HTTP/1.1\r\n\r\n") == 405);
}

}  // namespace
}  // namespace rt::observe
