# tools/fleet's shared pieces: per-host failure reports, and the local files it reads
# besides the inventory and hosts file (the flag file and the secret).
import os
import re
import sys

from fleet_files import FleetError

OWN_FLAGS = ("hosts", "secret_file", "self", "rank")
NEEDED_FLAGS = {
    "data": "the prepared data directory on each host (relative = under -d)",
    "ckpt_dir": "checkpoints: stop, then start, resumes from them",
    "global_batch": "sequences per step over all peers: without it the batch changes with "
                    "the number of hosts, and a grown ring refuses the new peer",
}


class Failures:
    """Collects per-host failures; each says which host and what to do."""

    def __init__(self):
        self.items = []

    def add(self, peer, message):
        self.items.append(f"{peer.target} (ring {peer.ring}): {message}")
        print(f"FAIL {peer.target}: {message}", flush=True)

    def keep(self, peers, ok, why):
        """The peers for which ok(peer) holds; each other one is a failure, why(peer)."""
        kept = []
        for p in peers:
            if ok(p):
                kept.append(p)
            else:
                self.add(p, why(p))
        return kept

    def exit_code(self, what):
        if not self.items:
            return 0
        print(f"fleet {what}: {len(self.items)} problem(s):", file=sys.stderr)
        for item in self.items:
            print("  " + item, file=sys.stderr)
        return 1


def say(peer, message):
    print(f"{peer.target:28s} {message}", flush=True)


def answered(results, peers, fails, what):
    """The peers whose script ran to its end; the others are failures."""
    ok = []
    for p in peers:
        r = results[p.target]
        if r.rc is None:
            fails.add(p, f"{what}: {r.why_failed()}")
        else:
            ok.append(p)
    return ok


def read_flags(path):
    """{flag name with underscores: value} of a flag file (one flag per line)."""
    flags = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise FleetError(f"cannot read the flag file {path}: {e.strerror}") from None
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"--([A-Za-z0-9_-]+)(?:[= ](.*))?", line)
        if not m:
            raise FleetError(f"{path}:{n}: '{line}' is not a flag (--name=value, one a line)")
        name = m.group(1).replace("-", "_")
        if name in OWN_FLAGS:
            raise FleetError(f"{path}:{n}: --{m.group(1)} is set by tools/fleet on each host "
                             "(it passes --hosts, --secret-file and --self): remove the line")
        flags[name] = (m.group(2) or "").strip()
    for name, why in NEEDED_FLAGS.items():
        if name not in flags:
            raise FleetError(f"{path}: no --{name.replace('_', '-')}=... line ({why})")
    return flags


def remote_path(base, sub):
    """The scp/rsync path of `sub` (relative = under the fleet directory `base`)."""
    return sub if sub.startswith("/") else f"{base.rstrip('/')}/{sub}"


def read_secret(path):
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            secret = f.read()
    except OSError as e:
        raise FleetError(f"cannot read the secret {path}: {e.strerror}; make one with "
                         f"`(umask 077; openssl rand -hex 32 > {path})`") from None
    if st.st_mode & 0o077:
        raise FleetError(f"{path} is readable by others (mode {st.st_mode & 0o777:o}): "
                         f"chmod 600 {path}")
    if len(secret.strip()) < 16:
        raise FleetError(f"{path}: the secret must be at least 16 characters")
    return secret
