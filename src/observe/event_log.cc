// The cluster event ring buffer and the leader's JSONL file (see event_log.h).
#include "observe/event_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "observe/json.h"

namespace rt::observe {
namespace {

std::string JsonList(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const std::string& s : v) q.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(q, ","), "]");
}

bool EarlierThan(const ClusterEvent& a, const ClusterEvent& b) {
  if (a.unix_ms != b.unix_ms) return a.unix_ms < b.unix_ms;
  if (a.origin != b.origin) return a.origin < b.origin;
  return a.seq < b.seq;
}

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

constexpr size_t kTailBytes = 256 << 10;

}  // namespace

std::string EventJson(const ClusterEvent& e) {
  std::string s = absl::StrCat(
      "{\"time\":",
      JsonQuote(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(e.unix_ms),
                                 absl::UTCTimeZone())),
      ",\"unix_ms\":", e.unix_ms, ",\"peer\":", JsonQuote(e.origin), ",\"seq\":", e.seq,
      ",\"kind\":", JsonQuote(e.kind), ",\"epoch\":", e.epoch, ",\"step\":", e.step,
      ",\"message\":", JsonQuote(e.message));
  if (e.kind == "view_change") {
    absl::StrAppend(&s, ",\"leader\":", JsonQuote(e.leader), ",\"members\":", JsonList(e.members),
                    ",\"left\":", JsonList(e.left), ",\"joined\":", JsonList(e.joined));
  }
  s += "}";
  return s;
}

ClusterEvent EventLog::Record(ClusterEvent e) {
  e.origin = self_;
  e.seq = ++next_seq_;
  if (e.unix_ms == 0) e.unix_ms = NowUnixMs();
  Keep(e);
  return e;
}

void EventLog::Merge(const std::vector<ClusterEvent>& events) {
  for (const ClusterEvent& e : events) {
    if (e.origin.empty() || e.origin == self_) continue;
    // An origin records its events in time order with growing seq; one that restarted
    // counts from 1 again, but later.
    auto it = latest_.find(e.origin);
    if (it != latest_.end() && e.seq <= it->second.first && e.unix_ms <= it->second.second) {
      continue;
    }
    Keep(e);
  }
}

void EventLog::Keep(ClusterEvent e) {
  auto& [seq, unix_ms] = latest_[e.origin];
  seq = std::max(seq, e.seq);
  unix_ms = std::max(unix_ms, e.unix_ms);
  events_.push_back(std::move(e));
  ++total_;
  if (events_.size() > capacity_) events_.erase(events_.begin());
}

std::vector<ClusterEvent> EventLog::All() const {
  std::vector<ClusterEvent> all = events_;
  std::stable_sort(all.begin(), all.end(), EarlierThan);
  return all;
}

std::vector<ClusterEvent> EventLog::OwnRecent(size_t n) const {
  std::vector<ClusterEvent> own;
  for (auto it = events_.rbegin(); it != events_.rend() && own.size() < n; ++it) {
    if (it->origin == self_) own.push_back(*it);
  }
  std::reverse(own.begin(), own.end());
  return own;
}

absl::StatusOr<EventsFile> EventsFile::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open --events file ", path, ": ", std::strerror(errno)));
  }
  EventsFile file(f, path);
  file.ReadWritten();
  return file;
}

EventsFile::EventsFile(EventsFile&& o) noexcept
    : file_(std::exchange(o.file_, nullptr)),
      path_(std::move(o.path_)),
      written_(std::move(o.written_)) {}

EventsFile::~EventsFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventsFile::ReadWritten() {
  std::ifstream in(path_, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return;
  const std::streamoff from = size > static_cast<std::streamoff>(kTailBytes)
                                  ? size - static_cast<std::streamoff>(kTailBytes)
                                  : 0;
  in.seekg(from);
  std::ostringstream tail;
  tail << in.rdbuf();
  for (absl::string_view line : absl::StrSplit(tail.str(), '\n')) {
    absl::StatusOr<JsonValue> v = ParseJson(line);
    if (!v.ok() || !v->is_object()) continue;  // a partial first line, or not ours
    const double seq = v->NumberOr("seq", -1);
    const double unix_ms = v->NumberOr("unix_ms", -1);
    const std::string peer = v->StringOr("peer", "");
    if (seq >= 0 && unix_ms >= 0 && !peer.empty()) {
      written_.insert({peer, static_cast<uint32_t>(seq), static_cast<int64_t>(unix_ms)});
    }
  }
}

absl::Status EventsFile::Append(const std::vector<ClusterEvent>& events) {
  for (const ClusterEvent& e : events) {
    if (!written_.insert({e.origin, e.seq, e.unix_ms}).second) continue;
    const std::string line = EventJson(e) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
      written_.erase({e.origin, e.seq, e.unix_ms});
      return absl::InternalError(
          absl::StrCat("cannot write --events file ", path_, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace rt::observe
