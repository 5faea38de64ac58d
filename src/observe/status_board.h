// StatusBoard: everything a status page, `/metrics` or `ringtrain status` shows of a
// running ring, as this peer sees it. Thread-safe; shared by the trainer
// (steps, checkpoints), the elastic ring (cluster decisions, the membership's view
// and the other peers' reports), the HTTP server and the status channel.
//
// Data flow:
//   - this peer's figures: OnStep / OnCheckpoint / SetActivity from the training
//     thread, the machine's (observe/system_figures.h) sampled by the board's own
//     thread every `sample_interval` (so a slow statvfs never delays training or
//     heartbeats);
//   - every `sample_interval` and after each event this peer records, its report
//     (figures + recent own events, peer_report.h) goes to the report sink (the
//     membership service, which sends it on heartbeats);
//   - the cluster (view, liveness, other peers' report bytes) is pulled from the
//     cluster source at every Snapshot() and sample; other peers' events are merged
//     into this peer's event log (event_log.h);
//   - the leader (or a single peer) appends the log to --events on the sampler thread,
//     which wakes for every event this peer records.
// Events from membership decisions (OnDecision): a view change is recorded by the new
// view's leader, naming who left (with the reason this peer last saw for them) and
// who joined; pauses, exclusions, leaving and warnings by the peer they concern.
//
// Lock order: the cluster source is called without the board's lock held; the sinks
// (report, events file) are called from the sampler thread or after the lock is
// released. A source/sink may be replaced or cleared at any time; clearing waits
// for a call in progress, so the owner of a source may be destroyed afterwards.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cluster/membership.h"
#include "cluster/membership_service.h"
#include "observe/event_log.h"
#include "observe/peer_report.h"
#include "observe/step_history.h"
#include "observe/system_figures.h"

namespace rt::observe {

struct BoardOptions {
  std::string self = "local";  // this peer's HOST:PORT ("local": no --hosts)
  std::string version;
  std::string ckpt_dir;     // whose free space is reported ("" = none)
  std::string events_path;  // --events ("" = none)
  absl::Duration sample_interval = absl::Seconds(1);
  size_t history_points = 2048;
  size_t event_capacity = 256;
};

// What the cluster layer says right now (the elastic ring fills it).
struct ClusterFacts {
  uint64_t epoch = 0;
  std::vector<std::string> members;  // the installed view, rank order
  std::string leader;
  std::vector<std::string> hosts;  // the agreed hosts file
  int quorum = 1;
  bool can_train = false;
  cluster::Membership::Phase phase = cluster::Membership::Phase::kForming;
  std::string pause_reason;
  std::vector<cluster::RemoteReport> peers;  // every other peer (service's PeerReports)
};

// One row of the peers table.
struct PeerRow {
  PeerFigures figures;  // figures.peer is always set
  bool self = false;
  bool alive = false;  // self, or heard from within the peer timeout
  bool in_view = false;
  bool have_figures = false;  // a report arrived (else only `peer` is known)
  int64_t age_ms = -1;        // of the figures
  std::string report_error;   // a report that did not decode
};

struct StatusSnapshot {
  int64_t unix_ms = 0;
  std::string self;
  bool ring = false;  // --hosts (else a single peer)
  std::string state;  // this peer's: training, paused, ... (PeerFigures::state)
  std::string reason;
  uint64_t epoch = 0;
  std::string leader;
  std::vector<std::string> members;
  int hosts = 1;
  int quorum = 1;
  std::vector<PeerRow> peers;  // hosts-file order, then other view members
  std::vector<ClusterEvent> events;
  uint64_t events_total = 0;
  std::vector<StepPoint> history;
  // Cluster-level figures: the newest checkpoint any peer reports.
  int64_t ckpt_step = -1;
  int64_t ckpt_unix_ms = 0;
  std::string ckpt_peer, ckpt_where;

  const PeerRow* Self() const;
  bool training() const { return state == "training"; }
};

class StatusBoard {
 public:
  explicit StatusBoard(BoardOptions options);
  ~StatusBoard();  // Stop()
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  // Opens --events (error names it) and starts the sampler thread.
  absl::Status Start();
  void Stop();  // idempotent; the last events are written

  void SetClusterSource(std::function<ClusterFacts()> source);
  void SetReportSink(std::function<void(std::vector<uint8_t>)> sink);
  // This peer's identity once known (the ring resolved it).
  void SetSelf(const std::string& self);

  // The training thread. SetStep: the step this peer starts from (0, or resumed).
  void SetStep(int64_t step);
  void OnStep(const StepPoint& p, uint64_t epoch, int slots, uint64_t bytes_sent);
  // `error` empty: written to `where`.
  void OnCheckpoint(int64_t step, uint64_t epoch, const std::string& where,
                    const std::string& error);
  // Overrides the state derived from the cluster ("" = derive): e.g. receiving_state,
  // stopping, stopped, finished.
  void SetActivity(const std::string& state, const std::string& reason = "");
  void SetLinks(std::vector<LinkFigure> links);

  // The control thread (membership decisions): events, see the file comment.
  void OnDecision(const cluster::Decision& d);
  // Any event of this peer (kind, message; epoch/step default to the current ones).
  void Record(ClusterEvent e);

  StatusSnapshot Snapshot();

  // One sampling round now (the sampler thread does it every sample_interval).
  void SampleNow();

 private:
  std::optional<ClusterFacts> PullCluster();
  // Called with mu_ held.
  std::string DerivedState(const std::optional<ClusterFacts>& facts, std::string* reason) const;
  std::vector<uint8_t> EncodeSelfLocked();
  void PublishReport();
  void SamplerLoop();

  BoardOptions options_;

  std::mutex source_mu_;  // held while a source or sink is called or replaced
  std::function<ClusterFacts()> source_;
  std::function<void(std::vector<uint8_t>)> sink_;

  std::mutex mu_;
  PeerFigures self_;
  std::string activity_, activity_reason_;
  EventLog log_;
  StepHistory history_;
  std::map<std::string, std::string> suspect_reasons_;  // the last kSuspect per peer
  std::vector<std::string> last_view_members_;
  uint64_t last_epoch_seen_ = 0;
  SystemSampler sampler_;  // the sampler thread only

  std::optional<EventsFile> events_file_;  // the sampler thread (and Stop) only
  bool was_leader_ = false;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  bool wake_ = false;  // an event was recorded: sample (and write --events) now
  std::thread thread_;
};

// The version string of this binary (CMake: RINGTRAIN_VERSION).
const char* BinaryVersion();

}  // namespace rt::observe
