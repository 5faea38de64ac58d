// The test-only fault hooks' environment variables are checked at start-up
// (cli/test_hooks.h): well-formed values pass, a malformed value or an unknown
// RINGTRAIN_TEST_* name is refused naming the variable and the value.
#include "cli/test_hooks.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "temp_dir.h"

namespace {

using rt::cli::CheckTestHooks;
using Env = std::vector<std::pair<std::string, std::string>>;

// The error message of CheckTestHooks(env), "" if it passed.
std::string Refusal(const Env& env) {
  const absl::Status st = CheckTestHooks(env);
  return st.ok() ? "" : std::string(st.message());
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("test hooks: well-formed values, empty ones and other variables pass") {
  rt::testing::TempDir dir;
  CHECK(Refusal({{"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "3:before"},
                 {"RINGTRAIN_TEST_HOLD_EXCHANGE", dir / "hold"},
                 {"RINGTRAIN_TEST_DIAL_VIA", "127.0.0.1:1000=127.0.0.1:2000,[::1]:5=h:6"},
                 {"RINGTRAIN_TEST_SERVE_PAUSE_MS", "150"},
                 {"RINGTRAIN_ISA", "whatever"},
                 {"PATH", "/usr/bin"}}) == "");
  CHECK(Refusal({{"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "1:after-own"}}) == "");
  CHECK(Refusal({{"RINGTRAIN_TEST_HOLD_EXCHANGE", "relative-in-cwd"}}) == "");
  for (const char* name : {"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "RINGTRAIN_TEST_HOLD_EXCHANGE",
                           "RINGTRAIN_TEST_DIAL_VIA", "RINGTRAIN_TEST_SERVE_PAUSE_MS"}) {
    INFO(name);
    CHECK(Refusal({{name, ""}}) == "");
  }
}

TEST_CASE("test hooks: a malformed value is refused naming the variable and the value") {
  const std::pair<std::string, std::string> bad[] = {
      {"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "0:before"},
      {"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "2:after"},
      {"RINGTRAIN_TEST_STOP_IN_ALLGATHER", "2"},
      {"RINGTRAIN_TEST_HOLD_EXCHANGE", "/no/such/dir/hold"},
      {"RINGTRAIN_TEST_DIAL_VIA", "127.0.0.1:1000"},
      {"RINGTRAIN_TEST_DIAL_VIA", "127.0.0.1:1000=127.0.0.1"},
      {"RINGTRAIN_TEST_DIAL_VIA", "127.0.0.1:1000=127.0.0.1:99999"},
      {"RINGTRAIN_TEST_SERVE_PAUSE_MS", "150ms"},
      {"RINGTRAIN_TEST_SERVE_PAUSE_MS", "-1"},
  };
  for (const auto& [name, value] : bad) {
    const std::string why = Refusal({{name, value}});
    INFO(name, "=", value, ": ", why);
    CHECK(Contains(why, name + "='" + value + "'"));
  }
  CHECK(Contains(Refusal({{"RINGTRAIN_TEST_HOLD_EXCHANGE", "/no/such/dir/hold"}}),
                 "directory /no/such/dir does not exist"));
}

TEST_CASE("test hooks: an unknown RINGTRAIN_TEST_ name is refused with the known ones") {
  const std::string why = Refusal({{"RINGTRAIN_TEST_HOLD_EXCHANG", "/tmp/x"}});
  CHECK(Contains(why, "RINGTRAIN_TEST_HOLD_EXCHANG='/tmp/x'"));
  CHECK(Contains(why, "RINGTRAIN_TEST_HOLD_EXCHANGE,"));
}
