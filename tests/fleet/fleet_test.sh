#!/usr/bin/env bash
# tools/fleet end to end: 4 hosts in network namespaces, each with its own sshd, its own
# /root and its own PID namespace (tests/fleet/fleet_hosts.bash), driven over ssh from an
# address on the hub as from the user's own machine:
#   check (3 hosts, every ring-port pair) -> push --binary --data -> start -> status (3 of
#   3 training) -> grow to 4 -> stop (one step, one param_hash, a checkpoint) -> start
#   again (resumes after the checkpoint's step; before, a peer that cannot start is named
#   with its log lines) -> shrink to 3 (the removed peer leaves,
#   exit 0) -> stop (one step, one param_hash); plus `check` naming a pair whose ring
#   port is blocked (a routing rule), and `logs`.
#
#   tests/fleet/fleet_test.sh [BINARY] [PUSH-SOURCE-OPTION]
#     BINARY: the ringtrain to push (default build/ringtrain); PUSH-SOURCE-OPTION:
#     --binary (default) or --release (BINARY is then a release tarball).
# Root only; exits 77 (ctest SKIP_RETURN_CODE) with the reason when not root or without
# ip netns, sshd or parallel-ssh. Bounded: every fleet command has its own timeout and the
# whole test stops after $FLEET_TEST_TIMEOUT s (default 270); everything it made is removed
# (FLEET_TEST_KEEP=1 keeps the hosts' directories of a failed run).
set -Eeuo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$(realpath "${1:-$REPO/build/ringtrain}")
SRC_OPT=${2:---binary}

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, sshd)"
ip netns list >/dev/null 2>&1 || skip "no ip netns (iproute2)"
[[ -x /usr/sbin/sshd ]] || skip "no /usr/sbin/sshd (openssh-server)"
for tool in ssh ssh-keygen parallel-ssh parallel-scp parallel-rsync rsync python3 unshare; do
  command -v "$tool" >/dev/null || skip "no $tool (tools/install-deps --test installs it)"
done
[[ -f $SRC ]] || { echo "FAIL: no $SRC to push (build first)"; exit 1; }

export RT_NETNS_PREFIX=${RT_NETNS_PREFIX:-fl}
export RT_NETNS_DIR=/tmp/ringtrain-netns-$RT_NETNS_PREFIX
W=$(mktemp -d /tmp/fleet-test.XXXXXX)
# shellcheck source=tests/fleet/fleet_hosts.bash
source "$REPO/tests/fleet/fleet_hosts.bash"
START_S=$SECONDS
cleanup() {
  local rc=$?
  set +e  # every step of the teardown runs, whatever fails (errexit holds in traps too)
  [[ -n ${WATCHDOG:-} ]] && kill "$WATCHDOG" 2>/dev/null
  fleet_hosts_down
  if [[ $rc != 0 && -n ${FLEET_TEST_KEEP:-} ]]; then echo "kept $W"; else rm -rf "$W"; fi
  echo "fleet test: $((SECONDS - START_S)) s, exit $rc"
}
trap cleanup EXIT
# The watchdog signals this script; its own sleep dies with it.
(
  trap 'kill $s 2>/dev/null; exit 0' TERM
  sleep "${FLEET_TEST_TIMEOUT:-270}" &
  s=$!
  wait $s && echo "FAIL: the test took more than ${FLEET_TEST_TIMEOUT:-270} s" && kill -TERM $$
) &
WATCHDOG=$!
trap 'exit 124' TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

fleet_hosts_up 4 "$W"
cd "$W"
fleet() {
  "${FH_CLIENT[@]}" "$REPO/tools/fleet" "${FLEET_SSH_OPTS[@]}" --ssh-opt "ControlPath=$W/cm-%C" "$@"
}

