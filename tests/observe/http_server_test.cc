// The status HTTP server: routes and methods, and every bound a client controls (a
// slow client, a 1 MB request line, 1,000 connections at once, paths outside the
// site), after which it still answers.
#include "observe/http_server.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <atomic>
#include <thread>
#include <vector>

#include "observe/http_test_client.h"

namespace rt::observe {
namespace {

using testing::Body;
using testing::Get;
using testing::Request;

std::unique_ptr<HttpServer> StartEcho(HttpServerOptions o = {}) {
  auto s = HttpServer::Start(o, [](const HttpRequest& r) {
    HttpResponse resp;
    if (r.path != "/hello") {
      resp.status = 404;
      resp.body = "no\n";
      return resp;
    }
    resp.body = "hello " + r.query + "\n";
    return resp;
  });
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return *std::move(s);
}

bool StatusIs(const std::string& answer, int code) {
  return answer.rfind("HTTP/1.1 " + std::to_string(code) + " ", 0) == 0;
}

}  // namespace

TEST_CASE("listen addresses: a bare port is loopback, others must be numeric") {
  auto a = ParseHttpListenAddress("9100");
  REQUIRE(a.ok());
  CHECK(a->first == "127.0.0.1");
  CHECK(a->second == 9100);
  auto b = ParseHttpListenAddress("0.0.0.0:9100");
  REQUIRE(b.ok());
  CHECK(b->first == "0.0.0.0");
  auto c = ParseHttpListenAddress("[::1]:9100");
  REQUIRE(c.ok());
  CHECK(c->first == "::1");
  for (const char* bad : {"", "abc", "0", "70000", "myhost:9100", "[::1]9100", "1.2.3.4:"}) {
    CHECK_MESSAGE(!ParseHttpListenAddress(bad).ok(), bad);
  }
}

TEST_CASE("GET and HEAD are answered -- other methods, versions and paths are refused") {
  auto s = StartEcho();
  const std::string ok = Get(s->port(), "/hello?x=1");
  CHECK(StatusIs(ok, 200));
  CHECK(Body(ok) == "hello x=1\n");
  CHECK(ok.find("Connection: close\r\n") != std::string::npos);
  const std::string head = Request(s->port(), "HEAD /hello HTTP/1.1\r\n\r\n");
  CHECK(StatusIs(head, 200));
  CHECK(Body(head).empty());
  CHECK(StatusIs(Request(s->port(), "POST /hello HTTP/1.1\r\n\r\n"), 405));
  CHECK(StatusIs(Request(s->port(), "GET /hello HTTP/2.0\r\n\r\n"), 505));
  CHECK(StatusIs(Request(s->port(), "GET hello HTTP/1.1\r\n\r\n"), 400));
  CHECK(StatusIs(Request(s->port(), "garbage\r\n\r\n"), 400));
  CHECK(StatusIs(Get(s->port(), "/../../etc/passwd"), 404));
  CHECK(StatusIs(Request(s->port(), "GET /hello HTTP/1.0\n\n"), 200));
}

TEST_CASE("a port in use is a clear error") {
  auto s = StartEcho();
  HttpServerOptions o;
  o.port = s->port();
  auto second = HttpServer::Start(o, [](const HttpRequest&) { return HttpResponse{}; });
  REQUIRE(!second.ok());
  CHECK(std::string(second.status().message()).find("in use") != std::string::npos);
  CHECK(std::string(second.status().message()).find(std::to_string(s->port())) !=
        std::string::npos);
}

TEST_CASE("bounded input: huge request lines, slow clients, many connections") {
  HttpServerOptions o;
  o.request_timeout = absl::Milliseconds(300);
  o.max_connections = 32;
  auto s = StartEcho(o);

  SUBCASE("a 1 MB request line is answered 414 and closed") {
    const int fd = testing::ConnectLoopback(s->port());
    REQUIRE(fd >= 0);
    (void)testing::SendAll(fd, "GET /" + std::string(1 << 20, 'a'));  // may fail once closed
    bool closed = false;
    const std::string answer = testing::ReadUntilClosed(fd, 5000, &closed);
    ::close(fd);
    CHECK(closed);
    CHECK(StatusIs(answer, 414));
  }
  SUBCASE("huge headers are answered 431") {
    std::string raw = "GET /hello HTTP/1.1\r\n";
    for (int i = 0; i < 1000; ++i) raw += "X-Filler: " + std::string(40, 'b') + "\r\n";
    CHECK(StatusIs(Request(s->port(), raw + "\r\n"), 431));
  }
  SUBCASE("a slow client is dropped after the request timeout") {
    const int fd = testing::ConnectLoopback(s->port());
    REQUIRE(fd >= 0);
    REQUIRE(testing::SendAll(fd, "GET /hel"));
    bool closed = false;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string answer = testing::ReadUntilClosed(fd, 5000, &closed);
    const double s_waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    CHECK(closed);
    CHECK(answer.empty());
    CHECK(s_waited < 2.0);
  }
  SUBCASE("1,000 connections at once: the excess is dropped, the server still answers") {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur < 1200 && lim.rlim_max >= 1200) {
      lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
    std::vector<int> fds;
    for (int i = 0; i < 1000; ++i) {
      const int fd = testing::ConnectLoopback(s->port());
      if (fd >= 0) fds.push_back(fd);
    }
    CHECK(fds.size() >= 900);
    // The server holds at most 32 of them (the rest are closed at once: most reads see
    // the close); the held ones send nothing and are dropped after request_timeout,
    // after which a real request is answered although 1,000 sockets are still open.
    absl::SleepFor(absl::Milliseconds(150));
    int closed_by_server = 0;
    for (int fd : fds) {
      char byte;
      closed_by_server += ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
    }
    CHECK(closed_by_server >= static_cast<int>(fds.size()) - 32 - 50);
    absl::SleepFor(absl::Milliseconds(600));
    CHECK(StatusIs(Get(s->port(), "/hello"), 200));
    for (int fd : fds) ::close(fd);
    CHECK(StatusIs(Get(s->port(), "/hello"), 200));
  }
}

}  // namespace rt::observe
