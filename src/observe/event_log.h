// The cluster's event log: every peer keeps the events it recorded
// and those it learned from other peers' reports in a bounded ring buffer; the
// leader appends them to `--events FILE.jsonl`, one JSON object per line, so the
// cluster has one log, not one per machine.
//
// Who records what (status_board.h): a view change is recorded by the new view's
// leader only (every member installs it, one line is wanted), with the members that
// left and why; pauses, exclusions, leaving, warnings, checkpoints and state
// transfers by the peer they happen to. Events travel in the origin's report
// (peer_report.h: its most recent ones); (origin, seq, time) makes merging idempotent.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "observe/peer_report.h"

namespace rt::observe {

// One event as a JSON object (no newline): time (ISO 8601 UTC), unix_ms, peer
// (origin), seq, kind, epoch, step, message, and for view changes leader, members,
// left, joined.
std::string EventJson(const ClusterEvent& e);

// Not thread-safe (the status board serialises access).
class EventLog {
 public:
  explicit EventLog(std::string self, size_t capacity = 256)
      : self_(std::move(self)), capacity_(capacity) {}

  // Stamps `e` as this peer's next event (origin, seq, and the time if unset), keeps it
  // and returns the stamped copy.
  ClusterEvent Record(ClusterEvent e);
  // Keeps the events of another peer's report not seen before (idempotent).
  void Merge(const std::vector<ClusterEvent>& events);

  // Every kept event, oldest first (by time, then origin and seq).
  std::vector<ClusterEvent> All() const;
  // This peer's own most recent `n` events, oldest first.
  std::vector<ClusterEvent> OwnRecent(size_t n) const;
  // Events kept since the start (including those dropped from the buffer since).
  uint64_t total() const { return total_; }

 private:
  void Keep(ClusterEvent e);

  std::string self_;
  size_t capacity_;
  uint32_t next_seq_ = 0;
  uint64_t total_ = 0;
  std::vector<ClusterEvent> events_;  // at most capacity_, in arrival order
  // Per origin: the highest seq and time kept (what Merge has seen).
  std::map<std::string, std::pair<uint32_t, int64_t>> latest_;
};

// Appends events to a JSONL file, each (origin, seq, time) once, also across leaders that
// share the file (a local ring): the ids already in the file's last 256 KB count as
// written.
class EventsFile {
 public:
  static absl::StatusOr<EventsFile> Open(const std::string& path);
  EventsFile(EventsFile&& o) noexcept;
  EventsFile& operator=(EventsFile&&) = delete;
  EventsFile(const EventsFile&) = delete;
  ~EventsFile();

  // Appends those of `events` (oldest first) not written yet, one write + flush each.
  absl::Status Append(const std::vector<ClusterEvent>& events);
  // Re-reads which events the file holds (this peer became the leader: a previous
  // leader may have written to the same file).
  void Resync() { ReadWritten(); }
  const std::string& path() const { return path_; }

 private:
  EventsFile(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  void ReadWritten();

  std::FILE* file_;
  std::string path_;
  std::set<std::tuple<std::string, uint32_t, int64_t>> written_;  // (origin, seq, unix_ms)
};

}  // namespace rt::observe
