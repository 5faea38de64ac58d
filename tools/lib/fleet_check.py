# `tools/fleet check`: what each host has (ssh, CPU path, cores, RAM, disk, clock) and
# whether every peer reaches every other's ring port (a short listener on each).
import time

import fleet_remote as R
from fleet_common import Failures, answered, say


def cmd_check(a, peers, t):
    fails = Failures()
    t0 = time.time()
    res = t.ssh(peers, R.FACTS, lambda p: [a.dir], timeout=60)
    t1 = time.time()
    live = answered(res, peers, fails, "ssh")
    paths = {}
    for p in live:
        v = res[p.target].values()
        mem = int(v.get("mem_total_kb") or 0) / 1e6
        avail = int(v.get("mem_avail_kb") or 0) / 1e6
        disk = int(v.get("disk_free_kb") or 0) / 1e6
        paths.setdefault(v.get("cpu_path", "?"), []).append(p)
        say(p, f"ssh ok as {v.get('user')}; {v.get('cores')} cores, {mem:.1f} GB RAM "
               f"({avail:.1f} available), {disk:.1f} GB free in {v.get('dir')}; CPU "
               f"{v.get('cpu_path')} ({v.get('cpu_model')}); glibc {v.get('glibc')}")
        if "ringtrain_version" in v:
            say(p, f"ringtrain --version: {v['ringtrain_version']}")
        if v.get("dir_ok") != "1":
            fails.add(p, f"cannot create or write {v.get('dir')} as {v.get('user')}: pick "
                         "another -d or fix its owner")
        if disk < a.min_disk_gb:
            fails.add(p, f"{disk:.1f} GB free in {v.get('dir')}, below --min-disk-gb "
                         f"{a.min_disk_gb:g} (data and checkpoints): free space or pick another -d")
        if mem < a.min_ram_gb:
            fails.add(p, f"{mem:.1f} GB of RAM, below --min-ram-gb {a.min_ram_gb:g}: see "
                         "`ringtrain plan` for what the model needs")
        if v.get("has_python3") != "1":
            say(p, "note: no python3, so its ring port cannot be tested here (install python3)")
        if a.data_check and v.get("has_rsync") != "1":
            fails.add(p, "no rsync (push --data copies with parallel-rsync): apt-get install rsync")
        try:
            clock = float(v.get("clock", "nan"))
            off = max(0.0, t0 - clock, clock - t1)  # at least this far off (ssh time aside)
            if off > a.max_skew:
                say(p, f"WARNING clock differs from this machine's by at least {off:.1f} s: "
                       "enable NTP (timedatectl set-ntp true); logs and checkpoint ages "
                       "compare times across hosts")
        except ValueError:
            pass
        if v.get("running"):
            say(p, f"note: ringtrain already runs here (pid {v['running']})")
    if len(paths) > 1:
        print("note: the hosts have different CPU paths: "
              + "; ".join(f"{k}: {len(v)} host(s)" for k, v in paths.items())
              + ". They train together: under --precision auto (the default) each peer "
              "computes in its own precision, bf16 only with native bf16 (docs/cpus.md); "
              "an explicit --precision must suit every host", flush=True)
    if len(live) == len(peers) and not a.no_ports:
        check_ports(a, peers, t, fails)
    elif not a.no_ports:
        print("ring ports not tested: some hosts did not answer ssh", flush=True)
    code = fails.exit_code("check")
    if code == 0:
        print(f"check: all {len(peers)} hosts ready")
    return code


def check_ports(a, peers, t, fails):
    """Every peer connects to every other's ring port (a short listener on each)."""
    res = t.ssh(peers, R.LISTEN, lambda p: [a.dir, str(p.ring_port), str(a.listen_s),
                                            R.LISTENER_PY], timeout=60)
    listening = set()
    for p in answered(res, peers, fails, "listener"):
        what = res[p.target].values().get("listen", "")
        if what.startswith("listening") or what.startswith("ringtrain"):
            listening.add(p.target)
        elif what.startswith("error"):
            fails.add(p, f"ring port {p.ring_port}: {what[7:]}: another program holds it; stop "
                         "it or give this host another port in the hosts file")
        else:
            say(p, f"ring port {p.ring_port} not tested: {what}")
    try:
        def others(p):
            args = [a.dir]
            for k, q in enumerate(peers):
                if q is not p:
                    args += [str(k), q.ring_host, str(q.ring_port)]
            return args
        res = t.ssh(peers, R.REACH, others, timeout=60)
        bad = 0
        for i, p in enumerate(answered(res, peers, fails, "port test")):
            for line in res[p.target].lines("reach"):
                k, state = line.split()
                q = peers[int(k)]
                if q.target not in listening:
                    continue
                if state != "ok":
                    bad += 1
                    fails.add(p, f"cannot reach peer {q.ring} (rank {k}, {q.target}) on ring port "
                                 f"{q.ring_port}: open TCP {q.ring_port} on {q.ssh_host} to "
                                 f"{p.ring_host} (firewall, security group)")
        if not bad:
            print(f"ring ports: all {len(peers) * (len(peers) - 1)} peer pairs connect",
                  flush=True)
    finally:
        t.ssh(peers, R.UNLISTEN, lambda p: [a.dir], timeout=30)
