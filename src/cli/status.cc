// `ringtrain status --hosts FILE [--secret-file F] [--json]`: asks any reachable peer
// of the ring, over the authenticated control channel (observe/status_channel.h), how
// the ring is doing, and prints the cluster table and recent events (or the JSON).
// Exit status for cron and monitoring checks: 0 training, 1 paused / no quorum / not
// training yet, 2 no peer answered (or a usage error).
#include <cmath>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "net/handshake.h"
#include "net/hosts_file.h"
#include "observe/json.h"
#include "observe/status_channel.h"

ABSL_FLAG(double, timeout, 5, "status: seconds to wait for any peer to answer");

namespace rt::cli {
namespace {

std::string Num(const observe::JsonValue& o, const char* key, int decimals = 0) {
  const observe::JsonValue* v = o.Find(key);
  if (v == nullptr || !v->is_number()) return "-";
  return absl::StrFormat("%.*f", decimals, v->number());
}

std::string Bytes(const observe::JsonValue& o, const char* key) {
  const observe::JsonValue* v = o.Find(key);
  if (v == nullptr || !v->is_number()) return "-";
  double b = v->number();
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return absl::StrFormat("%.*f %s", b >= 100 ? 0 : 1, b, units[u]);
}

std::string Ago(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 90) return absl::StrFormat("%.0f s ago", s);
  if (s < 5400) return absl::StrFormat("%.0f min ago", s / 60);
  if (s < 129600) return absl::StrFormat("%.1f h ago", s / 3600);
  return absl::StrFormat("%.1f d ago", s / 86400);
}

void PrintTable(const observe::JsonValue& s, const std::string& answered_by) {
  const std::string state = s.StringOr("state", "?");
  const std::string reason = s.StringOr("reason", "");
  const observe::JsonValue* members = s.Find("members");
  std::printf(
      "ring: %s%s (epoch %s, leader %s, %zu of %s hosts in the view, quorum %s); "
      "answered by %s\n",
      state.c_str(), reason.empty() ? "" : (": " + reason).c_str(), Num(s, "epoch").c_str(),
      s.StringOr("leader", "-").c_str(), members != nullptr ? members->items().size() : 0,
      Num(s, "hosts").c_str(), Num(s, "quorum").c_str(), answered_by.c_str());
  std::string ckpt = "none";
  if (const observe::JsonValue* c = s.Find("checkpoint"); c != nullptr && c->is_object()) {
    ckpt =
        absl::StrFormat("step %s, %s, on %s in %s", Num(*c, "step"), Ago(c->NumberOr("age_s", NAN)),
                        c->StringOr("peer", "-"), c->StringOr("where", "-"));
  }
  std::printf("step %s, loss %s, val bits/byte %s (step %s); last checkpoint: %s\n\n",
              Num(s, "step").c_str(), Num(s, "loss", 4).c_str(), Num(s, "val_bpb", 4).c_str(),
              Num(s, "val_step").c_str(), ckpt.c_str());
  std::printf("%-24s %-16s %8s %9s %6s %6s %9s %9s %10s %s\n", "peer", "state", "step", "tok/s",
              "slots", "steal", "RSS", "mem free", "disk free", "heard");
  const observe::JsonValue* peers = s.Find("peers");
  if (peers != nullptr) {
    for (const observe::JsonValue& p : peers->items()) {
      std::string name = p.StringOr("peer", "?");
      if (name == s.StringOr("leader", "")) name += " (L)";
      const double steal = p.NumberOr("cpu_steal", NAN);
      const observe::JsonValue* self = p.Find("self");
      const bool is_self = self != nullptr && self->boolean();
      std::printf("%-24s %-16s %8s %9s %6s %6s %9s %9s %10s %s\n", name.c_str(),
                  p.StringOr("state", "?").c_str(), Num(p, "step").c_str(),
                  Num(p, "tokens_per_s").c_str(), Num(p, "slots").c_str(),
                  std::isfinite(steal) ? absl::StrFormat("%.1f%%", 100 * steal).c_str() : "-",
                  Bytes(p, "rss_bytes").c_str(), Bytes(p, "mem_available_bytes").c_str(),
                  Bytes(p, "disk_free_bytes").c_str(),
                  is_self ? "(answered)" : Ago(p.NumberOr("age_s", NAN)).c_str());
      const std::string why = p.StringOr("reason", "");
      if (!why.empty() && p.StringOr("state", "") != "training") {
        std::printf("%-24s   %s\n", "", why.c_str());
      }
    }
  }
  const observe::JsonValue* events = s.Find("events");
  if (events != nullptr && !events->items().empty()) {
    std::printf("\nrecent events:\n");
    const size_t n = events->items().size();
    for (size_t i = n > 15 ? n - 15 : 0; i < n; ++i) {
      const observe::JsonValue& e = events->items()[i];
      std::printf("  %s  %-14s %s (%s)\n", e.StringOr("time", "?").c_str(),
                  e.StringOr("kind", "?").c_str(), e.StringOr("message", "").c_str(),
                  e.StringOr("peer", "?").c_str());
    }
  }
}

int RunStatus(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain status: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  const std::string hosts_path = absl::GetFlag(FLAGS_hosts);
  if (hosts_path.empty()) {
    std::fprintf(stderr, "ringtrain status: --hosts FILE is required (the ring's hosts file)\n");
    return 2;
  }
  const double timeout_s = absl::GetFlag(FLAGS_timeout);
  if (!(timeout_s > 0) || timeout_s > 3600) {
    std::fprintf(stderr, "ringtrain status: --timeout must be in (0, 3600] seconds\n");
    return 2;
  }
  absl::StatusOr<std::vector<net::HostEntry>> hosts = net::LoadHostsFile(hosts_path);
  absl::StatusOr<bool> encrypt =
      hosts.ok() ? net::ResolveEncrypt(absl::GetFlag(FLAGS_encrypt), *hosts) : hosts.status();
  absl::StatusOr<std::string> secret =
      encrypt.ok() ? net::LoadSharedSecret(absl::GetFlag(FLAGS_secret_file), *hosts, *encrypt)
                   : encrypt.status();
  if (!secret.ok()) {
    std::fprintf(stderr, "ringtrain status: %s\n", std::string(secret.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<observe::StatusAnswer> answer = observe::QueryRingStatus(
      *hosts, *secret, "ringtrain-train", absl::Milliseconds(timeout_s * 1000), *encrypt);
  if (!answer.ok()) {
    std::fprintf(stderr, "ringtrain status: %s\n", std::string(answer.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<observe::JsonValue> parsed = observe::ParseJson(answer->json);
  if (!parsed.ok() || !parsed->is_object()) {
    std::fprintf(stderr, "ringtrain status: %s sent an answer that is not a JSON object: %s\n",
                 answer->peer.c_str(),
                 parsed.ok() ? "another type" : std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", answer->json.c_str());
  } else {
    PrintTable(*parsed, answer->peer);
  }
  return parsed->StringOr("state", "") == "training" ? 0 : 1;
}

}  // namespace

const Subcommand& StatusSubcommand() {
  static const Subcommand sub{
      "status",
      "Ask any reachable peer how the ring is doing (table, or --json; exit 0/1/2)",
      "ringtrain status --hosts FILE [--secret-file F] [--json] [--timeout 5]\n"
      "Asks the peers of FILE at once over the authenticated control channel and prints\n"
      "the first answer: the ring's state, epoch, leader, step, losses, last checkpoint,\n"
      "a table of every peer (state, step, tokens/s, CPU steal, memory, disk) and the\n"
      "recent events. Exit status: 0 training, 1 paused / no quorum / not training yet,\n"
      "2 no peer answered (e.g. for cron: ringtrain status --hosts hosts >/dev/null ||\n"
      "mail ...).",
      {"hosts", "secret_file", "encrypt", "json", "timeout"},
      &RunStatus};
  return sub;
}

}  // namespace rt::cli
