"""The deployment file (``--hosts FILE``): the store's members on hosts leasecheck did not start, and how to act there.

TOML, read with tomllib, and refused before anything is touched: an unknown key
(a typo would silently drop a member's companions), a member named twice, an
address that is not one. Every refusal is one line, ``FILE:LINE: what is wrong``,
the line found by scanning the text for the offending key (tomllib's own errors
carry theirs), so an editor jumps to it; the CLI exits 3 with it, as for every
other bad input. docs/hosts.md is the reference of every key; in short::

    store = "redis"                       # redis | postgres | etcd | zookeeper
    [ssh]                                 # defaults for every ssh:// member
    user = "root"
    identity = "~/.ssh/id_ed25519"
    known-hosts = "~/.ssh/known_hosts"    # or trust-host-key = true
    [redis]                               # how to ask the store on a member's host (the kind's table, optional)
    client = "redis-cli -p 6379"
    [[member]]
    name = "m1"
    host = "ssh://root@10.0.0.11:22"
    address = "10.0.0.11"                 # as its peers see it: what a partition drops
    process = { pidfile = "/var/run/redis/redis.pid" }   # or { systemd = UNIT } or { pattern = REGEX }
    start = "redis-server /etc/redis/redis.conf --daemonize yes"
    logs = ["/var/log/redis/redis-server.log"]
    faketime = "/var/lib/leasecheck/m1.faketime"        # only then may its clock be skewed
    companions = [ { pattern = "redis-sentinel" } ]     # share its fate in a kill or a pause
    primary = "builtin"                   # or a command printing the primary's member name or address
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.errors import BadInput
from leasecheck.hosts.address import BadAddress, HostAddress, SshOptions, parse_address

T = TypeVar("T")
STORES = ("redis", "postgres", "etcd", "zookeeper")
#: how a member's process is found: its pidfile, its systemd unit's MainPID, or ``pgrep -f`` of a pattern
PROCESS_KINDS = ("pidfile", "systemd", "pattern")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOP = ("store", "ssh", "member", *STORES)
_SSH = ("user", "port", "identity", "agent", "known-hosts", "trust-host-key", "connect-timeout")
_MEMBER = ("name", "host", "address", "process", "start", "logs", "faketime", "companions", "primary")
#: each store kind's table and its defaults: the command that asks the store on a member's own host (``{address}`` in
#: it is the member's address, for a store that listens there only)
STORE_DEFAULTS: dict[str, dict[str, Any]] = {
    "redis": {"client": "redis-cli -p 6379", "sentinel": None, "master-name": "mymaster"},
    "postgres": {"client": "runuser -u postgres -- psql -p 5432"},
    "etcd": {"client": "etcdctl --endpoints=http://127.0.0.1:2379"},
    "zookeeper": {"host": "127.0.0.1", "port": 2181},
}


class DeploymentError(BadInput):
    """A deployment file leasecheck cannot use; ``str()`` is one line, ``FILE:LINE: what is wrong`` (exit 3)."""


@dataclass(frozen=True)
class ProcessSpec:
    """How a process is found on its host: ``how`` is one of :data:`PROCESS_KINDS`, ``value`` its path, unit or pattern."""

    how: str
    value: str

    def __str__(self) -> str:
        return f"{self.how} {self.value}"


@dataclass(frozen=True)
class MemberSpec:
    """One member: its name, host, address among its peers, process (and companions), start command, logs, clock."""

    name: str
    host: HostAddress
    process: ProcessSpec
    address: str | None = None
    start: str | None = None
    logs: tuple[str, ...] = ()
    faketime: str | None = None
    companions: tuple[ProcessSpec, ...] = ()
    #: "builtin" (asked of the store its own way, :mod:`leasecheck.hosts.stores`) or a command run on the member's host
    primary: str = "builtin"

    @property
    def start_command(self) -> str | None:
        """What brings it back after a kill: ``start``, or ``systemctl start UNIT`` for a systemd member."""
        if self.start is not None:
            return self.start
        return f"systemctl start {self.process.value}" if self.process.how == "systemd" else None

    @property
    def processes(self) -> tuple[ProcessSpec, ...]:
        """The member's process, then its companions: what a kill or a pause hits."""
        return (self.process, *self.companions)


