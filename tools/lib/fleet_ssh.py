# tools/fleet's transport: runs parallel-ssh, parallel-scp and parallel-rsync (Debian's
# pssh package) on a set of peers and returns what each host answered.
#
# parallel-ssh runs one command on every host; a command whose arguments differ per host
# (the peer's own ring address) runs as one parallel-ssh per host, all at once. Each
# host's stdout and stderr land in files named after its target (-o/-e), read back here.
# Remote scripts end by printing `fleet-rc=N`: a host whose output lacks it never ran the
# script to its end (ssh failed, timed out), and its stderr says why.
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from fleet_files import FleetError

STATUS_LINE = re.compile(r"^\[\d+\] \S+ \[(SUCCESS|FAILURE)\] (\S+)(?: (.*))?$")


class Result:
    def __init__(self, peer, out, err, status):
        self.peer = peer
        self.out = out  # the host's stdout
        self.err = err  # its stderr (ssh's own errors land here)
        self.status = status  # parallel-ssh's word: "" on success, else its reason
        m = re.search(r"^fleet-rc=(\d+)$", out, re.M)
        self.rc = int(m.group(1)) if m else None  # None: the script did not run to its end

    def values(self):
        """key=value lines of the host's stdout (the last value of each key)."""
        v = {}
        for line in self.out.split("\n"):
            k, sep, val = line.partition("=")
            if sep and re.fullmatch(r"[a-z][a-z0-9_-]*", k):
                v[k] = val
        return v

    def lines(self, key):
        return [l[len(key) + 1:] for l in self.out.split("\n") if l.startswith(key + "=")]

    def why_failed(self):
        """One line saying why the host did not answer, and what to do."""
        err = [l for l in self.err.strip().split("\n") if l.strip()]
        last = err[-1] if err else ""
        what = self.status or "no answer"
        p = self.peer
        hint = (f"check that `ssh -p {p.ssh_port} {p.target.rsplit(':', 1)[0]} true` works "
                "without a password (ssh-copy-id) and the host key is known")
        if "Host key verification failed" in self.err:
            hint = (f"its host key is unknown: ssh to it once (`ssh -p {p.ssh_port} "
                    f"{p.target.rsplit(':', 1)[0]}`), or pass --ssh-opt StrictHostKeyChecking=accept-new")
        elif "Permission denied" in self.err:
            hint = "ssh refused the key: copy your public key there (ssh-copy-id)"
        elif "Timed out" in what or "timed out" in last.lower():
            hint = "the host or its sshd does not answer in time: is it up, is its ssh port open?"
        elif "bash: " in self.err and "not found" in self.err:
            hint = "the host has no bash: install it"
        return f"{what}{': ' + last if last else ''}; {hint}"


class Transport:
    def __init__(self, ssh_opts, verbose=False):
        # ssh takes the first value of each option: the user's come first. One shared
        # connection per host (ControlMaster), kept 60 s: each command here is several
        # parallel-ssh rounds, and a new ssh handshake per round costs ~1 s on a busy host.
        os.makedirs(os.path.expanduser("~/.ssh"), mode=0o700, exist_ok=True)
        self.ssh_opts = list(ssh_opts) + ["BatchMode=yes", "ConnectTimeout=10",
                                          "ControlMaster=auto", "ControlPersist=60",
                                          "ControlPath=~/.ssh/fleet-%C"]
        self.verbose = verbose
        for tool in ("parallel-ssh", "parallel-scp"):
            if shutil.which(tool) is None:
                raise FleetError(f"{tool} not found: install Debian's pssh package "
                                 "(apt-get install pssh)")

    def _opts(self):
        out = []
        for o in self.ssh_opts:
            out += ["-O", o]
        return out

    def _run(self, tool_args, peers, timeout, stdin=None):
        """Runs one parallel-* command on `peers`; returns {target: Result}."""
        work = tempfile.mkdtemp(prefix="fleet-")
        try:
            hosts = os.path.join(work, "hosts")
            with open(hosts, "w") as f:
                f.write("".join(p.target + "\n" for p in peers))
            outdir, errdir = os.path.join(work, "out"), os.path.join(work, "err")
            cmd = [tool_args[0], "-h", hosts, "-p", str(max(1, len(peers))), "-t", str(int(timeout)),
                   "-o", outdir, "-e", errdir] + self._opts() + tool_args[1:]
            if self.verbose:
                print("fleet: " + " ".join(shlex.quote(c) for c in cmd[:12]) + " ...")
            proc = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
            status = {}
            printed = proc.stdout.decode("utf-8", "replace")
            for line in printed.split("\n"):
                m = STATUS_LINE.match(line)
                if m:
                    status[m.group(2)] = "" if m.group(1) == "SUCCESS" else (m.group(3) or "failed")
            if not status and proc.returncode != 0:
                raise FleetError(f"{tool_args[0]} failed (exit {proc.returncode}): "
                                 + " | ".join(printed.strip().split("\n")[-3:]))
            results = {}
            for p in peers:
                def read(d):
                    try:
                        with open(os.path.join(d, p.target), encoding="utf-8",
                                  errors="replace") as f:
                            return f.read()
                    except OSError:
                        return ""
                results[p.target] = Result(p, read(outdir), read(errdir),
                                           status.get(p.target, "no answer from parallel-ssh"))
            return results
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def ssh(self, peers, script, args_of=None, timeout=60, stdin=None):
        """Runs bash `script` on every peer with args_of(peer) as its arguments ($1...).
        Peers with the same arguments share one parallel-ssh."""
        groups = {}
        for p in peers:
            args = tuple(args_of(p)) if args_of else ()
            groups.setdefault(args, []).append(p)
        cmds = {}
        for args, group in groups.items():
            remote = "bash -c " + shlex.quote(script) + " fleet " + " ".join(
                shlex.quote(a) for a in args)
            cmds[args] = (group, remote)
        if len(cmds) == 1:
            group, remote = next(iter(cmds.values()))
            return self._run(["parallel-ssh"] + (["-I"] if stdin is not None else []) + [remote],
                             group, timeout, stdin)
        # One parallel-ssh per argument set, all at once (threads only wait on children).
        import concurrent.futures
        out = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, len(cmds))) as ex:
            tool = ["parallel-ssh"] + (["-I"] if stdin is not None else [])
            futures = [ex.submit(self._run, tool + [remote], group, timeout, stdin)
                       for group, remote in cmds.values()]
            for f in futures:
                out.update(f.result())
        return out

    def scp(self, peers, *paths, timeout=3600):
        """Copies local files paths[:-1] to paths[-1] on each peer (a path relative to the
        remote home, or absolute; a directory when several files go)."""
        return self._run(["parallel-scp"] + list(paths), peers, timeout)

    def rsync(self, peers, local_dir, remote_dir, timeout=0):
        if shutil.which("parallel-rsync") is None or shutil.which("rsync") is None:
            raise FleetError("push --data needs parallel-rsync and rsync on this machine "
                             "(apt-get install pssh rsync) and rsync on every host")
        return self._run(["parallel-rsync", "-a", "-z", "-x", "--partial --delete-after",
                          local_dir.rstrip("/") + "/", remote_dir.rstrip("/") + "/"],
                         peers, timeout)
