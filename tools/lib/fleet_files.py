# tools/fleet's two input files: the inventory (ssh targets) and the ring's hosts file,
# parsed, checked against each other line by line, and edited (grow/shrink).
#
# Inventory: one ssh target per line, `[user@]host[:sshport] [RING-HOST]`; `#` starts a
# comment. The optional second field names the peer's ring address when it differs from
# the ssh host (ssh over a public address, the ring over a private network).
# Hosts file: ringtrain's format, `HOST[:PORT]` (default 29500), `#` comments, IPv6 in
# brackets. Line order is rank order.
# The n-th target of the inventory drives the n-th peer of the hosts file: same count,
# same host in the same place, or an error naming both lines.
import os
import re
import tempfile

DEFAULT_RING_PORT = 29500
DEFAULT_SSH_PORT = 22


class FleetError(Exception):
    """An error the user can fix; the message says what and where."""


class Peer:
    """One host: its ssh target and its ring address."""

    def __init__(self, user, ssh_host, ssh_port, ring_host, ring_port, inv_line, hosts_line):
        self.user = user  # "" = ssh's default
        self.ssh_host = ssh_host
        self.ssh_port = ssh_port
        self.ring_host = ring_host  # as written in the hosts file, brackets removed
        self.ring_port = ring_port
        self.inv_line = inv_line  # 1-based line numbers, for messages
        self.hosts_line = hosts_line

    @property
    def target(self):
        """The name parallel-ssh prints and names its output files after."""
        return f"{self.user + '@' if self.user else ''}{self.ssh_host}:{self.ssh_port}"

    @property
    def ring(self):
        """HOST:PORT as ringtrain's --self takes it."""
        host = f"[{self.ring_host}]" if ":" in self.ring_host else self.ring_host
        return f"{host}:{self.ring_port}"

    def __str__(self):
        return f"{self.target} (ring {self.ring})"


def _strip(line):
    return line.split("#", 1)[0].strip()


def parse_ssh_target(text, where):
    """`[user@]host[:port]` -> (user, host, port)."""
    m = re.fullmatch(r"(?:([A-Za-z0-9._][A-Za-z0-9._-]*)@)?([A-Za-z0-9._-]+)(?::(\d+))?", text)
    if not m:
        hint = ""
        if "[" in text or text.count(":") > 1:
            hint = " (parallel-ssh cannot take IPv6 addresses here: use a host name)"
        raise FleetError(f"{where}: '{text}' is not an ssh target [user@]host[:sshport]{hint}")
    user, host, port = m.group(1) or "", m.group(2), int(m.group(3) or DEFAULT_SSH_PORT)
    if not 1 <= port <= 65535:
        raise FleetError(f"{where}: ssh port {port} is not in 1..65535")
    return user, host, port


def parse_ring_entry(text, where):
    """`HOST[:PORT]` or `[v6][:PORT]` -> (host, port), as ringtrain reads its hosts file."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d+))?", text) or \
        re.fullmatch(r"([A-Za-z0-9._-]+)(?::(\d+))?", text)
    if not m:
        raise FleetError(f"{where}: '{text}' is not HOST[:PORT] (IPv6 goes in brackets)")
    port = int(m.group(2) or DEFAULT_RING_PORT)
    if not 1 <= port <= 65535:
        raise FleetError(f"{where}: port {port} is not in 1..65535")
    return m.group(1), port


def read_lines(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().split("\n")
    except OSError as e:
        raise FleetError(f"cannot read the {what} {path}: {e.strerror}") from None


def parse_inventory(path):
    """[(line number, user, ssh host, ssh port, ring host override or None)]"""
    out = []
    for n, raw in enumerate(read_lines(path, "inventory"), 1):
        text = _strip(raw)
        if not text:
            continue
        where = f"{path}:{n}"
        fields = text.split()
        if len(fields) > 2:
            raise FleetError(f"{where}: expected `[user@]host[:sshport] [RING-HOST]`, got '{text}'")
        user, host, port = parse_ssh_target(fields[0], where)
        ring = None
        if len(fields) == 2:
            ring, _ = parse_ring_entry(fields[1], where)
            if re.fullmatch(r".*:\d+", fields[1]) and not fields[1].startswith("["):
                raise FleetError(f"{where}: the ring host '{fields[1]}' takes no port here: "
                                 "the ring port is written in the hosts file")
        out.append((n, user, host, port, ring))
    return out


def parse_hosts(path):
    """[(line number, host, port)] of the ring's hosts file."""
    out = []
    seen = {}
    for n, raw in enumerate(read_lines(path, "hosts file"), 1):
        text = _strip(raw)
        if not text:
            continue
        where = f"{path}:{n}"
        if len(text.split()) != 1:
            raise FleetError(f"{where}: one HOST[:PORT] per line, got '{text}'")
        host, port = parse_ring_entry(text, where)
        key = (host.lower(), port)
        if key in seen:
            raise FleetError(f"{where}: {host}:{port} is already on line {seen[key]}")
        seen[key] = n
        out.append((n, host, port))
    return out


