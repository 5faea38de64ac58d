// Hosts-file parsing and one-time name resolution (format in hosts_file.h).
#include "net/hosts_file.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace rt::net {

std::string HostEntry::Endpoint() const {
  return is_ipv6 ? absl::StrFormat("[%s]:%d", address, port)
                 : absl::StrFormat("%s:%d", address, port);
}

absl::StatusOr<std::string> ResolveHostWithGetaddrinfo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::NotFoundError(absl::StrFormat("cannot resolve host name '%s': %s", host,
                                               rc != 0 ? gai_strerror(rc) : "no address"));
  }
  char buf[INET6_ADDRSTRLEN] = {0};
  const void* addr = nullptr;
  if (result->ai_family == AF_INET) {
    addr = &reinterpret_cast<const sockaddr_in*>(result->ai_addr)->sin_addr;
  } else {
    addr = &reinterpret_cast<const sockaddr_in6*>(result->ai_addr)->sin6_addr;
  }
  const char* ok = inet_ntop(result->ai_family, addr, buf, sizeof(buf));
  freeaddrinfo(result);
  if (ok == nullptr) return absl::InternalError("inet_ntop failed for " + host);
  return std::string(buf);
}

absl::Status ParseHostPort(absl::string_view text, const std::string& where, std::string* host,
                           uint16_t* port) {
  text = absl::StripAsciiWhitespace(text);
  absl::string_view port_text;
  if (text.empty()) return absl::InvalidArgumentError(where + ": empty host");
  // First, so that two entries on one line are not taken for an IPv6 address.
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: '%s' has white space inside: one HOST[:PORT] per line", where, text));
    }
  }
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' opens '[' without a closing ']'", where, text));
    }
    *host = std::string(text.substr(1, close - 1));
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: unexpected '%s' after ']' in '%s'", where, rest, text));
      }
      port_text = rest.substr(1);
      if (port_text.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: empty port in '%s'", where, text));
      }
    }
    in6_addr probe;
    if (inet_pton(AF_INET6, host->c_str(), &probe) != 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' in brackets is not an IPv6 address", where, *host));
    }
  } else {
    size_t colon = text.find(':');
    if (colon != absl::string_view::npos && text.find(':', colon + 1) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' looks like an IPv6 address: write it in brackets, e.g. [%s]:%d",
                          where, text, text, kDefaultPort));
    }
    if (colon == absl::string_view::npos) {
      *host = std::string(text);
    } else {
      *host = std::string(text.substr(0, colon));
      port_text = text.substr(colon + 1);
      if (port_text.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: empty port in '%s'", where, text));
      }
    }
  }
  if (host->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: empty host in '%s'", where, text));
  }
  *port = kDefaultPort;
  if (!port_text.empty()) {
    uint32_t value = 0;
    bool digits = true;
    for (char c : port_text) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (!digits || !absl::SimpleAtoi(port_text, &value) || value == 0 || value > 65535) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: bad port '%s' in '%s' (expected 1..65535)", where, port_text, text));
    }
    *port = static_cast<uint16_t>(value);
  }
  return absl::OkStatus();
}

bool IsLoopbackAddress(const std::string& a) {
  in_addr v4;
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

bool AllLoopback(const std::vector<HostEntry>& hosts) {
  for (const auto& h : hosts) {
    if (!h.is_loopback) return false;
  }
  return true;
}

absl::StatusOr<std::vector<HostEntry>> ParseHostsText(absl::string_view text,
                                                      const std::string& source,
                                                      const HostResolver& resolve) {
  std::vector<HostEntry> entries;
  std::vector<std::string> texts;  // entries[i]'s line as written, for error messages
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::string where = absl::StrFormat("%s:%d", source, line_no);
    HostEntry e;
    e.line = line_no;
    absl::Status st = ParseHostPort(line, where, &e.host, &e.port);
    if (!st.ok()) return st;
    absl::StatusOr<std::string> address = resolve(e.host);
    if (!address.ok()) {
      return absl::NotFoundError(
          absl::StrFormat("%s: %s", where, std::string(address.status().message())));
    }
    e.address = *address;
    e.is_ipv6 = e.address.find(':') != std::string::npos;
    e.is_loopback = IsLoopbackAddress(e.address);
    for (size_t i = 0; i < entries.size(); ++i) {
      const HostEntry& other = entries[i];
      if (other.address == e.address && other.port == e.port) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: '%s' is the same peer (%s) as line %d ('%s'); each peer needs its own "
            "address or port",
            where, line, e.Endpoint(), other.line, texts[i]));
      }
    }
    entries.push_back(std::move(e));
    texts.emplace_back(line);
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: no hosts listed", source));
  }
  return entries;
}

absl::StatusOr<std::vector<HostEntry>> LoadHostsFile(const std::string& path,
                                                     const HostResolver& resolve) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open hosts file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseHostsText(buffer.str(), path, resolve);
}

}  // namespace rt::net
