# The bash scripts tools/fleet runs on each host (through `bash -c SCRIPT fleet ARGS`).
#
# Every script starts with PRELUDE: $1 is the fleet's directory on the host (relative =
# under the login's $HOME, resolved there: no `~` ever passes through a local shell).
# Scripts print key=value lines for tools/fleet to read and end with `fleet-rc=N`.
# Files in that directory:
#   bin/ringtrain, bin/ringtrain-keep-running   the binary (or a link into release/)
#   hosts, secret (0600), train.flags            identical on every host
#   fleet.flags                                  this host's own: --hosts, --secret-file
#                                                (absolute paths) and --self HOST:PORT
#   start-mode                                   systemd | detached (how it was started)
#   ringtrain.pid, keeper.pid, ringtrain.log     the detached run's processes and log

PRELUDE = r'''
set -u
D=$1
shift
case $D in /*) ;; *) D=$HOME/$D ;; esac
finish() { echo "fleet-rc=$1"; exit 0; }
# pid_named FILE NAME: the pid in FILE if that process is alive and named NAME.
pid_named() {
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  [[ $p =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$2" ]] || return 1
  echo "$p"
}
keeper_pid() {
  local p
  p=$(cat "$D/keeper.pid" 2>/dev/null) || return 1
  [[ $p =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null |
    grep -q ringtrain-keep-running || return 1
  echo "$p"
}
start_mode() { cat "$D/start-mode" 2>/dev/null || echo none; }
# The running peer's pid (systemd's main pid, or the detached run's pid file).
running_pid() {
  local p
  if [[ $(start_mode) == systemd ]]; then
    p=$(systemctl show -p MainPID --value ringtrain 2>/dev/null)
    [[ -n $p && $p != 0 ]] || return 1
    echo "$p"
  else
    pid_named "$D/ringtrain.pid" ringtrain
  fi
}
log_tail() {  # log_tail N: the peer's last N log lines
  if [[ $(start_mode) == systemd ]]; then
    journalctl -u ringtrain -n "$1" -o cat --no-pager 2>&1
  else
    tail -n "$1" "$D/ringtrain.log" 2>/dev/null
  fi
}
'''

FACTS = PRELUDE + r'''
echo "user=$(id -un)"
echo "uid=$(id -u)"
echo "cores=$(nproc)"
awk '/^MemTotal:/ {print "mem_total_kb=" $2} /^MemAvailable:/ {print "mem_avail_kb=" $2}' /proc/meminfo
if mkdir -p "$D" 2>/dev/null && [[ -w $D ]]; then echo dir_ok=1; else echo dir_ok=0; fi
echo "dir=$D"
echo "disk_free_kb=$(df -Pk "$D" 2>/dev/null | awk 'NR == 2 {print $4}')"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
case $flags in
*" amx_bf16 "*) path="amx_bf16 (bf16 native)" ;;
*" avx512_bf16 "*) path="avx512_bf16 (bf16 native)" ;;
*" avx512f "*) path="avx512 (fp32; bf16 emulated)" ;;
*" avx2 "*) path="avx2 (fp32 only)" ;;
*) path="no avx2 (portable kernels, slow)" ;;
esac
echo "cpu_path=$path"
echo "cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
if [[ -x $D/bin/ringtrain ]]; then
  if v=$("$D/bin/ringtrain" --version 2>&1); then
    echo "ringtrain_version=$(echo "$v" | tr '\n' ' ')"
  else
    echo "ringtrain_version=none (this build has no --version)"
  fi
fi
echo "glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
for t in python3 rsync systemctl; do
  if command -v "$t" >/dev/null; then echo "has_$t=1"; else echo "has_$t=0"; fi
done
if [[ -d /run/systemd/system ]]; then echo systemd=1; else echo systemd=0; fi
echo "running=$(running_pid || true)"
echo "clock=$(date +%s.%N)"
finish 0
'''

