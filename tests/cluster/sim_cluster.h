// SimCluster: N Membership state machines on a simulated network with simulated
// time, plus a simulated trainer, for deterministic fault scenarios.
//
// Network: every message is encoded and decoded (exercising the wire codec) and
// delivered one tick later, unless the sender or receiver is dead, or a partition
// separates them (dropped, like `ip link set down`). A stopped peer (SIGSTOP) neither
// ticks nor receives; its incoming messages queue up as in TCP buffers. Killing a peer
// (kill -9) tells every live peer OnLinkBroken, as a TCP reset would. Peers with other
// settings (SetConfig) never exchange messages: each side gets OnConfigRefused instead,
// as from a refused handshake; a peer that decides kConfigMismatch or kLeave exits.
//
// Trainer: a ring trains when every member of a view has installed that view and
// can train; each step takes step_ms and then every member completes it
// (OnStepCompleted). State is (version, lineage hash): a step extends the hash, a
// state transfer copies the source's. Invariants checked on every tick:
// - at most one view trains at a time (no split brain);
// - members of a training ring hold identical states;
// - a state transfer's source really holds the agreed version;
// - a member not sent the state already holds the version the view resumes from.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/membership.h"

namespace rt::cluster::testing {

struct SimOptions {
  int64_t tick_ms = 10;
  int64_t step_ms = 50;
  int64_t peer_timeout_ms = 1000;
  int64_t heartbeat_interval_ms = 100;
  int64_t proposal_timeout_ms = 300;
  int64_t startup_grace_ms = 500;
  int min_peers = 0;
  int max_delay_ticks = 1;  // each message takes 1..max_delay_ticks (FIFO per link)
  // > 0: training ends after this step; the first member of the ring announces it at
  // once, the others end_lag_ms later (as peers finish their last step at different
  // times), and then no ring trains any more.
  int64_t end_step = 0;
  int64_t end_lag_ms = 50;
  int64_t refusal_ttl_ms = 15000;
  uint32_t delay_seed = 1;
  // > 0: a state transfer takes this long (a large model on a slow link). As in the
  // trainer, a decision that ends the view gives it up and the peer keeps what it held;
  // a transfer that lands is reported with SetState and the ring may then train.
  int64_t transfer_ms = 0;
};

struct SimState {
  StateVersion version;
  uint64_t hash = 0;
};

class SimCluster {
 public:
  SimCluster(int n, SimOptions options) : options_(options), rng_(options.delay_seed) {
    for (int i = 0; i < n; ++i) hosts_.push_back(Name(i));
    peers_.resize(n);
    for (int i = 0; i < n; ++i) host_files_[i] = hosts_;
  }

  static PeerId Name(int i) { return "h" + std::to_string(i) + ":29500"; }
  int64_t now() const { return now_ms_; }
  const std::vector<PeerId>& hosts() const { return hosts_; }

  // Starts (or restarts) peer i with the state it held before (a restarted process
  // resumes from its own checkpoint) or a fresh one.
  void Start(int i) {
    if (i >= static_cast<int>(peers_.size())) peers_.resize(i + 1);
    Peer& p = peers_[i];
    if (!host_files_.count(i)) host_files_[i] = hosts_;
    MembershipConfig c;
    c.self = Name(i);
    c.hosts = host_files_[i];
    c.min_peers = options_.min_peers;
    c.peer_timeout_ms = options_.peer_timeout_ms;
    c.heartbeat_interval_ms = options_.heartbeat_interval_ms;
    c.proposal_timeout_ms = options_.proposal_timeout_ms;
    c.startup_grace_ms = options_.startup_grace_ms;
    c.refusal_ttl_ms = options_.refusal_ttl_ms;
    c.initial_epoch = p.state.version.epoch;
    c.initial_state = p.state.version;
    p.m = std::make_unique<Membership>(c, now_ms_);
    p.running = true;
    p.stopped = false;
    p.exited = false;
    p.installed = View{};
    p.inbox.clear();
    p.end_at_ms = -1;
    p.transfer_done_ms = -1;
  }
  void StartAll() {
    for (size_t i = 0; i < peers_.size(); ++i) Start(static_cast<int>(i));
  }
  void Kill(int i) {
    peers_[i].running = false;
    peers_[i].m.reset();
    peers_[i].inbox.clear();
    for (size_t j = 0; j < peers_.size(); ++j) {
      if (Live(static_cast<int>(j)) && !peers_[j].stopped) {
        peers_[j].m->OnLinkBroken(Name(i), now_ms_);
      }
    }
  }
  // Peer i runs settings `config` (default 0): its messages reach only peers with the
  // same settings; the others refuse it, both ways, as the handshake does.
  void SetConfig(int i, uint64_t config) { configs_[i] = config; }
  void Stop(int i) { peers_[i].stopped = true; }
  void Cont(int i) { peers_[i].stopped = false; }
  void Partition(std::set<int> side) { side_ = std::move(side); }
  void Heal() { side_.clear(); }
  // Gives peer i a new hosts file (as if copied there) and signals it.
  void SetHostsFile(int i, std::vector<PeerId> hosts) {
    host_files_[i] = hosts;
    if (Live(i)) peers_[i].m->OnHostsFileChanged(std::move(hosts), now_ms_);
  }

