// The request head of the status server (http_server.h), parsed from the bytes a
// client sent so far: a pure function, so that it can be fuzzed (tests/fuzz/http_request)
// and tested without sockets.
//
// Accepted: "METHOD SP /path[?query] SP HTTP/1.x", then headers (ignored), ended by an
// empty line (CRLF CRLF, or LF LF from lenient clients). Limits: the head must end
// within `max_request_bytes`; a head that has not ended by then is 414 when no line has
// ended (the request line alone is too long) and 431 otherwise.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "observe/http_server.h"

namespace rt::observe {

struct ParsedHead {
  enum class Kind {
    kNeedMore,  // no end of head yet and still within the limit: read more
    kRequest,   // `request` is a well-formed GET or HEAD
    kError,     // answer `error_status` (400, 405, 414, 431, 505) with `error_why`, close
  };
  Kind kind = Kind::kNeedMore;
  HttpRequest request;
  int error_status = 0;
  std::string error_why;
};

// `buffered`: every byte received on the connection so far.
ParsedHead ParseRequestHead(absl::string_view buffered, size_t max_request_bytes);

}  // namespace rt::observe
