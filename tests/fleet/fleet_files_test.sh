#!/usr/bin/env bash
# tools/fleet's input checks, without any host: the inventory against the hosts file
# (count, order, the ring's hosts file given as the inventory), their syntax, the flag
# file and the secret (missing, short, readable by others), grow of a host already in the
# fleet, shrink of one not in it. Each case must fail with exit 2 and a message naming the
# file and line, or the host. Seconds; no root. Exits 77 without parallel-ssh (tools/fleet needs it to start).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
command -v parallel-ssh >/dev/null || { echo "SKIP: no parallel-ssh (apt-get install pssh)"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
failures=0

# expect_error WANT ARGS...: tools/fleet ARGS must exit 2 with WANT (a grep -E pattern)
# in its message.
expect_error() {
  local want=$1 rc=0
  shift
  "$REPO/tools/fleet" "$@" >out.txt 2>&1 || rc=$?
  if [[ $rc != 2 ]] || ! grep -qE -- "$want" out.txt; then
    echo "FAIL: tools/fleet $* -> exit $rc, wanted exit 2 and /$want/:"
    sed 's/^/    /' out.txt
    failures=$((failures + 1))
  else
    echo "ok: tools/fleet $* -> $(head -n 1 out.txt)"
  fi
}

# Loopback only: the ssh targets are ports nothing listens on (connection refused).
printf 'root@127.0.0.1:36001\nroot@127.0.0.2:36002\n' >inventory
printf '# ring\n127.0.0.1:29500\n127.0.0.2\n' >hosts
printf -- '--data=data\n--ckpt-dir=ckpt\n--global-batch=64\n' >train.flags
(umask 077 && echo 0123456789abcdef0123 >secret)

# expect_ssh_failure NAME WANT ARGS...: the input checks pass, the first ssh fails (no
# sshd there): exit 1, naming each host as WANT says. Proves the cases below fail for
# their own reason, not for the files they share.
expect_ssh_failure() {
  local name=$1 want=$2 rc=0
  shift 2
  "$REPO/tools/fleet" --ssh-opt ControlMaster=no "$@" status >out.txt 2>&1 || rc=$?
  if [[ $rc != 1 ]] || ! grep -qE -- "$want" out.txt; then
    echo "FAIL: $name: exit $rc, wanted 1 and /$want/"
    sed 's/^/    /' out.txt
    failures=$((failures + 1))
  else
    echo "ok: $name: $(grep -E -- "$want" out.txt | head -n 1)"
  fi
}
expect_ssh_failure "consistent files" "^  root@127.0.0.2:36002 \(ring 127.0.0.2:29500\): status: .*refused"
printf 'root@127.0.0.1:36001 127.0.0.3\n' >private
printf '127.0.0.3:29501\n' >private-hosts
expect_ssh_failure "ring address in the inventory" "^  root@127.0.0.1:36001 \(ring 127.0.0.3:29501\): status:" \
  -i private -H private-hosts

printf '127.0.0.1:29500\n127.0.0.2:29500\n' >ring-as-inventory
expect_error "ring-as-inventory:1: ssh port 29500 is a ring port: is this the ring's hosts file" \
  -i ring-as-inventory status
printf 'root@127.0.0.1:36001\n' >short
expect_error "hosts:3 \(127.0.0.2:29500\) has no ssh target: the inventory short lists 1 hosts, the hosts file 2" \
  -i short status
printf 'root@127.0.0.2:36002\nroot@127.0.0.1:36001\n' >swapped
expect_error "swapped:1 \(127.0.0.2\) and hosts:2 \(127.0.0.1:29500\) name different hosts" -i swapped status
printf 'root@127.0.0.1\nroot@127.0.0.2\nroot@127.0.0.3\n' >long
expect_error "long:3 \(127.0.0.3\) has no line in the hosts file" -i long status
printf 'root@[2001:db8::1]:22\n' >v6
expect_error "v6:1: .*parallel-ssh cannot take IPv6" -i v6 status
printf '127.0.0.1:29500\n127.0.0.1:29500\n' >dup
expect_error "dup:2: 127.0.0.1:29500 is already on line 1" -H dup status
printf '127.0.0.1:99999\n' >badport
expect_error "badport:1: port 99999 is not in 1..65535" -H badport status
# shellcheck disable=SC2088  # the literal ~ is the point: tools/fleet must refuse it
expect_error "-d ~/x: use letters" -d '~/x' status

printf -- '--data=data\n--hosts=other\n--ckpt-dir=c\n--global-batch=8\n' >own.flags
expect_error "own.flags:2: --hosts is set by tools/fleet" push --flags own.flags
printf -- '--data=data\n--ckpt-dir=c\n' >nogb.flags
expect_error "nogb.flags: no --global-batch=... line" push --flags nogb.flags
chmod 644 secret
expect_error "secret is readable by others \(mode 644\): chmod 600 secret" push
chmod 600 secret
expect_error "cannot read the secret no-secret: No such file or directory; make one with .*openssl rand" \
  push --secret no-secret
(umask 077 && echo short >short-secret)
expect_error "short-secret: the secret must be at least 16 characters" push --secret short-secret
expect_error "cannot read the flag file no.flags: No such file" push --flags no.flags
printf -- '--data=data\ndata=x\n' >typo.flags
expect_error "typo.flags:2: 'data=x' is not a flag \(--name=value, one a line\)" push --flags typo.flags
expect_error "fleet grow: root@127.0.0.2:36002 \(ring 127.0.0.2:29500\) is already in the fleet" \
  grow root@127.0.0.2:36002
expect_error "'root@127.0.0.9' names 0 hosts of the fleet" shrink root@127.0.0.9
expect_error "push: give --binary or --release, not both" push --binary x --release y
expect_error "push: missing-file is not a file" push --binary missing-file
mkdir not-prepared
expect_error "push --data not-prepared: no manifest.txt there" push --data not-prepared

# The systemd unit `start` writes (tools/ringtrain.service with this fleet's paths), as
# systemd would read it, where systemd-analyze exists.
if command -v systemd-analyze >/dev/null; then
  mkdir -p unit/bin
  cp /bin/true unit/bin/ringtrain
  python3 - "$REPO/tools/fleet" "$W/unit" >unit/ringtrain.service <<'PY'
import importlib.machinery, sys, types
loader = importlib.machinery.SourceFileLoader("fleet", sys.argv[1])
fleet = types.ModuleType(loader.name)
fleet.__file__ = sys.argv[1]
loader.exec_module(fleet)
print(fleet.unit_template().replace("@DIR@", sys.argv[2]).replace("@USER@", "root"), end="")
PY
  if out=$(systemd-analyze verify unit/ringtrain.service 2>&1) && [[ -z $out ]] &&
    grep -qx "ExecStart=$W/unit/bin/ringtrain train --flagfile=$W/unit/train.flags,$W/unit/fleet.flags" unit/ringtrain.service &&
    grep -qx "KillSignal=SIGTERM" unit/ringtrain.service; then
    echo "ok: the systemd unit passes systemd-analyze verify"
  else
    echo "FAIL: the systemd unit: $out"
    cat unit/ringtrain.service
    failures=$((failures + 1))
  fi
fi

if ((failures)); then
  echo "$failures case(s) failed"
  exit 1
fi
echo PASS
