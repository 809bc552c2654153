"""A private PostgreSQL server from the machine's binaries, for tests and runs.

``initdb`` once into ``directory/data`` (trust auth on loopback, UTF8, C
locale), then ``postgres -D`` directly — not ``pg_ctl``, whose pid is gone
once it returns, while pause and kill need the postmaster's own pid: from it
they find every backend (each Postgres child leaves the postmaster's process
group, so signalling the group is not enough). Postgres refuses to run as
root, so as root both run as the ``postgres`` OS user. Durability settings stay on (``fsync``, ``synchronous_commit``): a
lease store that loses an acknowledged commit after a crash is a finding, and
must not be an artefact of how we configured it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from leasecheck.machine.processes import children, descendants, freeze, running, signal_process, working_in
from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath
from leasecheck.servers.readiness import postgres_answers
from leasecheck.targets.durability import DEFAULT_PROFILE, POSTGRES, check_profile
from leasecheck.waiting import poll

#: the unprivileged user Debian's packages create; used only when we run as root
SERVER_USER = "postgres"

#: what every server of ours runs with (local or container), whatever its durability profile
BASE_SETTINGS = {
    "max_connections": "200",
    "logging_collector": "off",
    "log_destination": "stderr",
    "timezone": "UTC",
}
#: every acknowledged commit on disk, and the rest (the ``durable`` profile, :mod:`leasecheck.targets.durability`)
DURABLE_SETTINGS = {**POSTGRES["durable"], **BASE_SETTINGS}


def find_bin_dir(bin_dir: StrPath | None = None) -> Path:
    """The directory holding ``initdb`` and ``postgres``: given, the newest Debian install, or on PATH."""
    if bin_dir is not None:
        candidates = [Path(bin_dir)]
    else:
        installed = sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")), key=_major_version, reverse=True)
        on_path = shutil.which("postgres")
        candidates = installed + ([Path(on_path).parent] if on_path else [])
    for candidate in candidates:
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            return candidate
    where = str(bin_dir) if bin_dir is not None else "/usr/lib/postgresql/*/bin or PATH"
    raise EnvironmentFailure(
        f"postgres: no initdb/postgres binaries in {where} (install postgresql, e.g. apt-get install postgresql-15)"
    )


def _major_version(bin_dir: Path) -> int:
    """15 for /usr/lib/postgresql/15/bin; -1 for anything unexpected (tried last)."""
    name = bin_dir.parent.name
    return int(name) if name.isdigit() else -1


class PostgresServer(LocalServer):
    """A PostgreSQL server we own: its own data directory, loopback port and unix socket."""

    guarded = True  # backends run in sessions of their own: take them down with the harness

    kind = "postgres"

    def __init__(self, directory: StrPath | None = None, port: int | None = None, bin_dir: StrPath | None = None,
                 profile: str = DEFAULT_PROFILE) -> None:
        #: the durability profile (:data:`leasecheck.targets.durability.POSTGRES`)
        self.profile = check_profile(profile)
        self.bin_dir = find_bin_dir(bin_dir)  # before the base class makes a directory we would leave behind
        self._user = self._server_user()
        super().__init__(directory, port)
        self.data_dir = self.directory / "data"

    @staticmethod
    def _server_user() -> pwd.struct_passwd | None:
        """Whom to run as: ourselves, unless we are root (which initdb and postgres refuse)."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise EnvironmentFailure(f"postgres: running as root and there is no {SERVER_USER!r} OS user to run the server as") from None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _drop_privileges(self) -> None:
        if self._user is not None:
            os.setgroups([])
            os.setgid(self._user.pw_gid)
            os.setuid(self._user.pw_uid)

    def _preexec(self) -> None:
        super()._preexec()
        self._drop_privileges()

    def _prepare(self) -> None:
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_settings()

    def _initdb(self) -> None:
        """A fresh cluster; ``--no-sync`` because only a machine crash, which we never cause, could lose its files."""
        command = [
            str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
            preexec_fn=self._drop_privileges, cwd=self.directory,
        )
        if done.returncode != 0:
            raise EnvironmentFailure(f"postgres: initdb failed (exit {done.returncode}):\n{done.stdout}{done.stderr}".rstrip())
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\ninclude 'leasecheck.conf'\n")

    def _write_settings(self) -> None:
        """Rewritten on every start, so a server object with a new port reuses old data."""
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            # a socket path longer than 107 bytes is fatal to Postgres; a run directory may be that deep (TCP is what we use)
            "unix_socket_directories": str(self.directory) if len(str(self.directory)) < 80 else "",
            **POSTGRES[self.profile],
            **BASE_SETTINGS,
        }
        path = self.data_dir / "leasecheck.conf"
        path.write_text("".join(f"{key} = '{value}'\n" for key, value in settings.items()))
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _command(self) -> list[str]:
        return [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]

    def _ready(self) -> bool:
        return postgres_answers(self.url)

    def _children(self) -> list[int]:
        """The postmaster's children (backends, checkpointer, ...), from /proc.

        They are not in the postmaster's process group: every Postgres child
        calls setsid() so that it can be signalled with its own children. So
        signals to "the server" must go to each of them.
        """
        pid = self.pid
        return [] if pid is None else children(pid)

    def _signal_server(self, sig: signal.Signals) -> list[int]:
        """Signal the postmaster and every process below it; return those signalled below it.

        The postmaster is stopped first, so it cannot fork a child we miss nor
        (after a SIGKILL) restart the children it saw die. A signal is delivered
        after kill() returns, so we wait until it *is* stopped: a fork in flight
        finishes first, and its child is then in the list.
        """
        pid = self.pid
        if pid is None:
            return []
        backends = (freeze(pid) or []) if sig != signal.SIGCONT else descendants(pid)[1:]
        for backend in backends:
            signal_process(backend, sig)
        signal_process(pid, sig)
        return backends

    def pause(self) -> None:
        """SIGSTOP the postmaster and every backend: the server stops answering on open connections too."""
        self._signal_server(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_server(signal.SIGCONT)

    def stop(self, grace: float = 10.0) -> None:
        """Fast shutdown (SIGINT): unlike SIGTERM it does not wait for clients to disconnect."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        self.resume()
        signal_process(p.pid, signal.SIGINT)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Crash the whole server, postmaster and backends at once, as a crash of the machine's processes would."""
        if self.process is None or self.pid is None:
            return
        backends = self._signal_server(signal.SIGKILL)
        self.process.wait()

        def gone() -> bool:
            # a backend forked as the postmaster died is orphaned, and found by its working directory
            stragglers = working_in(str(self.data_dir))
            for pid in stragglers:
                signal_process(pid, signal.SIGKILL)
            return not stragglers and not running(backends)

        # until every backend has exited (a zombie has: it holds no shared memory), so a restart finds none
        if not poll(gone, timeout=10.0, every=0.01):
            raise EnvironmentFailure(f"postgres: backends of the killed server still run after 10 s: {sorted(running(backends))}")

