// Parsing of the status server's request head (see http_request.h).
#include "observe/http_request.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_split.h"

namespace rt::observe {
namespace {

ParsedHead Fail(int status, std::string why) {
  ParsedHead h;
  h.kind = ParsedHead::Kind::kError;
  h.error_status = status;
  h.error_why = std::move(why);
  return h;
}

}  // namespace

ParsedHead ParseRequestHead(absl::string_view buffered, size_t max_request_bytes) {
  const size_t end = std::min(buffered.find("\r\n\r\n"), buffered.find("\n\n"));
  if (end == absl::string_view::npos) {
    if (buffered.size() <= max_request_bytes) return ParsedHead{};
    const bool line_too_long = buffered.find('\n') == absl::string_view::npos;
    return line_too_long ? Fail(414, "request line too long")
                         : Fail(431, "request headers too large");
  }
  if (end > max_request_bytes) return Fail(431, "request too large");
  const absl::string_view line = buffered.substr(0, buffered.find_first_of("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[1].empty() || parts[1][0] != '/') {
    return Fail(400, "malformed request line");
  }
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
    return Fail(505, "only HTTP/1.0 and HTTP/1.1");
  }
  if (parts[0] != "GET" && parts[0] != "HEAD") return Fail(405, "read-only: only GET and HEAD");
  ParsedHead h;
  h.kind = ParsedHead::Kind::kRequest;
  h.request.method = std::string(parts[0]);
  const size_t q = parts[1].find('?');
  h.request.path = std::string(parts[1].substr(0, q));
  if (q != absl::string_view::npos) h.request.query = std::string(parts[1].substr(q + 1));
  return h;
}

}  // namespace rt::observe