# LISTEN: $1 = the ring port, $2 = seconds to listen, $3 = LISTENER_PY. Listens on every address (the ring address
# may be a public one mapped to this host by NAT) unless ringtrain already holds the port.
LISTENER_PY = r'''
import socket, sys, time
port, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
try:
    if socket.has_dualstack_ipv6():
        s = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    else:
        s = socket.create_server(("", port))
except OSError as e:
    print("error: cannot listen on port %d: %s" % (port, e.strerror), flush=True)
    sys.exit(1)
print("listening", flush=True)
while time.time() < end:
    s.settimeout(max(0.1, end - time.time()))
    try:
        c, _ = s.accept()
        c.close()
    except OSError:
        pass
'''

LISTEN = PRELUDE + r'''
if p=$(running_pid); then echo "listen=ringtrain (pid $p) holds the port"; finish 0; fi
if ! command -v python3 >/dev/null; then echo "listen=none: no python3 here to listen with"; finish 0; fi
mkdir -p "$D"
setsid python3 -c "$3" "$1" "$2" >"$D/.fleet-listen.out" 2>&1 </dev/null &
echo $! >"$D/.fleet-listen.pid"
for _ in $(seq 50); do
  grep -q . "$D/.fleet-listen.out" 2>/dev/null && break
  sleep 0.1
done
echo "listen=$(head -n 1 "$D/.fleet-listen.out")"
finish 0
'''

# $@ = RANK HOST PORT triples: connect to each (5 s), all at once.
REACH = PRELUDE + r'''
while [[ $# -ge 3 ]]; do
  (
    if timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$2" "$3" 2>/dev/null; then
      echo "reach=$1 ok"
    else
      echo "reach=$1 fail"
    fi
  ) &
  shift 3
done
wait
finish 0
'''

UNLISTEN = PRELUDE + r'''
p=$(cat "$D/.fleet-listen.pid" 2>/dev/null) && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null |
  grep -q python3 && kill "$p" 2>/dev/null
rm -f "$D/.fleet-listen.pid" "$D/.fleet-listen.out"
finish 0
'''

PREPARE_DIR = PRELUDE + r'''
if ! mkdir -p "$D/incoming" "$D/bin" 2>/dev/null || [[ ! -w $D ]]; then
  echo "error=cannot create or write $D (as $(id -un))"
  finish 1
fi
rm -rf "$D/incoming"/*
finish 0
'''

# After parallel-scp put the files into $D/incoming: move them into place (each with one
# rename, so a peer re-reading its hosts file never sees half a file). $1 = binary |
# release | none (what incoming/ringtrain is), $2 = this peer's HOST:PORT, $3 = the data
# directory as the flag file names it; the secret comes on stdin.
INSTALL = PRELUDE + r'''
kind=$1 self=$2
cd "$D" || finish 1
umask 077
cat >secret.new  # the secret arrives on stdin: never on a command line
if [[ $(wc -c <secret.new) -lt 16 ]]; then echo "error=the secret is shorter than 16 bytes"; finish 1; fi
chmod 600 secret.new && mv -f secret.new secret
umask 022
if [[ $kind == binary ]]; then
  chmod 755 incoming/ringtrain && mv -f incoming/ringtrain bin/ringtrain
elif [[ $kind == release ]]; then
  rm -rf release.new && mkdir release.new
  if ! tar -xzf incoming/ringtrain -C release.new; then echo "error=cannot unpack the release"; finish 1; fi
  bin=$(find release.new -name ringtrain -type f -perm -u+x | awk '{print length($0) " " $0}' |
    sort -n | head -n 1 | cut -d' ' -f2-)
  if [[ -z $bin ]]; then echo "error=the release has no executable named ringtrain"; finish 1; fi
  rm -rf release && mv release.new release
  ln -sfn "../release/${bin#release.new/}" bin/ringtrain
  rm -f incoming/ringtrain
fi
if [[ -f incoming/ringtrain-keep-running ]]; then
  chmod 755 incoming/ringtrain-keep-running
  mv -f incoming/ringtrain-keep-running bin/ringtrain-keep-running
fi
for f in hosts train.flags; do
  [[ -f incoming/$f ]] && mv -f "incoming/$f" "$f"
done
printf '%s\n' "--hosts=$D/hosts" "--secret-file=$D/secret" "--self=$self" >fleet.flags.new
mv -f fleet.flags.new fleet.flags
if [[ -x bin/ringtrain ]]; then
  if ! out=$(bin/ringtrain --help 2>&1 >/dev/null); then
    echo "error=bin/ringtrain does not run here: $(echo "$out" | head -n 1)"
    finish 1
  fi
else
  echo "error=no bin/ringtrain yet: push --binary FILE or --release TARBALL"
  finish 1
fi
data=$3
if [[ -n $data ]]; then
  case $data in /*) ;; *) data=$D/$data ;; esac
  if [[ -f $data/manifest.txt ]]; then echo "data=present"; else echo "data=missing"; fi
fi
finish 0
'''

