// Fuzzes the status server's request-head parser (observe/http_request.h) and the
// routes behind it (observe/status_site.h): whatever a client sends, the parser reads
// more only while within the limit, never accepts a head past it, accepts only GET and
// HEAD of an absolute path without spaces, and the same bytes with more appended give
// the same request; every accepted request gets a complete answer from the site (200
// on its three pages, 404 elsewhere). The first input byte picks the limit, so that
// small limits are reached too.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_check.h"
#include "observe/http_request.h"
#include "observe/status_board.h"
#include "observe/status_site.h"

namespace {

const rt::observe::HttpHandler& Site() {
  static const auto* handler = new rt::observe::HttpHandler(rt::observe::StatusSiteHandler(
      std::make_shared<rt::observe::StatusBoard>(rt::observe::BoardOptions{})));
  return *handler;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rt::observe::ParsedHead;
  if (size == 0) return 0;
  const size_t max = data[0] < 128 ? 8192 : data[0];  // the server's default, or tiny
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const ParsedHead h = rt::observe::ParseRequestHead(bytes, max);
  const size_t end = std::min(bytes.find("\r\n\r\n"), bytes.find("\n\n"));
  switch (h.kind) {
    case ParsedHead::Kind::kNeedMore:
      FUZZ_CHECK(end == std::string::npos && bytes.size() <= max);
      return 0;
    case ParsedHead::Kind::kError:
      FUZZ_CHECK(h.error_status == 400 || h.error_status == 405 || h.error_status == 414 ||
                 h.error_status == 431 || h.error_status == 505);
      FUZZ_CHECK(!h.error_why.empty());
      return 0;
    case ParsedHead::Kind::kRequest:
      break;
  }
  FUZZ_CHECK(end != std::string::npos && end <= max);
  const rt::observe::HttpRequest& r = h.request;
  FUZZ_CHECK(r.method == "GET" || r.method == "HEAD");
  FUZZ_CHECK(!r.path.empty() && r.path[0] == '/');
  FUZZ_CHECK(r.path.find_first_of(" ?\r\n") == std::string::npos);
  FUZZ_CHECK(r.query.find_first_of(" \r\n") == std::string::npos);
  // More bytes after the head (a body, a pipelined request) change nothing.
  const ParsedHead again = rt::observe::ParseRequestHead(bytes + "GET /x HTTP/1.1\r\n\r\n", max);
  FUZZ_CHECK(again.kind == ParsedHead::Kind::kRequest && again.request.method == r.method &&
             again.request.path == r.path && again.request.query == r.query);
  const rt::observe::HttpResponse answer = Site()(r);
  const bool page =
      r.path == "/" || r.path == "/index.html" || r.path == "/metrics" || r.path == "/api/status";
  FUZZ_CHECK(answer.status == (page ? 200 : 404));
  FUZZ_CHECK(!answer.body.empty() && !answer.content_type.empty());
  return 0;
}
