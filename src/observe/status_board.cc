// The status board: this peer's figures, the cluster as it sees it, events, history
// (see status_board.h).
#include "observe/status_board.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cluster/messages.h"
#include "core/log.h"

#ifndef RINGTRAIN_VERSION
#define RINGTRAIN_VERSION "unknown"
#endif

namespace rt::observe {
namespace {

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

const char* PhaseState(cluster::Membership::Phase phase) {
  switch (phase) {
    case cluster::Membership::Phase::kForming:
      return "forming";
    case cluster::Membership::Phase::kJoining:
      return "joining";
    case cluster::Membership::Phase::kMember:
      return "member";
    case cluster::Membership::Phase::kChanging:
      return "changing";
    case cluster::Membership::Phase::kLeft:
      return "left";
  }
  return "forming";
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string Names(const std::vector<std::string>& v) {
  return v.empty() ? "none" : absl::StrJoin(v, " ");
}

}  // namespace

const char* BinaryVersion() { return RINGTRAIN_VERSION; }

const PeerRow* StatusSnapshot::Self() const {
  for (const PeerRow& r : peers) {
    if (r.self) return &r;
  }
  return nullptr;
}

StatusBoard::StatusBoard(BoardOptions options)
    : options_(std::move(options)),
      log_(options_.self, options_.event_capacity),
      history_(options_.history_points) {
  self_.peer = options_.self;
  self_.version = options_.version.empty() ? BinaryVersion() : options_.version;
  self_.started_unix_ms = NowUnixMs();
}

StatusBoard::~StatusBoard() { Stop(); }

absl::Status StatusBoard::Start() {
  if (!options_.events_path.empty()) {
    absl::StatusOr<EventsFile> f = EventsFile::Open(options_.events_path);
    if (!f.ok()) return f.status();
    events_file_.emplace(*std::move(f));
  }
  SampleNow();
  thread_ = std::thread([this] { SamplerLoop(); });
  return absl::OkStatus();
}

void StatusBoard::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    SampleNow();  // the last events (e.g. "finished") reach the file
  }
  SetClusterSource(nullptr);
  SetReportSink(nullptr);
}

void StatusBoard::SetClusterSource(std::function<ClusterFacts()> source) {
  std::lock_guard<std::mutex> lock(source_mu_);
  source_ = std::move(source);
}

void StatusBoard::SetReportSink(std::function<void(std::vector<uint8_t>)> sink) {
  std::lock_guard<std::mutex> lock(source_mu_);
  sink_ = std::move(sink);
}

void StatusBoard::SetSelf(const std::string& self) {
  std::lock_guard<std::mutex> lock(mu_);
  self_.peer = self;
  log_ = EventLog(self, options_.event_capacity);
  options_.self = self;
}

void StatusBoard::SetStep(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  self_.step = step;
}

void StatusBoard::OnStep(const StepPoint& p, uint64_t epoch, int slots, uint64_t bytes_sent) {
  std::lock_guard<std::mutex> lock(mu_);
  self_.epoch = epoch;
  self_.step = p.step;
  self_.tokens = p.tokens;
  if (std::isfinite(p.loss) && p.step > 0) self_.loss = p.loss;
  if (std::isfinite(p.val_loss)) {
    self_.val_loss = p.val_loss;
    self_.val_bpb = p.val_bpb;
    self_.val_step = p.step;
  }
  if (p.step > 0) {
    self_.tokens_per_s = p.tokens_per_s;
    self_.step_ms = p.step_ms;
    self_.compute_ms = p.compute_ms;
    self_.comm_ms = p.comm_ms;
    self_.wait_ms = p.wait_ms;
    self_.slots = slots;
  }
  self_.bytes_sent = bytes_sent;
  history_.Add(p);
}

void StatusBoard::OnCheckpoint(int64_t step, uint64_t epoch, const std::string& where,
                               const std::string& error) {
  ClusterEvent e;
  e.epoch = epoch;
  e.step = step;
  if (error.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    self_.ckpt_step = step;
    self_.ckpt_unix_ms = NowUnixMs();
    self_.ckpt_where = where;
  }
  e.kind = error.empty() ? "checkpoint" : "checkpoint_failed";
  e.message = error.empty() ? absl::StrFormat("checkpoint of step %d written to %s", step, where)
                            : absl::StrFormat("checkpoint of step %d failed: %s", step, error);
  Record(std::move(e));
}

void StatusBoard::SetActivity(const std::string& state, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  activity_ = state;
  activity_reason_ = reason;
}

void StatusBoard::SetLinks(std::vector<LinkFigure> links) {
  std::lock_guard<std::mutex> lock(mu_);
  self_.links = std::move(links);
}

