#!/usr/bin/env bash
# The README's tutorial, end to end, on 4 hosts in network namespaces, each with its own
# sshd, its own /root and its own PID namespace (tests/fleet/fleet_hosts.bash), driven
# over ssh from an address on the hub as from the user's own machine. The hosts get the
# release tarball (tools/release, of the binary given) and nothing else: the build tree
# and /run/systemd are hidden from them (a tmpfs over each), and a running peer is checked
# to map no library from outside its release. The steps, with the README's commands:
#   show -> check (3 hosts, every ring-port pair; and once more with one pair blocked by a
#   routing rule: that pair named) -> start before push (each host named) -> push --release -> the text copied to host 0 and
#   `prepare` run there with the release's binary (the only data anywhere) -> start (the
#   other peers fetch the data from their peers) -> status (3 of 3 training) -> grow to 4
#   (the new peer fetches too; all four hold identical data) -> stop (one step, one
#   param_hash, a checkpoint) -> start with a wrong --self on one host (named, with its
#   log) -> start again (resumes at the stop step + 1) -> logs -> shrink to 3 (the removed
#   peer leaves, exit 0) -> stop -> export --format gguf on the leader, copied home and
#   read back by a GGUF reader of this test (header, metadata, every tensor inside the file).
# Differences from the README: a tiny model and corpus, ssh on port 2222 with the test's
# key, addresses 10.77.0.N for ssh and ring alike, check's free-disk threshold lowered.
#
#   tests/fleet/fleet_test.sh RINGTRAIN_BINARY
# The tarball is cached by content (tests/release/release_tarball.bash). Root only; exits
# 77 (ctest SKIP_RETURN_CODE) with the reason when not root or without ip netns, sshd or
# parallel-ssh. Bounded: every fleet command has its own timeout and the whole test stops
# after $FLEET_TEST_TIMEOUT s (default 420); everything it made is removed
# (FLEET_TEST_KEEP=1 keeps the hosts' directories of a failed run).
set -Eeuo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BINARY=$(realpath "${1:-$REPO/build/ringtrain}")

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, sshd)"
ip netns list >/dev/null 2>&1 || skip "no ip netns (iproute2)"
[[ -x /usr/sbin/sshd ]] || skip "no /usr/sbin/sshd (openssh-server)"
for tool in ssh scp ssh-keygen parallel-ssh parallel-scp parallel-rsync rsync python3 unshare; do
  command -v "$tool" >/dev/null || skip "no $tool (tools/install-deps --test installs it)"
done
[[ -x $BINARY ]] || { echo "FAIL: no $BINARY to make the release of (build first)"; exit 1; }

export RT_NETNS_PREFIX=${RT_NETNS_PREFIX:-fl}
export RT_NETNS_DIR=/tmp/ringtrain-netns-$RT_NETNS_PREFIX
W=$(mktemp -d /tmp/fleet-test.XXXXXX)
# shellcheck source=tests/fleet/fleet_hosts.bash
source "$REPO/tests/fleet/fleet_hosts.bash"
# shellcheck source=tests/release/release_tarball.bash
source "$REPO/tests/release/release_tarball.bash"
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
  sleep "${FLEET_TEST_TIMEOUT:-420}" &
  s=$!
  wait $s && echo "FAIL: the test took more than ${FLEET_TEST_TIMEOUT:-420} s" && kill -TERM $$
) &
WATCHDOG=$!
trap 'exit 124' TERM

fail() {
  echo "FAIL: $*"
  exit 1
}
step() { echo "=== [$((SECONDS - START_S)) s] $*"; }

step "the release tarball"
tarball=$(release_tarball "$BINARY") || fail "tools/release"
cp "$tarball" "$W/"

# The hosts see neither this repository nor the binary's directory.
FH_HIDE+=("$(dirname "$BINARY")" "$REPO")
fleet_hosts_up 4 "$W"
cd "$W"
fleet() {
  "${FH_CLIENT[@]}" "$REPO/tools/fleet" "${FLEET_SSH_OPTS[@]}" --ssh-opt "ControlPath=$W/cm-%C" "$@"
}
for i in 0 1 2 3; do
  fh_ssh "$i" "test ! -e '$REPO/tools/fleet' && test ! -e '$BINARY' && test ! -e ringtrain" ||
    fail "host $i sees the repository, the build or a fleet directory"
done

