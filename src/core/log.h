// Human log lines on stderr: "[2026-11-29 20:41:48.123 r2 I] message".
//
// The rank tag is set once a peer knows who it is (SetLogRank), so interleaved
// output of a local ring stays readable. Thread-safe: each line is one write(2).
#pragma once

#include <string>

#include "absl/strings/str_format.h"

namespace rt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Tags every later line with "r<rank>"; -1 (the default) omits the tag.
void SetLogRank(int rank);
// Lines below `level` are dropped (default kInfo; RINGTRAIN_LOG=debug lowers it).
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (LogEnabled(LogLevel::kInfo)) LogLine(LogLevel::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (LogEnabled(LogLevel::kWarning)) LogLine(LogLevel::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kError, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogDebug(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (LogEnabled(LogLevel::kDebug)) LogLine(LogLevel::kDebug, absl::StrFormat(format, args...));
}

}  // namespace rt