# $1 = auto | systemd | detached, $2 = the unit (@DIR@, @USER@ filled in here),
# $3 = seconds to wait before checking that the peer still runs.
START = PRELUDE + r'''
mode=$1 unit=$2 settle=$3
cd "$D" 2>/dev/null || { echo "error=no directory $D: run push first"; finish 1; }
for f in bin/ringtrain bin/ringtrain-keep-running hosts secret train.flags fleet.flags; do
  [[ -e $f ]] || { echo "error=$D/$f is missing: run push first"; finish 1; }
done
if p=$(running_pid); then echo "state=already running (pid $p)"; finish 0; fi
if [[ $(start_mode) == detached ]] && k=$(keeper_pid); then
  echo "state=already running (ringtrain-keep-running pid $k restarts it: see logs)"
  finish 0
fi
if [[ $mode == auto ]]; then
  if [[ -d /run/systemd/system && $(id -u) == 0 ]]; then mode=systemd; else mode=detached; fi
fi
if [[ $mode == systemd ]]; then
  printf '%s\n' "$unit" | sed "s|@DIR@|$D|g; s|@USER@|$(id -un)|g" >/etc/systemd/system/ringtrain.service ||
    { echo "error=cannot write /etc/systemd/system/ringtrain.service (systemd mode needs root)"; finish 1; }
  echo systemd >start-mode
  if ! systemctl daemon-reload || ! systemctl enable ringtrain 2>/dev/null || ! systemctl restart ringtrain; then
    echo "error=systemctl could not start ringtrain"
    finish 1
  fi
  sleep "$settle"
  if [[ $(systemctl is-active ringtrain) == active ]] && p=$(running_pid); then
    echo "state=started as the systemd service ringtrain (pid $p)"
    finish 0
  fi
  systemctl stop ringtrain  # no restarts every 5 s of a peer that cannot start
else
  rm -f ringtrain.pid keeper.pid
  echo detached >start-mode
  setsid bin/ringtrain-keep-running --pidfile "$D/ringtrain.pid" -- "$D/bin/ringtrain" train \
    "--flagfile=$D/train.flags,$D/fleet.flags" >>ringtrain.log 2>&1 </dev/null &
  echo $! >keeper.pid
  sleep "$settle"
  if p=$(running_pid); then
    echo "state=started detached (pid $p, log $D/ringtrain.log)"
    finish 0
  fi
  k=$(keeper_pid) && kill -TERM "$k" 2>/dev/null
fi
echo "error=ringtrain exited within $settle s of its start"
log_tail 8 | sed 's/^/log=/'
finish 1
'''

STATUS = PRELUDE + r'''
echo "mode=$(start_mode)"
if p=$(running_pid); then
  echo "state=running"
  echo "pid=$p"
  echo "uptime_s=$(ps -o etimes= -p "$p" | tr -d ' ')"
else
  echo "state=not running"
fi
echo "last=$(log_tail 1)"
finish 0
'''