  bool Live(int i) const {
    return i < static_cast<int>(peers_.size()) && peers_[i].running && peers_[i].m != nullptr;
  }
  Membership& M(int i) { return *peers_[i].m; }
  const SimState& State(int i) const { return peers_[i].state; }
  bool Exited(int i) const { return peers_[i].exited; }
  const std::vector<std::string>& Log() const { return log_; }
  int view_changes() const { return view_changes_; }
  int64_t steps_trained() const { return steps_trained_; }
  int refused_transfers() const { return refused_transfers_; }

  void Run(int64_t duration_ms) {
    const int64_t end = now_ms_ + duration_ms;
    while (now_ms_ < end) Tick();
  }
  // Runs until pred() holds (checked every tick) or timeout; returns whether it held.
  template <typename Pred>
  bool RunUntil(Pred pred, int64_t timeout_ms) {
    const int64_t end = now_ms_ + timeout_ms;
    while (now_ms_ < end) {
      if (pred()) return true;
      Tick();
    }
    return pred();
  }

  // Live, non-stopped peers that can train, all in the same view.
  bool AllTrainingTogether(const std::vector<int>& who) {
    if (who.empty()) return false;
    for (int i : who) {
      if (!Live(i) || peers_[i].stopped || !M(i).CanTrain()) return false;
      if (M(i).view() != M(who[0]).view()) return false;
    }
    return M(who[0]).view().members.size() == who.size();
  }
  bool Training(int i) { return Live(i) && !peers_[i].stopped && M(i).CanTrain(); }
  // AllTrainingTogether, and every simulated trainer runs that view (its state
  // transfer, if any, has landed): the ring trains.
  bool RingTrains(const std::vector<int>& who) {
    if (!AllTrainingTogether(who)) return false;
    for (int i : who) {
      if (peers_[i].installed != M(i).view()) return false;
    }
    return true;
  }

  std::string Dump() {
    std::string s;
    for (size_t i = 0; i < peers_.size(); ++i) {
      s += Name(static_cast<int>(i)) + ": ";
      if (!Live(static_cast<int>(i))) {
        s += "dead\n";
        continue;
      }
      s += "phase " + std::to_string(static_cast<int>(M(i).phase())) + " " +
           M(i).view().ToString() + " train " + std::to_string(M(i).CanTrain()) + " step " +
           std::to_string(peers_[i].state.version.step) + " pause '" + M(i).pause_reason() + "'\n";
    }
    for (size_t k = log_.size() > 30 ? log_.size() - 30 : 0; k < log_.size(); ++k) {
      s += log_[k] + "\n";
    }
    return s;
  }

 private:
  struct Peer {
    std::unique_ptr<Membership> m;
    bool running = false;
    bool stopped = false;
    bool exited = false;
    SimState state;
    View installed;  // the view the simulated trainer runs in
    int64_t step_started_ms = -1;
    int64_t end_at_ms = -1;         // announces the end of the job then (end_step)
    int64_t transfer_done_ms = -1;  // a state transfer in progress lands then (transfer_ms)
    SimState transfer_state;        // ... with this state, for this view
    View transfer_view;
    struct InFlight {
      int64_t deliver_ms;
      std::vector<uint8_t> bytes;
    };
    std::vector<InFlight> inbox;  // in send order; FIFO per link is kept by deliver_ms
  };

  bool Reachable(int a, int b) const {
    if (side_.empty()) return true;
    return side_.count(a) == side_.count(b);
  }
  int IndexOf(const PeerId& id) const {
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (Name(static_cast<int>(i)) == id) return static_cast<int>(i);
    }
    return -1;
  }