void StatusBoard::Record(ClusterEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.epoch == 0) e.epoch = self_.epoch;
    if (e.step < 0) e.step = self_.step;
    log_.Record(std::move(e));
  }
  PublishReport();
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    wake_ = true;  // the sampler writes --events now, not at its next tick
  }
  stop_cv_.notify_all();
}

void StatusBoard::OnDecision(const cluster::Decision& d) {
  ClusterEvent e;
  switch (d.kind) {
    case cluster::Decision::kSuspect: {
      std::lock_guard<std::mutex> lock(mu_);
      suspect_reasons_[d.peer] = d.reason;
      return;
    }
    case cluster::Decision::kStopTraining:
      return;
    case cluster::Decision::kInstallView: {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<std::string> left, joined, left_why;
      for (const std::string& m : d.view.members) {
        if (!Contains(last_view_members_, m)) joined.push_back(m);
      }
      for (const std::string& m : last_view_members_) {
        if (Contains(d.view.members, m)) continue;
        left.push_back(m);
        auto it = suspect_reasons_.find(m);
        left_why.push_back(it == suspect_reasons_.end() ? m
                                                        : absl::StrCat(m, " (", it->second, ")"));
      }
      last_view_members_ = d.view.members;
      last_epoch_seen_ = d.view.epoch;
      self_.epoch = d.view.epoch;
      for (const std::string& m : d.view.members) suspect_reasons_.erase(m);
      if (d.view.leader() != options_.self) return;  // the leader records view changes
      e.kind = "view_change";
      e.epoch = d.view.epoch;
      e.step = d.agreement.resume.step;
      e.leader = d.view.leader();
      e.members = d.view.members;
      e.left = left;
      e.joined = joined;
      e.message = absl::StrFormat(
          "view epoch %d: %d peer(s) [%s], leader %s; left: %s; joined: %s; resuming after "
          "step %d",
          d.view.epoch, d.view.members.size(), Names(d.view.members), d.view.leader(),
          Names(left_why), Names(joined), d.agreement.resume.step);
      break;
    }
    case cluster::Decision::kPause:
      e.kind = "pause";
      e.message = absl::StrCat("paused: ", d.reason);
      break;
    case cluster::Decision::kExcluded:
      e.kind = "excluded";
      e.message = absl::StrCat("excluded from the view: ", d.reason);
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_view_members_.clear();
      }
      break;
    case cluster::Decision::kLeave:
      e.kind = "leave";
      e.message = absl::StrCat("leaving the job: ", d.reason);
      break;
    case cluster::Decision::kWarning:
      e.kind = "warning";
      e.message = d.reason;
      break;
    case cluster::Decision::kPeerLeft:  // a clean leave: finished, stopped or removed
      e.kind = "peer_left";
      e.message = absl::StrCat("peer ", d.peer, " left: ", d.reason);
      break;
    case cluster::Decision::kConfigMismatch:
      e.kind = "config_mismatch";
      e.message = absl::StrCat("leaving: ", d.reason);
      break;
  }
  Record(std::move(e));
}

std::optional<ClusterFacts> StatusBoard::PullCluster() {
  std::lock_guard<std::mutex> lock(source_mu_);
  if (!source_) return std::nullopt;
  return source_();
}

std::string StatusBoard::DerivedState(const std::optional<ClusterFacts>& facts,
                                      std::string* reason) const {
  if (!activity_.empty()) {
    *reason = activity_reason_;
    return activity_;
  }
  if (!facts) {
    *reason = "";
    return self_.step >= 0 ? "training" : "starting";
  }
  switch (facts->phase) {
    case cluster::Membership::Phase::kMember:
      if (facts->can_train) {
        *reason = "";
        return "training";
      }
      *reason = facts->pause_reason.empty() ? "the ring is re-forming" : facts->pause_reason;
      return facts->pause_reason.empty() ? "changing" : "paused";
    case cluster::Membership::Phase::kForming:
      *reason =
          facts->pause_reason.empty() ? "waiting for the hosts of the file" : facts->pause_reason;
      return facts->pause_reason.empty() ? "forming" : "paused";
    case cluster::Membership::Phase::kJoining:
      *reason = "asking the leader to be admitted";
      return "joining";
    case cluster::Membership::Phase::kChanging:
      *reason = "a view change is under way";
      return "changing";
    case cluster::Membership::Phase::kLeft:
      *reason = "removed from the hosts file";
      return "left";
  }
  return PhaseState(facts->phase);
}

std::vector<uint8_t> StatusBoard::EncodeSelfLocked() {
  PeerReport r;
  r.figures = self_;
  r.events = log_.OwnRecent(kMaxEventsPerReport);
  return EncodePeerReport(r, cluster::kMaxReportBytes);
}