RING_STATUS = PRELUDE + r'''
if [[ ! -x $D/bin/ringtrain ]]; then echo "error=no $D/bin/ringtrain"; finish 1; fi
out=$("$D/bin/ringtrain" status --hosts "$D/hosts" --secret-file "$D/secret" --json --timeout 5 2>&1)
echo "status_rc=$?"
echo "$out" | grep '^{' | tail -n 1 | sed 's/^/json=/'
echo "$out" | grep -v '^{' | tail -n 2 | sed 's/^/note=/'
finish 0
'''

LOGS = PRELUDE + r'''
log_tail "$1" | sed 's/^/log=/'
finish 0
'''

# The new hosts file (copied to incoming/) into place, then SIGHUP: re-read it.
RELOAD = PRELUDE + r'''
mv -f "$D/incoming/hosts" "$D/hosts" || finish 1
if ! p=$(running_pid); then echo "state=updated (not running)"; finish 0; fi
if [[ $(start_mode) == systemd ]]; then systemctl reload ringtrain; else kill -HUP "$p"; fi
echo "state=updated, SIGHUP sent (pid $p)"
finish 0
'''

# $1 = seconds to wait for the exit. SIGTERM: the ring agrees on a last step, the leader
# checkpoints, every peer exits 0.
STOP = PRELUDE + r'''
timeout_s=$1
if p=$(running_pid); then
  if [[ $(start_mode) == systemd ]]; then
    timeout "$timeout_s" systemctl stop ringtrain
  elif k=$(keeper_pid); then
    kill -TERM "$k"
  else
    kill -TERM "$p"
  fi
fi
# A SIGTERM to one peer stops them all: this one may be on its way out already.
end=$((SECONDS + timeout_s))
while running_pid >/dev/null && [[ $SECONDS -lt $end ]]; do sleep 0.5; done
if running_pid >/dev/null; then echo "state=still running after $timeout_s s"; finish 1; fi
if [[ $(start_mode) == systemd ]]; then
  echo "exit=exit status $(systemctl show -p ExecMainStatus --value ringtrain)"
else
  # The keeper logs ringtrain's exit status, then ends.
  while keeper_pid >/dev/null && [[ $SECONDS -lt $((end + 10)) ]]; do sleep 0.25; done
  k=$(keeper_pid) && kill -TERM "$k" 2>/dev/null  # between two restarts: no more
  last=$(grep -a 'keep-running\]' "$D/ringtrain.log" 2>/dev/null | tail -n 1)
  echo "exit=${last#*keep-running] }"
fi
echo "state=stopped"
echo "stopped=$(log_tail 30 | grep -E 'stopped cleanly|finished training' | tail -n 1 | sed 's/^\[[^]]*\] //')"
echo "ckpt=$(log_tail 30 | grep -E 'checkpoint step [0-9]+' | tail -n 1 | sed 's/^.*\(checkpoint step [0-9]*\).*$/\1/')"
finish 0
'''

# $1 = seconds: wait for a peer whose line was removed to leave by itself.
WAIT_EXIT = PRELUDE + r'''
end=$((SECONDS + $1))
while running_pid >/dev/null && [[ $SECONDS -lt $end ]]; do sleep 0.5; done
if running_pid >/dev/null; then echo "state=still running after $1 s"; finish 1; fi
if [[ $(start_mode) == systemd ]]; then
  systemctl disable ringtrain >/dev/null 2>&1
  echo "state=left: ringtrain exit status $(systemctl show -p ExecMainStatus --value ringtrain)"
  finish 0
fi
# Detached: ringtrain is gone, but its keeper writes the exit status to the log up to
# 0.5 s later (it polls); wait for the keeper to end so that line is there to report.
while keeper_pid >/dev/null && [[ $SECONDS -lt $((end + 10)) ]]; do sleep 0.25; done
last=$(grep -a 'keep-running\]' "$D/ringtrain.log" 2>/dev/null | tail -n 1)
echo "state=left: ${last#*keep-running] }"
finish 0
'''