def load_fleet(inventory_path, hosts_path):
    """The peers in rank order, after checking the two files against each other."""
    inv = parse_inventory(inventory_path)
    ring = parse_hosts(hosts_path)
    if not ring:
        raise FleetError(f"{hosts_path}: no hosts (one HOST[:PORT] per line)")
    # The mistake this catches first: the ring's hosts file passed as the inventory.
    # parallel-ssh would read HOST:29500 as the ssh port.
    for n, _, _, port, _ in inv:
        if port == DEFAULT_RING_PORT or any(port == p for _, _, p in ring):
            raise FleetError(
                f"{inventory_path}:{n}: ssh port {port} is a ring port: is this the ring's hosts "
                "file? The inventory lists ssh targets ([user@]host[:sshport], port 22 by "
                "default); the hosts file lists ring addresses (HOST:PORT)")
    for k in range(max(len(inv), len(ring))):
        if k >= len(inv):
            n, host, port = ring[k]
            raise FleetError(
                f"{hosts_path}:{n} ({host}:{port}) has no ssh target: the inventory "
                f"{inventory_path} lists {len(inv)} hosts, the hosts file {len(ring)}; add the "
                "target at the same position (same order as the hosts file)")
        if k >= len(ring):
            n = inv[k][0]
            raise FleetError(
                f"{inventory_path}:{n} ({inv[k][2]}) has no line in the hosts file {hosts_path}: "
                f"the inventory lists {len(inv)} hosts, the hosts file {len(ring)}")
    peers = []
    for (n_inv, user, ssh_host, ssh_port, ring_override), (n_h, host, port) in zip(inv, ring):
        expected = ring_override or ssh_host
        if expected.lower() != host.lower():
            raise FleetError(
                f"{inventory_path}:{n_inv} ({ssh_host}{' ring ' + ring_override if ring_override else ''}) "
                f"and {hosts_path}:{n_h} ({host}:{port}) name different hosts: line k of the "
                "inventory drives line k of the hosts file (rank order). Put them in the same "
                "order, or write the ring address as the inventory line's second field "
                "(`root@203.0.113.5 10.0.0.5`)")
        peers.append(Peer(user, ssh_host, ssh_port, host, port, n_inv, n_h))
    targets = [p.target for p in peers]
    for i, t in enumerate(targets):
        if t in targets[:i]:
            raise FleetError(f"{inventory_path}:{peers[i].inv_line}: {t} is listed twice")
    return peers


def write_atomically(path, lines):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".fleet-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    try:
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    except OSError:
        pass
    os.replace(tmp, path)


def append_line(path, line):
    lines = read_lines(path, "file")
    while lines and lines[-1] == "":
        lines.pop()
    write_atomically(path, lines + [line, ""])


def remove_line(path, number):
    lines = read_lines(path, "file")
    del lines[number - 1]
    write_atomically(path, lines)