void StatusBoard::PublishReport() {
  std::lock_guard<std::mutex> sink_lock(source_mu_);
  if (!sink_) return;
  std::vector<uint8_t> bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    self_.unix_ms = NowUnixMs();
    bytes = EncodeSelfLocked();
  }
  sink_(std::move(bytes));
}

void StatusBoard::SampleNow() {
  std::string disk_dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disk_dir = options_.ckpt_dir;
  }
  const SystemFigures sys = sampler_.Sample(disk_dir);  // no lock: statvfs may be slow
  StatusSnapshot snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    self_.rss_bytes = sys.rss_bytes;
    self_.mem_available_bytes = sys.mem_available_bytes;
    self_.mem_total_bytes = sys.mem_total_bytes;
    if (sys.cpu_steal >= 0) self_.cpu_steal = sys.cpu_steal;
    self_.load1 = sys.load1 >= 0 ? sys.load1 : NAN;
    self_.cpus = sys.cpus;
    self_.disk_free_bytes = sys.disk_free_bytes;
  }
  snap = Snapshot();  // merges other peers' events, derives the state
  PublishReport();
  if (!events_file_) return;
  const bool leader = !snap.ring || snap.leader == snap.self;
  if (!leader) {
    was_leader_ = false;
    return;
  }
  if (!was_leader_) events_file_->Resync();
  was_leader_ = true;
  absl::Status st = events_file_->Append(snap.events);
  if (!st.ok()) LogWarning("%s", std::string(st.message()));
}

void StatusBoard::SamplerLoop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, absl::ToChronoNanoseconds(options_.sample_interval),
                      [&] { return stopping_ || wake_; });
    if (stopping_) break;
    wake_ = false;
    lock.unlock();
    SampleNow();
    lock.lock();
  }
}

StatusSnapshot StatusBoard::Snapshot() {
  const std::optional<ClusterFacts> facts = PullCluster();
  StatusSnapshot s;
  s.unix_ms = NowUnixMs();
  std::vector<PeerRow> others;
  if (facts) {
    for (const cluster::RemoteReport& r : facts->peers) {
      PeerRow row;
      row.figures.peer = r.peer;
      row.alive = r.alive;
      row.in_view = r.in_view;
      row.age_ms = r.age_ms;
      if (!r.report.empty()) {
        absl::StatusOr<PeerReport> decoded = DecodePeerReport(r.report, r.peer);
        if (decoded.ok()) {
          row.figures = decoded->figures;
          row.figures.peer = r.peer;  // the link's identity, not what the report claims
          row.have_figures = true;
          std::lock_guard<std::mutex> lock(mu_);
          for (ClusterEvent& e : decoded->events) e.origin = r.peer;
          log_.Merge(decoded->events);
        } else {
          row.report_error = std::string(decoded.status().message());
        }
      }
      if (!row.alive) {
        row.figures.state = "unreachable";
        row.figures.reason =
            row.have_figures ? "not heard from within the peer timeout" : "never heard from";
      }
      others.push_back(std::move(row));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.self = options_.self;
  s.ring = facts.has_value();
  s.state = DerivedState(facts, &s.reason);
  self_.state = s.state;
  self_.reason = s.reason;
  self_.unix_ms = s.unix_ms;
  PeerRow me;
  me.figures = self_;
  me.self = true;
  me.alive = true;
  me.have_figures = true;
  me.age_ms = 0;
  if (facts) {
    s.epoch = facts->epoch;
    s.leader = facts->leader;
    s.members = facts->members;
    s.hosts = static_cast<int>(facts->hosts.size());
    s.quorum = facts->quorum;
    me.in_view = Contains(facts->members, options_.self);
    // Hosts-file order, then view members outside the agreed file (leaving).
    std::vector<std::string> order = facts->hosts;
    for (const std::string& m : facts->members) {
      if (!Contains(order, m)) order.push_back(m);
    }
    if (!Contains(order, options_.self)) order.push_back(options_.self);
    for (const std::string& p : order) {
      if (p == options_.self) {
        s.peers.push_back(me);
        continue;
      }
      for (PeerRow& r : others) {
        if (r.figures.peer == p) s.peers.push_back(r);
      }
    }
  } else {
    s.epoch = self_.epoch;
    s.leader = options_.self;
    s.members = {options_.self};
    me.in_view = true;
    s.peers.push_back(me);
  }
  for (const PeerRow& r : s.peers) {
    if (r.have_figures && r.figures.ckpt_step > s.ckpt_step) {
      s.ckpt_step = r.figures.ckpt_step;
      s.ckpt_unix_ms = r.figures.ckpt_unix_ms;
      s.ckpt_peer = r.figures.peer;
      s.ckpt_where = r.figures.ckpt_where;
    }
  }
  s.events = log_.All();
  s.events_total = log_.total();
  s.history = history_.points();
  return s;
}

}  // namespace rt::observe