# README step 1: the two fleet files (hosts 0..2 first).
for i in 0 1 2; do echo "root@10.77.0.$((i + 1)):$FH_SSH_PORT"; done >inventory
for i in 0 1 2; do echo "10.77.0.$((i + 1)):29500"; done >hosts
# Step 3: the secret and the flag file (a tiny model), then show.
(umask 077 && openssl rand -hex 32 >secret)
cat >train.flags <<'EOF'
--data=data
--ckpt-dir=ckpt
--layers=2
--heads=2
--dim=64
--seq-len=32
--batch=2
--global-batch=12
--steps=1000000
--threads=1
--eval-every=0
--metrics=metrics.jsonl
--wait=60
EOF
step "show"
fleet show | tee out.txt
grep -q "^3 peers" out.txt || fail "show did not list 3 peers"

step "check (3 hosts)"
fleet check --min-disk-gb 0.1 | tee out.txt
grep -q "all 6 peer pairs connect" out.txt || fail "check did not test all 6 pairs"

step "check with host 2's ring port closed to host 1 (a routing rule on host 1)"
ip -n "${RT_NETNS_PREFIX}1" rule add to 10.77.0.3 ipproto tcp dport 29500 unreachable
if fleet check --min-disk-gb 0.1 >out.txt 2>&1; then
  cat out.txt
  fail "check passed with a blocked port"
fi
cat out.txt
grep -q "^FAIL root@10.77.0.2:$FH_SSH_PORT: cannot reach peer 10.77.0.3:29500 (rank 2" out.txt ||
  fail "check did not name the blocked pair 1 -> 2"
[[ $(grep -c "^FAIL" out.txt) == 1 ]] || fail "check named other pairs than 1 -> 2"
ip -n "${RT_NETNS_PREFIX}1" rule del to 10.77.0.3 ipproto tcp dport 29500 unreachable

step "start before push: every host named, told to push"
if fleet start >out.txt 2>&1; then
  cat out.txt
  fail "start succeeded on hosts that have nothing yet"
fi
cat out.txt
[[ $(grep -c "^FAIL root@10.77.0.[123]:$FH_SSH_PORT: /root/ringtrain/bin/ringtrain is missing: run push first" out.txt) == 3 ]] ||
  fail "start before push did not name the 3 hosts"

# Step 5: push the release; the text to one host, prepared there.
step "push --release $(basename "$tarball")"
fleet push --release ringtrain-*-linux-x86_64.tar.gz | tee out.txt
[[ $(grep -c "pushed the release, hosts, train.flags, secret (600), self .*; no data at data yet" out.txt) == 3 ]] ||
  fail "push did not report 3 hosts without data"
for i in 0 1 2; do
  d=$W/host$i/ringtrain
  [[ $(stat -c %a "$d/secret") == 600 ]] || fail "host $i: secret mode $(stat -c %a "$d/secret")"
  cmp -s "$d/secret" secret || fail "host $i: secret differs"
  cmp -s "$d/hosts" hosts || fail "host $i: hosts file differs"
  grep -qx -- "--self=10.77.0.$((i + 1)):29500" "$d/fleet.flags" || fail "host $i: no --self"
  [[ $(readlink "$d/bin/ringtrain") == ../release/ringtrain-*-linux-x86_64/ringtrain ]] ||
    fail "host $i: bin/ringtrain is not the release's launcher"
done

step "prepare on host 0 only, with the release's ringtrain"
mkdir my-text
head -c 300000 < <(zstd -dc "$REPO/third_party/vi-wiki-sample/vi-wiki-sample.txt.zst" 2>/dev/null) >my-text/wiki.txt
fh_scp -r my-text root@10.77.0.1:
fh_ssh 0 'cd ringtrain && bin/ringtrain prepare --input ~/my-text --out data --vocab-size 512 --sample-mb 1 --threads 1 --license "CC BY-SA 4.0 (Vietnamese Wikipedia)"' >out.txt 2>&1 ||
  { cat out.txt; fail "prepare on host 0"; }
tail -n 2 out.txt
[[ -f host0/ringtrain/data/manifest.txt ]] || fail "prepare wrote no manifest on host 0"
for i in 1 2; do [[ ! -e host$i/ringtrain/data ]] || fail "host $i has data before start"; done

