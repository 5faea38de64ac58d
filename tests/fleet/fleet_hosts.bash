# Sourced by the fleet tests: N "hosts" in network namespaces (tools/netns-cluster), each
# with its own sshd, its own /root (a directory of the test bind-mounted over it) and its
# own PID namespace (so `pkill -x ringtrain` there sees that host's peer alone, and killing
# its sshd ends everything the host runs), plus a client address on the hub's bridge from
# which tools/fleet drives them, as from the user's own machine. Root only.
#
#   FH_HIDE+=(DIR...)           # optional: directories the hosts must not see
#   fleet_hosts_up N WORKDIR    # sets FLEET_SSH_OPTS (array), FH_CLIENT (command prefix)
#   fh_ssh I CMD...; fh_scp SCP-ARGS... (host I is root@10.77.0.(I+1), port FH_SSH_PORT)
#   fleet_hosts_down            # kills the sshds (and all their hosts run), removes the cluster
# The sshd config is the test's own (port 2222, a fresh host key, one authorized key,
# AcceptEnv PSSH_*); nothing of the machine's ssh configuration is read or changed.

FH_SSH_PORT=2222
FH_PIDS=()
# Directories each host sees empty (a tmpfs over them in its mount namespace), e.g. the
# build tree, so a host has only what was pushed to it; and /run/systemd, so that a host
# is one without systemd (tools/fleet start then runs the peer detached) whatever this
# machine runs.
FH_HIDE=(/run/systemd)
FH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

fleet_hosts_up() {
  local n=$1 work=$2 i
  FH_WORK=$work
  mkdir -p "$work/ssh"
  ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host_key" -C fleet-test-host
  ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/user_key" -C fleet-test-user
  cp "$work/ssh/user_key.pub" "$work/ssh/authorized_keys"
  cat >"$work/ssh/sshd_config" <<CFG
Port $FH_SSH_PORT
ListenAddress 0.0.0.0
HostKey $work/ssh/host_key
AuthorizedKeysFile $work/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AcceptEnv PSSH_*
PidFile none
Subsystem sftp internal-sftp
CFG
  # sshd's privilege-separation directory (its package's service makes it at boot).
  mkdir -p /run/sshd
  "$FH_REPO/tools/netns-cluster" up "$n" --rate none >/dev/null
  ip -n "${RT_NETNS_PREFIX}hub" addr add 10.77.0.254/24 dev br0
  for ((i = 0; i < n; i++)); do
    mkdir -p "$work/host$i"
    # shellcheck disable=SC2016  # $1, $2 and $@ are the inner bash's arguments
    ip netns exec "${RT_NETNS_PREFIX}$i" unshare --mount --propagation private --pid --fork \
      --mount-proc --kill-child bash -c '
        mount --bind "$1" /root || exit 1
        conf=$2
        shift 2
        for d in "$@"; do
          [[ ! -d $d ]] || mount -t tmpfs -o size=1m,mode=755 hidden-by-fleet-test "$d" || exit 1
        done
        exec /usr/sbin/sshd -D -e -f "$conf"' \
      fleet-host "$work/host$i" "$work/ssh/sshd_config" "${FH_HIDE[@]}" >"$work/sshd$i.log" 2>&1 &
    FH_PIDS+=("$!")
  done
  # shellcheck disable=SC2034  # used by the sourcing test
  FLEET_SSH_OPTS=(--ssh-opt "IdentityFile=$work/ssh/user_key"
    --ssh-opt "UserKnownHostsFile=$work/ssh/known_hosts" --ssh-opt StrictHostKeyChecking=accept-new
    --ssh-opt IdentitiesOnly=yes)
  FH_CLIENT=(ip netns exec "${RT_NETNS_PREFIX}hub")
  # Wait until every sshd answers.
  for ((i = 0; i < n; i++)); do
    local k
    for ((k = 0; k < 50; k++)); do
      fh_ssh "$i" true 2>/dev/null && break
      sleep 0.2
    done
    fh_ssh "$i" true || { echo "sshd of host $i does not answer:"; cat "$work/sshd$i.log"; return 1; }
  done
}

# fh_ssh I CMD...: run CMD on host I over ssh, from the client address.
fh_ssh() {
  local i=$1
  shift
  "${FH_CLIENT[@]}" ssh -o BatchMode=yes -o IdentityFile="$FH_WORK/ssh/user_key" -o IdentitiesOnly=yes \
    -o UserKnownHostsFile="$FH_WORK/ssh/known_hosts" -o StrictHostKeyChecking=accept-new \
    -p "$FH_SSH_PORT" "root@10.77.0.$((i + 1))" "$@"
}

# fh_scp ARGS...: scp from the client address (remote paths as root@10.77.0.N:PATH).
fh_scp() {
  "${FH_CLIENT[@]}" scp -q -o BatchMode=yes -o IdentityFile="$FH_WORK/ssh/user_key" \
    -o IdentitiesOnly=yes -o UserKnownHostsFile="$FH_WORK/ssh/known_hosts" \
    -o StrictHostKeyChecking=accept-new -P "$FH_SSH_PORT" "$@"
}

fleet_hosts_down() {
  local pid sock
  # The ssh connections tools/fleet keeps open (ControlPersist), by their sockets.
  for sock in "$FH_WORK"/cm-*; do
    [[ -S $sock ]] && ssh -S "$sock" -O exit fleet-host >/dev/null 2>&1
  done
  # Killing a host's unshare kills its sshd (--kill-child), the PID namespace's first
  # process: the kernel then kills everything the host runs.
  for pid in "${FH_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${FH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  FH_PIDS=()
  "$FH_REPO/tools/netns-cluster" down >/dev/null 2>&1 || true
}