  void Tick() {
    now_ms_ += options_.tick_ms;
    // Deliver what was sent last tick.
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (!Live(static_cast<int>(i)) || p.stopped) continue;
      std::vector<Peer::InFlight> due, later;
      for (auto& f : p.inbox) (f.deliver_ms <= now_ms_ ? due : later).push_back(std::move(f));
      p.inbox.swap(later);
      std::stable_sort(due.begin(), due.end(),
                       [](const auto& a, const auto& b) { return a.deliver_ms < b.deliver_ms; });
      for (const auto& f : due) {
        auto e = DecodeEnvelope(f.bytes, "sim");
        REQUIRE_MESSAGE(e.ok(), e.status().ToString());
        if (Live(static_cast<int>(i))) p.m->OnEnvelope(*e, now_ms_);
      }
    }
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (!Live(static_cast<int>(i)) || p.stopped) continue;
      if (p.end_at_ms >= 0 && now_ms_ >= p.end_at_ms) {
        p.end_at_ms = -1;
        p.m->AnnounceLeave("finished training at step " + std::to_string(options_.end_step),
                           now_ms_, options_.end_step);
      }
      p.m->OnTick(now_ms_);
    }
    LandTransfers();
    TrainOneTick();
    Drain();
  }

  void Drain() {
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (!Live(static_cast<int>(i)) || p.stopped) continue;
      for (const Decision& d : p.m->TakeDecisions()) Apply(static_cast<int>(i), d);
      if (!Live(static_cast<int>(i))) continue;
      for (Outgoing& o : p.m->TakeOutgoing()) {
        const int to = IndexOf(o.to);
        if (to < 0 || !Live(to) || !Reachable(static_cast<int>(i), to)) continue;
        if (Config(static_cast<int>(i)) != Config(to)) {  // the handshake refuses both ways
          peers_[to].m->OnConfigRefused(Name(static_cast<int>(i)), Config(static_cast<int>(i)),
                                        Difference(to, static_cast<int>(i)), now_ms_);
          p.m->OnConfigRefused(Name(to), Config(to), Difference(static_cast<int>(i), to), now_ms_);
          continue;
        }
        const int64_t delay =
            options_.tick_ms * (1 + static_cast<int64_t>(rng_() % options_.max_delay_ticks));
        int64_t& last = link_last_ms_[{static_cast<int>(i), to}];
        last = std::max(last, now_ms_ + delay);  // TCP: in order per link
        peers_[to].inbox.push_back({last, EncodeEnvelope(o.envelope)});
      }
    }
  }

  void Apply(int i, const Decision& d) {
    Peer& p = peers_[i];
    log_.push_back("t=" + std::to_string(now_ms_) + " " + Name(i) + " " + DecisionKindName(d.kind) +
                   " " + d.peer + " " + d.reason);
    if (EndsView(d.kind) || d.kind == Decision::kConfigMismatch) {
      p.transfer_done_ms = -1;  // given up: the newer decision replaces its view
    }
    switch (d.kind) {
      case Decision::kInstallView: {
        ++view_changes_;
        if (d.need_state) {
          const int src = IndexOf(d.agreement.source);
          REQUIRE_MESSAGE(src >= 0, d.agreement.source);
          // A transfer names the agreed version; a source that no longer holds it
          // (this commit was delivered late, e.g. after SIGCONT, and the cluster moved
          // on) refuses, and the receiver holds no state until it is readmitted.
          if (!Live(src) || peers_[src].state.version != d.agreement.resume) {
            ++refused_transfers_;
            p.state = SimState{{0, -1}, 0};
            p.m->OnStateTransferFailed(p.state.version, now_ms_);
            p.installed = View{};
            break;
          }
          if (options_.transfer_ms > 0) {
            p.transfer_done_ms = now_ms_ + options_.transfer_ms;
            p.transfer_state = peers_[src].state;
            p.transfer_view = d.view;
            p.installed = View{};
            break;
          }
          p.state = peers_[src].state;
        } else if (p.state.version != d.agreement.resume) {
          CHECK_MESSAGE(p.state.version == d.agreement.resume, Name(i), " holds ",
                        p.state.version.ToString(), " but the view resumes from ",
                        d.agreement.resume.ToString());
          // As the trainer does: this peer cannot join the ring; a new view follows.
          p.m->OnStateTransferFailed(p.state.version, now_ms_);
          p.installed = View{};
          break;
        }
        p.installed = d.view;
        p.step_started_ms = -1;
        break;
      }
      case Decision::kStopTraining:
      case Decision::kPause:
      case Decision::kExcluded:
        p.installed = View{};
        break;
      case Decision::kLeave:
      case Decision::kConfigMismatch:  // the process exits
        p.installed = View{};
        p.exited = true;
        p.running = false;
        p.m.reset();
        break;
      case Decision::kSuspect:
      case Decision::kWarning:
      case Decision::kPeerLeft:
        break;
    }
  }

  // State transfers in progress that are due land (transfer_ms).
  void LandTransfers() {
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (!Live(static_cast<int>(i)) || p.stopped || p.transfer_done_ms < 0) continue;
      if (now_ms_ < p.transfer_done_ms) continue;
      p.transfer_done_ms = -1;
      p.state = p.transfer_state;
      p.m->SetState(p.state.version);
      p.installed = p.transfer_view;
      p.step_started_ms = -1;
    }
  }

  // A ring trains if all members installed the same view and can train.
  void TrainOneTick() {
    std::set<uint64_t> training_epochs;
    std::map<uint64_t, std::vector<int>> rings;
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (!Live(static_cast<int>(i)) || p.stopped || p.installed.empty()) continue;
      if (!p.m->CanTrain() || p.m->view() != p.installed) continue;
      if (options_.end_step > 0 && p.state.version.step >= options_.end_step) continue;
      rings[p.installed.epoch].push_back(static_cast<int>(i));
    }
    for (auto& [epoch, idx] : rings) {
      const View& v = peers_[idx[0]].installed;
      if (idx.size() != v.members.size()) continue;  // someone missing: ring not formed
      training_epochs.insert(epoch);
      for (int i : idx) {
        CHECK_MESSAGE(peers_[i].state.version.step == peers_[idx[0]].state.version.step, Dump());
        CHECK(peers_[i].state.hash == peers_[idx[0]].state.hash);
      }
      Peer& lead = peers_[idx[0]];
      if (lead.step_started_ms < 0) lead.step_started_ms = now_ms_;
      if (now_ms_ - lead.step_started_ms < options_.step_ms) continue;
      lead.step_started_ms = now_ms_;
      ++steps_trained_;
      for (int i : idx) {
        SimState& s = peers_[i].state;
        s.version = StateVersion{epoch, s.version.step + 1};
        s.hash = s.hash * 1000003u + static_cast<uint64_t>(s.version.step);
      }
      for (int i : idx) {
        if (Live(i)) peers_[i].m->OnStepCompleted(peers_[i].state.version, now_ms_);
      }
      if (options_.end_step > 0 && lead.state.version.step == options_.end_step) {
        for (size_t k = 0; k < idx.size(); ++k) {
          peers_[idx[k]].end_at_ms = now_ms_ + (k == 0 ? 0 : options_.end_lag_ms);
        }
      }
    }
    CHECK_MESSAGE(training_epochs.size() <= 1, "split brain: two views train at once\n", Dump());
  }

  uint64_t Config(int i) const {
    auto it = configs_.find(i);
    return it == configs_.end() ? 0 : it->second;
  }
  // What the handshake of `i` reports about `other`'s settings.
  std::string Difference(int i, int other) const {
    return "layers: here '" + std::to_string(Config(i)) + "', there '" +
           std::to_string(Config(other)) + "'";
  }

  SimOptions options_;
  std::map<int, uint64_t> configs_;
  std::vector<PeerId> hosts_;
  std::map<int, std::vector<PeerId>> host_files_;
  std::vector<Peer> peers_;
  std::set<int> side_;
  std::mt19937 rng_;
  std::map<std::pair<int, int>, int64_t> link_last_ms_;
  int64_t now_ms_ = 0;
  std::vector<std::string> log_;
  int view_changes_ = 0;
  int64_t steps_trained_ = 0;
  int refused_transfers_ = 0;
};

// Peers `who` hold the same state (version and lineage).
inline bool SameState(SimCluster& c, const std::vector<int>& who) {
  for (int i : who) {
    if (c.State(i).version != c.State(who[0]).version) return false;
    if (c.State(i).hash != c.State(who[0]).hash) return false;
  }
  return true;
}

// Some decision logged so far contains `needle` ("t=MS PEER KIND PEER2 REASON").
inline bool LogHas(const SimCluster& c, const std::string& needle) {
  for (const std::string& l : c.Log()) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace rt::cluster::testing