# The fleet's files, as a user writes them: hosts 0..2 first.
for i in 0 1 2; do echo "root@10.77.0.$((i + 1)):$FH_SSH_PORT"; done >inventory
{
  echo "# the ring, in rank order"
  for i in 0 1 2; do echo "10.77.0.$((i + 1)):29500"; done
} >hosts
(umask 077 && openssl rand -hex 32 >secret)
cat >train.flags <<'EOF'
--data=data
--ckpt-dir=ckpt
--ckpt-every=1000
--global-batch=12
--batch=2
--layers=2
--heads=2
--dim=64
--seq-len=32
--threads=1
--steps=1000000
--eval-every=0
--metrics=metrics.jsonl
--wait=60
EOF
head -c 300000 < <(zstd -dc "$REPO/third_party/vi-wiki-sample/vi-wiki-sample.txt.zst" 2>/dev/null) >corpus.txt
if [[ $SRC_OPT == --binary ]]; then prep=$SRC; else prep=$REPO/build/ringtrain; fi
"$prep" prepare --input corpus.txt --out prepared --vocab-size 512 --sample-mb 1 --threads 1 >/dev/null 2>&1 ||
  fail "prepare"

echo "=== [$((SECONDS - START_S)) s] check (3 hosts)"
fleet check --min-disk-gb 0.1 --listen-s 15 | tee out.txt
grep -q "all 6 peer pairs connect" out.txt || fail "check did not test all 6 pairs"

echo "=== [$((SECONDS - START_S)) s] check with host 2's ring port closed to host 1 (a routing rule on host 1)"
ip -n "${RT_NETNS_PREFIX}1" rule add to 10.77.0.3 ipproto tcp dport 29500 unreachable
if fleet check --min-disk-gb 0.1 --listen-s 15 >out.txt 2>&1; then
  cat out.txt
  fail "check passed with a blocked port"
fi
cat out.txt
grep -q "^FAIL root@10.77.0.2:$FH_SSH_PORT: cannot reach peer 10.77.0.3:29500 (rank 2" out.txt ||
  fail "check did not name the blocked pair 1 -> 2"
[[ $(grep -c "^FAIL" out.txt) == 1 ]] || fail "check named other pairs than 1 -> 2"
ip -n "${RT_NETNS_PREFIX}1" rule del to 10.77.0.3 ipproto tcp dport 29500 unreachable

echo "=== [$((SECONDS - START_S)) s] push $SRC_OPT"
fleet push "$SRC_OPT" "$SRC" --data prepared | tee out.txt
[[ $(grep -c "pushed" out.txt) == 3 ]] || fail "push did not report 3 hosts"
for i in 0 1 2; do
  d=$W/host$i/ringtrain
  [[ $(stat -c %a "$d/secret") == 600 ]] || fail "host $i: secret mode $(stat -c %a "$d/secret")"
  cmp -s "$d/secret" secret || fail "host $i: secret differs"
  cmp -s "$d/hosts" hosts || fail "host $i: hosts file differs"
  grep -qx -- "--self=10.77.0.$((i + 1)):29500" "$d/fleet.flags" || fail "host $i: no --self"
  cmp -s "$d/data/manifest.txt" prepared/manifest.txt || fail "host $i: data not copied"
done

echo "=== [$((SECONDS - START_S)) s] start"
fleet start --mode detached
# wait_ring N: until `status` says every host runs and N hosts train in one view.
wait_ring() {
  local k
  for ((k = 0; k < 40; k++)); do
    if fleet status >out.txt 2>&1 && grep -q "ring: training;.* $1 of $1 hosts in the view" out.txt; then
      cat out.txt
      return 0
    fi
    sleep 1
  done
  cat out.txt
  fleet logs -n 15 || true
  fail "the ring did not train with $1 peers"
}
wait_ring 3
for i in 0 1 2; do
  [[ $(fh_ssh "$i" 'pgrep -c -x ringtrain') == 1 ]] || fail "host $i: no process named ringtrain"
done

echo "=== [$((SECONDS - START_S)) s] grow to 4"
fleet grow "root@10.77.0.4:$FH_SSH_PORT" "$SRC_OPT" "$SRC" --data prepared --mode detached
[[ $(grep -c . inventory) == 4 && $(grep -c '^10\.' hosts) == 4 ]] || fail "grow did not edit both files"
wait_ring 4

