// Prometheus text exposition of a StatusSnapshot (see prometheus_text.h).
#include "observe/prometheus_text.h"

#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rt::observe {
namespace {

std::string Value(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.10g", v);
}

// One metric family: HELP, TYPE, then its samples (written only if it has any).
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name), type_(type), help_(help) {}
  ~Family() {
    if (samples_.empty()) return;
    absl::StrAppend(out_, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ", type_, "\n",
                    samples_);
  }
  // `labels` already formatted ("peer=\"a:1\""); NaN values are skipped.
  void Add(const std::string& labels, double v) {
    if (std::isnan(v)) return;
    absl::StrAppend(&samples_, name_, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}",
                    " ", Value(v), "\n");
  }

 private:
  std::string* out_;
  const char* name_;
  const char* type_;
  const char* help_;
  std::string samples_;
};

std::string PeerLabel(const std::string& peer) {
  return absl::StrCat("peer=\"", PrometheusLabelValue(peer), "\"");
}

double Known(int64_t v) { return v >= 0 ? static_cast<double>(v) : NAN; }

}  // namespace

std::string PrometheusLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string PrometheusText(const StatusSnapshot& s) {
  std::string out;
  const PeerRow* me = s.Self();
  const double now_s = s.unix_ms / 1e3;
  // Per-peer families: `get` reads one figure of a peer that has figures.
  auto per_peer = [&](const char* name, const char* type, const char* help,
                      const std::function<double(const PeerFigures&)>& get) {
    Family f(&out, name, type, help);
    for (const PeerRow& r : s.peers) {
      if (r.have_figures) f.Add(PeerLabel(r.figures.peer), get(r.figures));
    }
  };
  {
    Family f(&out, "ringtrain_peer_up", "gauge",
             "1 if the peer was heard from within the peer timeout (this peer: always 1).");
    for (const PeerRow& r : s.peers) f.Add(PeerLabel(r.figures.peer), r.alive ? 1 : 0);
  }
  {
    Family f(&out, "ringtrain_peer_training", "gauge",
             "1 if the peer reports that it is training (state training).");
    for (const PeerRow& r : s.peers) {
      f.Add(PeerLabel(r.figures.peer), r.alive && r.figures.state == "training" ? 1 : 0);
    }
  }
  {
    Family f(&out, "ringtrain_build_info", "gauge", "The peer's binary version, as a label.");
    for (const PeerRow& r : s.peers) {
      if (!r.have_figures) continue;
      f.Add(absl::StrCat(PeerLabel(r.figures.peer), ",version=\"",
                         PrometheusLabelValue(r.figures.version), "\""),
            1);
    }
  }
  per_peer("ringtrain_step", "gauge", "Optimizer steps the peer has completed.",
           [](const PeerFigures& f) { return Known(f.step); });
  per_peer("ringtrain_tokens_per_second", "gauge", "Tokens per second of the peer's last step.",
           [](const PeerFigures& f) { return f.tokens_per_s; });
  per_peer("ringtrain_step_seconds", "gauge", "Duration of the peer's last step.",
           [](const PeerFigures& f) { return f.step_ms / 1e3; });
  per_peer("ringtrain_compute_seconds", "gauge",
           "Compute time (forward, backward, optimizer) of the peer's last step.",
           [](const PeerFigures& f) { return f.compute_ms / 1e3; });
  per_peer("ringtrain_comm_seconds", "gauge",
           "Time the peer's last step waited for the network (not hidden by overlap).",
           [](const PeerFigures& f) { return f.comm_ms / 1e3; });
  per_peer("ringtrain_wait_seconds", "gauge",
           "Time the peer's last step waited for the slowest peer's compute.",
           [](const PeerFigures& f) { return f.wait_ms / 1e3; });
  per_peer("ringtrain_slots", "gauge", "Sequences of the global batch the peer trained last step.",
           [](const PeerFigures& f) { return f.slots >= 0 ? f.slots : NAN; });
  per_peer("ringtrain_sent_bytes_total", "counter",
           "Payload bytes the peer has sent to the ring since it started.",
           [](const PeerFigures& f) { return static_cast<double>(f.bytes_sent); });
  per_peer("ringtrain_resident_memory_bytes", "gauge", "Resident memory of the peer's process.",
           [](const PeerFigures& f) { return Known(f.rss_bytes); });
  per_peer("ringtrain_memory_available_bytes", "gauge", "MemAvailable of the peer's machine.",
           [](const PeerFigures& f) { return Known(f.mem_available_bytes); });
  per_peer("ringtrain_memory_total_bytes", "gauge", "MemTotal of the peer's machine.",
           [](const PeerFigures& f) { return Known(f.mem_total_bytes); });
  per_peer("ringtrain_cpu_steal_ratio", "gauge",
           "Fraction of the machine's CPU time stolen by the hypervisor (last second).",
           [](const PeerFigures& f) { return f.cpu_steal; });
  per_peer("ringtrain_load1", "gauge", "One-minute load average of the peer's machine.",
           [](const PeerFigures& f) { return f.load1; });
  per_peer("ringtrain_cpus", "gauge", "Online CPUs of the peer's machine.",
           [](const PeerFigures& f) { return f.cpus > 0 ? f.cpus : NAN; });
  per_peer("ringtrain_checkpoint_disk_free_bytes", "gauge",
           "Free space of the peer's --ckpt-dir file system.",
           [](const PeerFigures& f) { return Known(f.disk_free_bytes); });
  per_peer("ringtrain_peer_last_checkpoint_step", "gauge",
           "Step of the last checkpoint the peer wrote.",
           [](const PeerFigures& f) { return Known(f.ckpt_step); });
  per_peer("ringtrain_peer_last_checkpoint_age_seconds", "gauge",
           "Seconds since the peer wrote its last checkpoint.", [&](const PeerFigures& f) {
             return f.ckpt_step >= 0 ? now_s - f.ckpt_unix_ms / 1e3 : NAN;
           });
  {
    Family f(&out, "ringtrain_report_age_seconds", "gauge",
             "Seconds since this peer received the peer's last status report.");
    for (const PeerRow& r : s.peers) {
      if (r.have_figures && r.age_ms >= 0) f.Add(PeerLabel(r.figures.peer), r.age_ms / 1e3);
    }
  }
  // Probed links: one series per (peer, to).
  auto links = [&](const char* name, const char* help, double LinkFigure::*value) {
    Family f(&out, name, "gauge", help);
    for (const PeerRow& r : s.peers) {
      for (const LinkFigure& l : r.figures.links) {
        f.Add(absl::StrCat(PeerLabel(r.figures.peer), ",to=\"", PrometheusLabelValue(l.to), "\""),
              l.*value);
      }
    }
  };
  links("ringtrain_link_bandwidth_bytes_per_second",
        "Probed bandwidth from the peer to another peer.", &LinkFigure::bytes_per_s);
  links("ringtrain_link_rtt_seconds", "Probed round-trip time from the peer to another peer.",
        &LinkFigure::rtt_s);
  // Cluster level, as this peer sees it.
  const PeerFigures* f = me != nullptr ? &me->figures : nullptr;
  auto cluster = [&](const char* name, const char* type, const char* help, double v) {
    Family(&out, name, type, help).Add("", v);
  };
  cluster("ringtrain_epoch", "gauge", "Epoch of the installed view.", static_cast<double>(s.epoch));
  {
    Family l(&out, "ringtrain_leader", "gauge", "The leader of the installed view, as a label.");
    if (!s.leader.empty()) l.Add(PeerLabel(s.leader), 1);
  }
  cluster("ringtrain_peers", "gauge", "Members of the installed view.",
          static_cast<double>(s.members.size()));
  cluster("ringtrain_hosts", "gauge", "Entries of the agreed hosts file.", s.hosts);
  cluster("ringtrain_quorum_peers", "gauge", "Members needed to train.", s.quorum);
  cluster("ringtrain_training", "gauge", "1 if this peer's view is training.",
          s.training() ? 1 : 0);
  if (f != nullptr) {
    cluster("ringtrain_tokens_total", "counter", "Tokens trained so far by all peers.",
            static_cast<double>(f->tokens));
    cluster("ringtrain_train_loss", "gauge", "Mean train loss of the last step (nats per token).",
            f->loss);
    cluster("ringtrain_val_loss", "gauge",
            "Validation loss of the last evaluation (nats per token).", f->val_loss);
    cluster("ringtrain_val_bits_per_byte", "gauge",
            "Validation bits per byte of the last evaluation.", f->val_bpb);
  }
  cluster("ringtrain_last_checkpoint_step", "gauge",
          "Step of the newest checkpoint any peer reports.", Known(s.ckpt_step));
  cluster("ringtrain_last_checkpoint_age_seconds", "gauge",
          "Seconds since the newest checkpoint any peer reports was written.",
          s.ckpt_step >= 0 ? now_s - s.ckpt_unix_ms / 1e3 : NAN);
  cluster("ringtrain_events_total", "counter", "Cluster events this peer has recorded or learned.",
          static_cast<double>(s.events_total));
  return out;
}

}  // namespace rt::observe
