// Implementation of the stderr logger (see log.h).
#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rt {
namespace {

std::atomic<int> g_log_rank{-1};

LogLevel LevelFromEnv() {
  const char* env = std::getenv("RINGTRAIN_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int> g_log_level{static_cast<int>(LevelFromEnv())};

}  // namespace

void SetLogRank(int rank) { g_log_rank.store(rank); }
void SetLogLevel(LogLevel level) { g_log_level.store(static_cast<int>(level)); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_log_level.load(); }

void LogLine(LogLevel level, const std::string& message) {
  static constexpr char kLevelChar[] = {'D', 'I', 'W', 'E'};
  // Looked up once: the first LocalTimeZone() call initialises shared state that
  // concurrent first calls would race on (TSan reports it).
  static const absl::TimeZone zone = absl::LocalTimeZone();
  std::string time = absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(), zone);
  int rank = g_log_rank.load();
  std::string line =
      rank >= 0 ? absl::StrFormat("[%s r%d %c] %s\n", time, rank, kLevelChar[static_cast<int>(level)], message)
                : absl::StrFormat("[%s %c] %s\n", time, kLevelChar[static_cast<int>(level)], message);
  // One write per line so lines from threads and processes do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace rt
