// Start-up checks of the test-only fault hooks' environment variables (test_hooks.h).
#include "cli/test_hooks.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "net/hosts_file.h"

extern char** environ;

namespace rt::cli {
namespace {

constexpr char kPrefix[] = "RINGTRAIN_TEST_";

absl::Status Refuse(const std::string& name, absl::string_view value, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s='%s' (a test-only fault hook): %s", name, value, why));
}

absl::Status CheckHoldExchange(absl::string_view value) {
  std::filesystem::path dir = std::filesystem::path(std::string(value)).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Refuse("RINGTRAIN_TEST_HOLD_EXCHANGE", value,
                  absl::StrFormat("directory %s does not exist, so the hold could never be armed",
                                  dir.string()));
  }
  return absl::OkStatus();
}

absl::Status CheckDialVia(absl::string_view value) {
  for (absl::string_view pair : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(pair, '=');
    std::string host;
    uint16_t port = 0;
    bool ok = parts.size() == 2;
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      ok = parts[i].find(':') != absl::string_view::npos &&
           net::ParseHostPort(parts[i], "RINGTRAIN_TEST_DIAL_VIA", &host, &port).ok();
    }
    if (!ok) {
      return Refuse("RINGTRAIN_TEST_DIAL_VIA", value,
                    absl::StrFormat("'%s' is not ENDPOINT=HOST:PORT (both sides HOST:PORT; "
                                    "pairs separated by ',')",
                                    pair));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckServePause(absl::string_view value) {
  int ms = 0;
  if (!absl::SimpleAtoi(value, &ms) || ms < 0 || ms > 60000) {
    return Refuse("RINGTRAIN_TEST_SERVE_PAUSE_MS", value,
                  "expected milliseconds between served chunks, an integer in 0..60000");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<train::AllgatherStop> ParseAllgatherStopHook(absl::string_view value) {
  train::AllgatherStop stop;
  if (value.empty()) return stop;
  const std::vector<std::string> parts = absl::StrSplit(value, ':');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &stop.at) || stop.at < 1 ||
      (parts[1] != "before" && parts[1] != "after-own")) {
    return Refuse("RINGTRAIN_TEST_STOP_IN_ALLGATHER", value,
                  "expected N:before or N:after-own with N >= 1 (the process's Nth parameter "
                  "allgather)");
  }
  stop.after_own_segment = parts[1] == "after-own";
  return stop;
}

absl::Status CheckTestHooks(const std::vector<std::pair<std::string, std::string>>& env) {
  static const char* const kKnown[] = {"RINGTRAIN_TEST_STOP_IN_ALLGATHER",
                                       "RINGTRAIN_TEST_HOLD_EXCHANGE", "RINGTRAIN_TEST_DIAL_VIA",
                                       "RINGTRAIN_TEST_SERVE_PAUSE_MS"};
  for (const auto& [name, value] : env) {
    if (name.rfind(kPrefix, 0) != 0) continue;
    // An empty value is unset, as the hooks read it; the name must still be one of theirs.
    absl::Status st;
    if (name == kKnown[0]) {
      st = ParseAllgatherStopHook(value).status();
    } else if (name == kKnown[1]) {
      if (!value.empty()) st = CheckHoldExchange(value);
    } else if (name == kKnown[2]) {
      st = CheckDialVia(value);
    } else if (name == kKnown[3]) {
      if (!value.empty()) st = CheckServePause(value);
    } else {
      st = absl::InvalidArgumentError(absl::StrFormat(
          "%s='%s': no test-only fault hook has this name (they are %s); a misspelt hook would "
          "leave a fault test without its fault",
          name, value, absl::StrJoin(kKnown, ", ")));
    }
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CheckTestHooksInEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return CheckTestHooks(env);
}

}  // namespace rt::cli
