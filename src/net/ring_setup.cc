// JoinRing: hosts file, identity, secret, then TcpRing::Create.
#include "net/ring_setup.h"

#include "core/log.h"
#include "net/hosts_file.h"
#include "net/self_identity.h"

namespace rt::net {

absl::StatusOr<std::unique_ptr<TcpRing>> JoinRing(const RingSetup& setup) {
  absl::StatusOr<std::vector<HostEntry>> hosts = LoadHostsFile(setup.hosts_path);
  if (!hosts.ok()) return hosts.status();
  absl::StatusOr<IdentityInputs> inputs = IdentityInputsFromEnvironment(setup.self, setup.rank);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<SelfIdentity> self = ResolveSelfIdentity(*hosts, *inputs);
  if (!self.ok()) return self.status();
  SetLogRank(self->rank);
  LogInfo("this peer is rank %d of %d (%s, from %s)", self->rank, hosts->size(),
          (*hosts)[self->rank].Endpoint(), self->how);
  absl::StatusOr<bool> encrypt = ResolveEncrypt(setup.encrypt, *hosts);
  if (!encrypt.ok()) return encrypt.status();
  absl::StatusOr<std::string> secret = LoadSharedSecret(setup.secret_file, *hosts, *encrypt);
  if (!secret.ok()) return secret.status();
  if (secret->empty()) LogInfo("no shared secret: every host is loopback");
  LogInfo("links are %s (--encrypt %s)", *encrypt ? "sealed with AES-256-GCM" : "not encrypted",
          setup.encrypt);
  TcpRingOptions options;
  options.node.hosts = *std::move(hosts);
  options.node.self_rank = self->rank;
  options.node.secret = *std::move(secret);
  options.node.encrypt = *encrypt;
  options.node.cluster_id = setup.cluster_id;
  options.node.fingerprint = setup.fingerprint;
  options.order = setup.order;
  options.wait = setup.wait;
  return TcpRing::Create(options);
}

}  // namespace rt::net
