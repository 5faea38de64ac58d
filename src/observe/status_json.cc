// /api/status JSON (see status_json.h).
#include "observe/status_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "observe/event_log.h"
#include "observe/json.h"

namespace rt::observe {
namespace {

std::string Int(int64_t v, bool known) { return known ? absl::StrCat(v) : "null"; }

std::string Strings(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const std::string& s : v) q.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(q, ","), "]");
}

std::string Checkpoint(int64_t step, int64_t unix_ms, const std::string& where,
                       const std::string* peer, int64_t now_ms) {
  if (step < 0) return "null";
  std::string s = absl::StrCat("{\"step\":", step, ",\"age_s\":", JsonNum((now_ms - unix_ms) / 1e3),
                               ",\"where\":", JsonQuote(where));
  if (peer != nullptr) absl::StrAppend(&s, ",\"peer\":", JsonQuote(*peer));
  return s + "}";
}

std::string PeerJson(const PeerRow& r, int64_t now_ms) {
  const PeerFigures& f = r.figures;
  const bool k = r.have_figures;
  std::vector<std::string> links;
  for (const LinkFigure& l : f.links) {
    links.push_back(absl::StrCat("{\"to\":", JsonQuote(l.to), ",\"bytes_per_s\":",
                                 JsonNum(l.bytes_per_s), ",\"rtt_s\":", JsonNum(l.rtt_s), "}"));
  }
  return absl::StrCat(
      "{\"peer\":", JsonQuote(f.peer), ",\"self\":", r.self ? "true" : "false",
      ",\"alive\":", r.alive ? "true" : "false", ",\"in_view\":", r.in_view ? "true" : "false",
      ",\"state\":", JsonQuote(f.state), ",\"reason\":", JsonQuote(f.reason),
      ",\"step\":", Int(f.step, k && f.step >= 0), ",\"epoch\":", Int(f.epoch, k),
      ",\"tokens_per_s\":", JsonNum(f.tokens_per_s), ",\"step_ms\":", JsonNum(f.step_ms),
      ",\"compute_ms\":", JsonNum(f.compute_ms), ",\"comm_ms\":", JsonNum(f.comm_ms),
      ",\"wait_ms\":", JsonNum(f.wait_ms), ",\"slots\":", Int(f.slots, f.slots >= 0),
      ",\"loss\":", JsonNum(f.loss), ",\"bytes_sent\":", Int(f.bytes_sent, k),
      ",\"rss_bytes\":", Int(f.rss_bytes, f.rss_bytes >= 0),
      ",\"mem_available_bytes\":", Int(f.mem_available_bytes, f.mem_available_bytes >= 0),
      ",\"mem_total_bytes\":", Int(f.mem_total_bytes, f.mem_total_bytes >= 0),
      ",\"cpu_steal\":", JsonNum(f.cpu_steal), ",\"load1\":", JsonNum(f.load1),
      ",\"cpus\":", Int(f.cpus, f.cpus > 0),
      ",\"disk_free_bytes\":", Int(f.disk_free_bytes, f.disk_free_bytes >= 0),
      ",\"checkpoint\":", Checkpoint(f.ckpt_step, f.ckpt_unix_ms, f.ckpt_where, nullptr, now_ms),
      ",\"links\":[", absl::StrJoin(links, ","), "]", ",\"version\":", JsonQuote(f.version),
      ",\"age_s\":", r.age_ms >= 0 ? JsonNum(r.age_ms / 1e3) : "null", ",\"uptime_s\":",
      k && f.started_unix_ms > 0 ? JsonNum((f.unix_ms - f.started_unix_ms) / 1e3) : "null", "}");
}

template <typename F>
std::string Column(const std::vector<StepPoint>& h, F value) {
  std::vector<std::string> v;
  v.reserve(h.size());
  for (const StepPoint& p : h) v.push_back(value(p));
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

}  // namespace

std::string StatusJson(const StatusSnapshot& s, const StatusJsonOptions& options) {
  const PeerRow* me = s.Self();
  const PeerFigures empty;
  const PeerFigures& f = me != nullptr ? me->figures : empty;
  std::vector<std::string> peers;
  for (const PeerRow& r : s.peers) peers.push_back(PeerJson(r, s.unix_ms));
  std::vector<std::string> events;
  const size_t first =
      s.events.size() > options.max_events ? s.events.size() - options.max_events : 0;
  for (size_t i = first; i < s.events.size(); ++i) events.push_back(EventJson(s.events[i]));
  std::string out = absl::StrCat(
      "{\"time\":",
      JsonQuote(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(s.unix_ms),
                                 absl::UTCTimeZone())),
      ",\"unix_ms\":", s.unix_ms, ",\"self\":", JsonQuote(s.self),
      ",\"ring\":", s.ring ? "true" : "false", ",\"state\":", JsonQuote(s.state),
      ",\"reason\":", JsonQuote(s.reason), ",\"epoch\":", s.epoch,
      ",\"leader\":", JsonQuote(s.leader), ",\"members\":", Strings(s.members),
      ",\"hosts\":", s.hosts, ",\"quorum\":", s.quorum, ",\"step\":", Int(f.step, f.step >= 0),
      ",\"tokens\":", f.tokens, ",\"loss\":", JsonNum(f.loss),
      ",\"val_loss\":", JsonNum(f.val_loss), ",\"val_bpb\":", JsonNum(f.val_bpb),
      ",\"val_step\":", Int(f.val_step, f.val_step >= 0), ",\"checkpoint\":",
      Checkpoint(s.ckpt_step, s.ckpt_unix_ms, s.ckpt_where, &s.ckpt_peer, s.unix_ms),
      ",\"events_total\":", s.events_total, ",\"peers\":[", absl::StrJoin(peers, ","), "]",
      ",\"events\":[", absl::StrJoin(events, ","), "]");
  if (options.history) {
    const auto& h = s.history;
    absl::StrAppend(
        &out, ",\"history\":{\"step\":",
        Column(h, [](const StepPoint& p) { return absl::StrCat(p.step); }),
        ",\"unix_ms\":", Column(h, [](const StepPoint& p) { return absl::StrCat(p.unix_ms); }),
        ",\"tokens\":", Column(h, [](const StepPoint& p) { return absl::StrCat(p.tokens); }),
        ",\"loss\":", Column(h, [](const StepPoint& p) { return JsonNum(p.loss); }),
        ",\"tokens_per_s\":", Column(h, [](const StepPoint& p) { return JsonNum(p.tokens_per_s); }),
        ",\"val_loss\":", Column(h, [](const StepPoint& p) { return JsonNum(p.val_loss); }),
        ",\"val_bpb\":", Column(h, [](const StepPoint& p) { return JsonNum(p.val_bpb); }), "}");
  }
  out += "}";
  return out;
}

}  // namespace rt::observe
