// `ringtrain fetch-data --hosts FILE --data DIR`: the data phase alone (fetch/fetch_phase.h).
// Fetches what --data lacks from the other peers (verified, resumable, relayed along the
// ring), then serves this peer's copy until every peer of the hosts file has the data.
// Run it on every host at once (tools/fleet does) after `prepare` ran on one of them;
// `train --hosts` does the same fetch by itself when its --data is incomplete, but only
// peers still in their data phase or already training serve then.
#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "cli/common_flags.h"
#include "cli/fetch_setup.h"
#include "cli/subcommand.h"
#include "core/log.h"

ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, hosts);

ABSL_FLAG(bool, serve, true,
          "fetch-data: once this peer has the data, keep serving it until every peer of the "
          "hosts file has it too (--serve=false: exit as soon as this peer has it)");

namespace rt::cli {
namespace {

int RunFetchData(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain fetch-data: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_hosts).empty() || absl::GetFlag(FLAGS_data).empty()) {
    std::fprintf(stderr, "ringtrain fetch-data: --hosts and --data are required\n");
    return 2;
  }
  absl::StatusOr<net::RingSetup> setup = RingSetupFromFlags(kTrainClusterId);
  absl::StatusOr<fetch::FetchPhaseOptions> o =
      setup.ok() ? FetchPhaseOptionsFrom(*setup, absl::GetFlag(FLAGS_data)) : setup.status();
  if (!o.ok()) {
    std::fprintf(stderr, "ringtrain fetch-data: %s\n", std::string(o.status().message()).c_str());
    return 2;
  }
  o->serve_until_all_complete = absl::GetFlag(FLAGS_serve);
  fetch::FetchReport report;
  absl::Status st = fetch::RunFetchPhase(*o, &report);
  if (report.bytes_fetched > 0 || !report.refusals.empty()) LogFetchReport(report);
  if (!st.ok()) {
    std::fprintf(stderr, "ringtrain fetch-data: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("data directory %s is complete\n", absl::GetFlag(FLAGS_data).c_str());
  return 0;
}

}  // namespace

const Subcommand& FetchDataSubcommand() {
  static const Subcommand sub{
      "fetch-data",
      "Fetch the prepared data directory from the peers that have it (and serve it to them)",
      "ringtrain fetch-data --hosts FILE --data DIR [--self HOST:PORT | --rank N]\n"
      "                     [--secret-file F] [--encrypt auto|on|off] [--fetch-wait 3600]\n"
      "                     [--serve=false]\n"
      "Run on every host at once, after `ringtrain prepare` on one of them. A peer whose\n"
      "--data is missing or incomplete fetches the manifest, the tokenizer and the shards\n"
      "over the ring's authenticated links (its hosts-file port), each file checked\n"
      "against the manifest; a fetch cut short resumes where it stopped. Peers fetch from\n"
      "their predecessor in the hosts file, which relays what it receives, so N peers take\n"
      "about the time of one copy. Then each serves until every peer has the data.\n"
      "`train --hosts` fetches by itself when its --data is incomplete.",
      {"data", "hosts", "self", "rank", "secret_file", "encrypt", "fetch_wait", "serve"},
      &RunFetchData};
  return sub;
}

}  // namespace rt::cli