step "start (hosts 1 and 2 fetch the data)"
fleet start | tee out.txt
[[ $(grep -c "started detached" out.txt) == 3 ]] || fail "start did not start 3 peers detached"
# wait_ring N: until `status` says every host runs and N hosts train in one view; LEADER
# is then the leader's host index.
wait_ring() {
  local k t0=$SECONDS
  for ((k = 0; k < 60; k++)); do
    if fleet status >out.txt 2>&1 && grep -q "ring: training;.* $1 of $1 hosts in the view" out.txt; then
      cat out.txt
      echo "($((k + 1)) status calls, $((SECONDS - t0)) s)"
      LEADER=$(sed -n 's/^ring: .*leader 10\.77\.0\.\([0-9]*\):29500).*/\1/p' out.txt)
      [[ $LEADER =~ ^[0-9]+$ ]] || fail "status names no leader"
      LEADER=$((LEADER - 1))
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
# The data: fetched by hosts 1 and 2 (the log says from whom), identical to host 0's.
same_data() {
  local i
  for i in "$@"; do
    grep -q "data fetch: manifest from 10\.77\.0\.[0-9]*:29500" "host$i/ringtrain/ringtrain.log" ||
      fail "host $i's log does not say it fetched the data"
    diff -r host0/ringtrain/data "host$i/ringtrain/data" >/dev/null ||
      fail "host $i's data differs from host 0's"
  done
  echo "hosts $* fetched the data host 0 prepared: identical ($(find host0/ringtrain/data -type f | wc -l) files)"
}
same_data 1 2
# What a peer runs is the release alone: every library mapped comes from it.
# shellcheck disable=SC2016  # run by the host's shell
maps=$(fh_ssh 1 'awk '\''$6 ~ /\.so/ {print $6}'\'' /proc/$(cat ringtrain/ringtrain.pid)/maps | sort -u')
(($(wc -l <<<"$maps") >= 10)) || fail "host 1's peer maps too few libraries to check: $maps"
outside=$(grep -v "^/root/ringtrain/release/ringtrain-[^/]*-linux-x86_64/lib/" <<<"$maps" || true)
[[ -z $outside ]] || fail "host 1's peer mapped libraries from outside the release: $outside"
echo "host 1's peer maps $(wc -l <<<"$maps") libraries, all from its release"

step "grow to 4 (host 3 fetches the data from the running ring)"
fleet grow "root@10.77.0.4:$FH_SSH_PORT" 10.77.0.4:29500 --release ringtrain-*-linux-x86_64.tar.gz
[[ $(grep -c . inventory) == 4 && $(grep -c '^10\.' hosts) == 4 ]] || fail "grow did not edit both files"
wait_ring 4
same_data 3

# last_steps I...: "STEP HASH" of each listed peer's last metrics line.
last_steps() {
  local i
  for i in "$@"; do
    tail -n 1 "$W/host$i/ringtrain/metrics.rank$i.jsonl" |
      python3 -c 'import json,sys; m=json.loads(sys.stdin.read()); print(m["step"], m["param_hash"])'
  done
}

step "stop"
fleet stop | tee out.txt
[[ $(grep -c "stopped: ringtrain exited 0" out.txt) == 4 ]] || fail "not all 4 peers exited 0"
last_steps 0 1 2 3 | tee ends.txt
[[ $(sort -u ends.txt | wc -l) == 1 ]] || fail "the peers stopped at different steps or hashes"
stop_step=$(cut -d' ' -f1 <ends.txt | head -n 1)
# The README: "two of them write a checkpoint" (the leader and its ring successor).
[[ $(grep -c "checkpoint step $stop_step" out.txt) == 2 ]] || fail "not 2 checkpoints of the stop step $stop_step"
lines0=$(wc -l <"$W/host0/ringtrain/metrics.rank0.jsonl")

step "start, one host with a wrong --self: named, with its log"
flags2=$W/host2/ringtrain/fleet.flags
sed -i 's/^--self=.*/--self=10.77.0.99:29500/' "$flags2"
if fleet start --only "root@10.77.0.3:$FH_SSH_PORT" >out.txt 2>&1; then
  cat out.txt
  fail "start reported success for a peer that cannot start"
fi
cat out.txt
grep -q "^FAIL root@10.77.0.3:$FH_SSH_PORT: ringtrain exited within 3 s" out.txt || fail "start did not name host 2"
grep -q "10.77.0.99:29500.*is not in the hosts file" out.txt || fail "start did not show host 2's log"
[[ -z $(fh_ssh 2 'pgrep -x ringtrain; pgrep -f ringtrain-keep-runnin[g]' || true) ]] || fail "host 2 still runs ringtrain or its keeper"
sed -i 's/^--self=.*/--self=10.77.0.3:29500/' "$flags2"

step "start again: resumes"
fleet start
wait_ring 4
first=$(sed -n "$((lines0 + 1))p" "$W/host0/ringtrain/metrics.rank0.jsonl" |
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')
[[ $first == $((stop_step + 1)) ]] || fail "restarted at step $first, not $((stop_step + 1))"
echo "resumed at step $first after the checkpoint of step $stop_step"

step "logs"
fleet logs -n 2 >out.txt
[[ $(grep -c "^=== root@" out.txt) == 4 ]] || fail "logs did not show 4 hosts"

step "shrink to 3"
fleet shrink "root@10.77.0.4:$FH_SSH_PORT" --timeout 60 | tee out.txt
grep -q "root@10.77.0.4:$FH_SSH_PORT *left: .*ringtrain exited 0" out.txt || fail "the removed peer did not leave with exit 0"
[[ $(grep -c . inventory) == 3 && $(grep -c '^10\.' hosts) == 3 ]] || fail "shrink did not edit both files"
wait_ring 3

step "stop"
fleet stop | tee out.txt
[[ $(grep -c "stopped: ringtrain exited 0" out.txt) == 3 ]] || fail "not all 3 peers exited 0"
last_steps 0 1 2 | tee ends.txt
[[ $(sort -u ends.txt | wc -l) == 1 ]] || fail "the peers stopped at different steps or hashes"
end_step=$(cut -d' ' -f1 <ends.txt | head -n 1)
((end_step > stop_step)) || fail "no progress after the restart"

# Step 10: export on the leader (the last status named it), copy the file home.
step "export --format gguf on the leader, host $LEADER"
fh_ssh "$LEADER" 'cd ringtrain && bin/ringtrain export --ckpt ckpt --out model.gguf --format gguf' >out.txt 2>&1 ||
  { cat out.txt; fail "export on host $LEADER"; }
tail -n 1 out.txt
fh_scp "root@10.77.0.$((LEADER + 1)):ringtrain/model.gguf" .
# A GGUF reader of its own (the format: magic, version, metadata, tensor table, data at
# the alignment): the metadata must carry this run's model, step and licence, and every
# tensor's bytes must lie inside the file, which ends with the last tensor.
python3 - model.gguf "$end_step" <<'PY' || fail "model.gguf is not the GGUF of this run"
import struct, sys
buf = open(sys.argv[1], "rb").read()
pos = 0
def take(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, buf, pos)
    pos += struct.calcsize("<" + fmt)
    return v[0]
def string():
    global pos
    n = take("Q")
    s = buf[pos:pos + n].decode("utf-8")
    pos += n
    return s
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def value(t):
    if t == 8:
        return string()
    if t == 9:
        et, n = take("I"), take("Q")
        return [value(et) for _ in range(n)]
    return take(SCALAR[t])
assert buf[:4] == b"GGUF", f"magic {buf[:4]!r}"
pos = 4
version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
assert version == 3, f"version {version}"
kv = {}
for _ in range(n_kv):
    k = string()
    kv[k] = value(take("I"))
tensors = []
for _ in range(n_tensors):
    name = string()
    dims = [take("Q") for _ in range(take("I"))]
    tensors.append((name, dims, take("I"), take("Q")))
align = kv.get("general.alignment", 32)
data = (pos + align - 1) // align * align
size = {0: 4, 1: 2, 30: 2}  # F32, F16, BF16 bytes per element
end = 0
for name, dims, t, off in tensors:
    n = 1
    for d in dims:
        n *= d
    assert off % align == 0 and data + off + n * size[t] <= len(buf), f"{name} outside the file"
    end = max(end, data + off + n * size[t])
assert len(buf) - end < align, f"{len(buf) - end} bytes after the last tensor"
checks = {"general.architecture": "gpt2", "gpt2.block_count": 2, "gpt2.embedding_length": 64,
          "gpt2.context_length": 32, "ringtrain.step": int(sys.argv[2]),
          "ringtrain.data.license": "CC BY-SA 4.0 (Vietnamese Wikipedia)"}
for k, want in checks.items():
    assert kv.get(k) == want, f"{k} = {kv.get(k)!r}, want {want!r}"
assert len(kv["tokenizer.ggml.tokens"]) == 512, "not the 512-piece vocabulary"
assert n_tensors == 4 + 12 * 2, f"{n_tensors} tensors for 2 layers"
print(f"model.gguf: GGUF v3, {n_tensors} tensors, {len(kv)} metadata keys, step "
      f"{kv['ringtrain.step']}, {len(buf)} bytes")
PY
echo "PASS"