# last_steps I...: "STEP HASH" of each listed peer's last metrics line.
last_steps() {
  local i
  for i in "$@"; do
    tail -n 1 "$W/host$i/ringtrain/metrics.rank$i.jsonl" |
      python3 -c 'import json,sys; m=json.loads(sys.stdin.read()); print(m["step"], m["param_hash"])'
  done
}

echo "=== [$((SECONDS - START_S)) s] stop"
fleet stop --timeout 60 | tee out.txt
[[ $(grep -c "stopped: ringtrain exited 0" out.txt) == 4 ]] || fail "not all 4 peers exited 0"
last_steps 0 1 2 3 | tee ends.txt
[[ $(sort -u ends.txt | wc -l) == 1 ]] || fail "the peers stopped at different steps or hashes"
stop_step=$(cut -d' ' -f1 <ends.txt | head -n 1)
grep -q "checkpoint step $stop_step" out.txt || fail "no checkpoint at the stop step $stop_step"
lines0=$(wc -l <"$W/host0/ringtrain/metrics.rank0.jsonl")

echo "=== [$((SECONDS - START_S)) s] start, one host with a wrong --self: named, with its log"
flags2=$W/host2/ringtrain/fleet.flags
sed -i 's/^--self=.*/--self=10.77.0.99:29500/' "$flags2"
if fleet start --mode detached --only "root@10.77.0.3:$FH_SSH_PORT" >out.txt 2>&1; then
  cat out.txt
  fail "start reported success for a peer that cannot start"
fi
cat out.txt
grep -q "^FAIL root@10.77.0.3:$FH_SSH_PORT: ringtrain exited within 3 s" out.txt || fail "start did not name host 2"
grep -q "10.77.0.99:29500.*is not in the hosts file" out.txt || fail "start did not show host 2's log"
[[ -z $(fh_ssh 2 'pgrep -x ringtrain; pgrep -f ringtrain-keep-runnin[g]' || true) ]] || fail "host 2 still runs ringtrain or its keeper"
sed -i 's/^--self=.*/--self=10.77.0.3:29500/' "$flags2"

echo "=== [$((SECONDS - START_S)) s] start again: resumes"
fleet start --mode detached
wait_ring 4
first=$(sed -n "$((lines0 + 1))p" "$W/host0/ringtrain/metrics.rank0.jsonl" |
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')
[[ $first == $((stop_step + 1)) ]] || fail "restarted at step $first, not $((stop_step + 1))"
echo "resumed at step $first after the checkpoint of step $stop_step"

echo "=== [$((SECONDS - START_S)) s] logs"
fleet logs -n 2 >out.txt
[[ $(grep -c "^=== root@" out.txt) == 4 ]] || fail "logs did not show 4 hosts"

echo "=== [$((SECONDS - START_S)) s] shrink to 3"
fleet shrink "root@10.77.0.4:$FH_SSH_PORT" --timeout 60 | tee out.txt
grep -q "root@10.77.0.4:$FH_SSH_PORT *left: .*ringtrain exited 0" out.txt || fail "the removed peer did not leave with exit 0"
[[ $(grep -c . inventory) == 3 && $(grep -c '^10\.' hosts) == 3 ]] || fail "shrink did not edit both files"
wait_ring 3

echo "=== [$((SECONDS - START_S)) s] stop"
fleet stop --timeout 60 | tee out.txt
[[ $(grep -c "stopped: ringtrain exited 0" out.txt) == 3 ]] || fail "not all 3 peers exited 0"
last_steps 0 1 2 | tee ends.txt
[[ $(sort -u ends.txt | wc -l) == 1 ]] || fail "the peers stopped at different steps or hashes"
(($(cut -d' ' -f1 <ends.txt | head -n 1) > stop_step)) || fail "no progress after the restart"
echo "PASS"
