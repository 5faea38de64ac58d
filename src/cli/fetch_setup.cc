// Ring flags -> data-phase options (see fetch_setup.h), and --fetch-wait.
#include "cli/fetch_setup.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "net/handshake.h"
#include "net/hosts_file.h"
#include "net/self_identity.h"

ABSL_FLAG(double, fetch_wait, 3600,
          "With --hosts: seconds a peer whose --data directory is missing or incomplete may "
          "spend fetching it from the other peers (fetch-data: also serving them until all "
          "have it)");

namespace rt::cli {

absl::StatusOr<fetch::FetchPhaseOptions> FetchPhaseOptionsFrom(const net::RingSetup& setup,
                                                               const std::string& data_dir) {
  const double wait_s = absl::GetFlag(FLAGS_fetch_wait);
  if (!(wait_s > 0) || wait_s > 30 * 86400) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--fetch-wait must be in (0, 2592000] seconds, got %g", wait_s));
  }
  if (data_dir.empty()) return absl::InvalidArgumentError("--data is required");
  ASSIGN_OR_RETURN(std::vector<net::HostEntry> hosts, net::LoadHostsFile(setup.hosts_path));
  ASSIGN_OR_RETURN(net::IdentityInputs inputs,
                   net::IdentityInputsFromEnvironment(setup.self, setup.rank));
  ASSIGN_OR_RETURN(net::SelfIdentity self, net::ResolveSelfIdentity(hosts, inputs));
  SetLogRank(self.rank);
  ASSIGN_OR_RETURN(const bool encrypt, net::ResolveEncrypt(setup.encrypt, hosts));
  ASSIGN_OR_RETURN(std::string secret, net::LoadSharedSecret(setup.secret_file, hosts, encrypt));
  fetch::FetchPhaseOptions o;
  o.dir = data_dir;
  o.hosts = std::move(hosts);
  o.self_rank = self.rank;
  o.secret = std::move(secret);
  o.encrypt = encrypt;
  o.cluster_id = kTrainClusterId;
  o.wait = absl::Seconds(wait_s);
  return o;
}

void LogFetchReport(const fetch::FetchReport& report) {
  std::vector<std::string> from;
  for (const auto& [source, bytes] : report.bytes_from) {
    from.push_back(absl::StrFormat("%.1f MB from %s", bytes / 1e6, source));
  }
  LogInfo("data fetch: %d files, %d bytes (%.1f MB) in %.2f s (%.1f MB/s)%s%s; %d refused",
          report.files_fetched, report.bytes_fetched, report.bytes_fetched / 1e6, report.seconds,
          report.seconds > 0 ? report.bytes_fetched / 1e6 / report.seconds : 0.0,
          from.empty() ? "" : ": ", absl::StrJoin(from, ", "), report.refusals.size());
}

}  // namespace rt::cli