@dataclass(frozen=True)
class Deployment:
    """A whole deployment file, checked: the store kind, its table (defaults filled in), ssh options, the members."""

    path: Path
    store: str
    members: tuple[MemberSpec, ...]
    ssh: SshOptions = field(default_factory=SshOptions)
    #: the store kind's table (:data:`STORE_DEFAULTS`), every key present
    options: tuple[tuple[str, Any], ...] = ()

    def member(self, name: str) -> MemberSpec:
        return next(m for m in self.members if m.name == name)

    def option(self, key: str) -> Any:
        return dict(self.options)[key]


# ---------------------------------------------------------------- where in the file


class _Lines:
    """The line of a key in the text: top-level, in ``[table]``, or in the n-th ``[[table]]`` (1-based)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def _blocks(self) -> list[tuple[str | None, int, int]]:
        """(table, its header's line, how many of that table came before, counting arrays) for each block."""
        blocks: list[tuple[str | None, int, int]] = [(None, 1, 0)]
        seen: dict[str, int] = {}
        for number, line in enumerate(self.lines, 1):
            m = self._HEADER.match(line)
            if m:
                name = m.group(2).strip().strip('"')
                seen[name] = seen.get(name, 0) + 1
                blocks.append((name, number, seen[name]))
        return blocks

    def of(self, table: str | None = None, index: int = 1, key: str | None = None) -> int:
        blocks = self._blocks()
        for i, (name, start, count) in enumerate(blocks):
            if name != table or (table is not None and count != index):
                continue
            end = blocks[i + 1][1] if i + 1 < len(blocks) else len(self.lines) + 1
            if key is not None:
                pattern = re.compile(rf'^\s*(?:"{re.escape(key)}"|\'{re.escape(key)}\'|{re.escape(key)})\s*=')
                for number in range(start if table is None else start + 1, end):
                    if pattern.match(self.lines[number - 1]):
                        return number
            return start
        return 1


# ---------------------------------------------------------------- reading


@dataclass
class _Reader:
    path: Path
    lines: _Lines

    def fail(self, what: str, table: str | None = None, index: int = 1, key: str | None = None) -> DeploymentError:
        return DeploymentError(f"{self.path}:{self.lines.of(table, index, key)}: {what}")

    def known(self, given: dict[str, Any], known: tuple[str, ...], where: str, table: str | None, index: int = 1) -> None:
        for key in given:
            if key not in known:
                raise self.fail(f"unknown key {key!r} in {where} (known: {', '.join(known)})", table, index, key)

    def get(self, given: dict[str, Any], key: str, kind: type[T] | tuple[type, ...], where: str, table: str | None,
            index: int = 1, default: Any = None, check: Callable[[Any], str | None] | None = None) -> Any:
        """``given[key]`` if it is a ``kind`` (and ``check`` finds nothing wrong with it), else ``default`` if absent."""
        if key not in given:
            return default
        value = given[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.fail(f"{key} in {where} must be {names}, not {value!r}", table, index, key)
        wrong = check(value) if check is not None else None
        if wrong:
            raise self.fail(f"{key} in {where}: {wrong}", table, index, key)
        return value


_TYPE_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", list: "a list",
               dict: "a table"}


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "it is empty"


def _absolute(value: str) -> str | None:
    return None if value.startswith("/") else f"{value!r} is not an absolute path"


#: the deployments read, by what their file is (where, inode, size, modified): a run asks for its ``--hosts`` file three
#: times (to check the options, to choose the target's store, to open the hosts) and reads it once, so all three see
#: one deployment; a file edited in between is another file, read again
_READ: dict[tuple[str, int, int, int], Deployment] = {}


def load_deployment(path: str | Path) -> Deployment:
    """Read and check the deployment file at ``path``; raise :class:`DeploymentError` (one line) at its first problem."""
    path = Path(path)
    try:
        st = path.stat()
        key: tuple[str, int, int, int] | None = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None  # read below, to say why it cannot be
    if key in _READ:
        return _READ[key]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DeploymentError(f"{path}:1: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    deployment = parse_deployment(text, path)
    if key is not None:
        _READ[key] = deployment
    return deployment


def parse_deployment(text: str, path: Path) -> Deployment:
    """The deployment ``text`` (read from ``path``, which the errors name)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column \d+\)|\(at end of document\)", str(e))
        line = m.group(1) if m and m.group(1) else str(max(1, len(text.splitlines())))
        raise DeploymentError(f"{path}:{line}: not valid TOML: {str(e)[: m.start()].strip() if m else e}") from None
    r = _Reader(path, _Lines(text))
    r.known(data, _TOP, "the file", None)
    store = r.get(data, "store", str, "the file", None)
    if store is None:
        raise r.fail(f"no store = ... (one of {', '.join(STORES)})")
    if store not in STORES:
        raise r.fail(f"store = {store!r} is not one of {', '.join(STORES)}", key="store")
    for other in STORES:
        if other != store and other in data:
            raise r.fail(f"a [{other}] table in a deployment of {store}", other)
    options = _store_options(r, store, r.get(data, store, dict, "the file", None, default={}))
    ssh = _ssh(r, r.get(data, "ssh", dict, "the file", None, default={}))
    tables = r.get(data, "member", list, "the file", None, default=[])
    if not tables:
        raise r.fail("no [[member]]: a deployment names each member of the store")
    members: list[MemberSpec] = []
    for index, table in enumerate(tables, 1):
        if not isinstance(table, dict):
            raise r.fail("member must be a list of tables ([[member]])", key="member")
        members.append(_member(r, table, index, members))
    return Deployment(path, store, tuple(members), ssh, tuple(sorted(options.items())))


def _store_options(r: _Reader, store: str, given: dict[str, Any]) -> dict[str, Any]:
    defaults = STORE_DEFAULTS[store]
    where = f"[{store}]"
    r.known(given, tuple(defaults), where, store)
    options = dict(defaults)
    for key, default in defaults.items():
        if isinstance(default, int):
            options[key] = r.get(given, key, int, where, store, default=default,
                                 check=lambda v: None if 0 < v < 65536 else "not a port (1-65535)")
        else:
            options[key] = r.get(given, key, str, where, store, default=default, check=_non_empty)
    return options


def _ssh(r: _Reader, given: dict[str, Any]) -> SshOptions:
    r.known(given, _SSH, "[ssh]", "ssh")
    identity = r.get(given, "identity", (str, list), "[ssh]", "ssh", default=[])
    identities = [identity] if isinstance(identity, str) else identity
    if not all(isinstance(i, str) and i.strip() for i in identities):
        raise r.fail("identity in [ssh] must be a file or a list of files", "ssh", key="identity")
    known_hosts = r.get(given, "known-hosts", str, "[ssh]", "ssh", check=_non_empty)
    trust = r.get(given, "trust-host-key", bool, "[ssh]", "ssh", default=False)
    if known_hosts is not None and trust:
        raise r.fail("known-hosts and trust-host-key = true together: the file would never be read", "ssh",
                     key="trust-host-key")
    return SshOptions(
        user=r.get(given, "user", str, "[ssh]", "ssh", default="root", check=_non_empty),
        port=r.get(given, "port", int, "[ssh]", "ssh", default=22,
                   check=lambda v: None if 0 < v < 65536 else "not a port (1-65535)"),
        identities=tuple(Path(i) for i in identities),
        agent=r.get(given, "agent", bool, "[ssh]", "ssh", default=True),
        known_hosts=Path(known_hosts) if known_hosts is not None else None,
        trust_host_key=trust,
        connect_timeout_s=float(r.get(given, "connect-timeout", (int, float), "[ssh]", "ssh", default=10.0,
                                      check=lambda v: None if v > 0 else "must be more than 0 seconds")),
    )


def _process(r: _Reader, value: Any, where: str, index: int, key: str) -> ProcessSpec:
    shown = f"{{ {' | '.join(f'{k} = ...' for k in PROCESS_KINDS)} }}"
    if not isinstance(value, dict) or len(value) != 1:
        raise r.fail(f"{key} in {where} must be a table with one of {', '.join(PROCESS_KINDS)}: {shown}",
                     "member", index, key)
    (how, found), = value.items()
    if how not in PROCESS_KINDS:
        raise r.fail(f"{key} in {where}: unknown key {how!r} (known: {', '.join(PROCESS_KINDS)})", "member", index, key)
    if not isinstance(found, str) or not found.strip():
        raise r.fail(f"{key} in {where}: {how} must be a non-empty string", "member", index, key)
    if how == "pidfile" and not found.startswith("/"):
        raise r.fail(f"{key} in {where}: the pidfile {found!r} is not an absolute path", "member", index, key)
    return ProcessSpec(how, found)


def _member(r: _Reader, table: dict[str, Any], index: int, before: list[MemberSpec]) -> MemberSpec:
    where = f"member {table['name']}" if isinstance(table.get("name"), str) else f"member {index}"
    r.known(table, _MEMBER, where, "member", index)
    name = r.get(table, "name", str, where, "member", index)
    if name is None:
        raise r.fail(f"{where} has no name", "member", index)
    if not _NAME.match(name):
        raise r.fail(f"member name {name!r}: letters, digits, '.', '_' and '-' only", "member", index, "name")
    where = f"member {name}"
    for earlier in before:
        if earlier.name == name:
            raise r.fail(f"member name {name!r} is given twice", "member", index, "name")
    host_text = r.get(table, "host", str, where, "member", index)
    if host_text is None:
        raise r.fail(f"{where} has no host (ssh://user@host:port, docker://container or netns://name)", "member", index)
    try:
        host = parse_address(host_text)
    except BadAddress as e:
        raise r.fail(f"host of {where}: {e}", "member", index, "host") from None
    address = r.get(table, "address", str, where, "member", index)
    if address is not None:
        try:
            address = str(ipaddress.IPv4Address(address))
        except ValueError:
            raise r.fail(f"address of {where}: {address!r} is not an IPv4 address (what its peers' packets come "
                         f"from, which iptables matches)", "member", index, "address") from None
        for earlier in before:
            if earlier.address == address:
                raise r.fail(f"address {address} of {where} is {earlier.name}'s too", "member", index, "address")
    if "process" not in table:
        raise r.fail(f"{where} has no process = {{ pidfile | systemd | pattern = ... }}", "member", index)
    companions = r.get(table, "companions", list, where, "member", index, default=[])
    logs = r.get(table, "logs", list, where, "member", index, default=[])
    for log in logs:
        if not isinstance(log, str) or _absolute(log):
            raise r.fail(f"logs of {where}: {log!r} is not an absolute path", "member", index, "logs")
    return MemberSpec(
        name=name, host=host, address=address,
        process=_process(r, table["process"], where, index, "process"),
        start=r.get(table, "start", str, where, "member", index, check=_non_empty),
        logs=tuple(logs),
        faketime=r.get(table, "faketime", str, where, "member", index, check=_absolute),
        companions=tuple(_process(r, c, where, index, "companions") for c in companions),
        primary=r.get(table, "primary", str, where, "member", index, default="builtin", check=_non_empty),
    )


__all__ = ["PROCESS_KINDS", "STORES", "Deployment", "DeploymentError", "MemberSpec", "ProcessSpec", "load_deployment",
           "parse_deployment"]
