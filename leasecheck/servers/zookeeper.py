"""A private standalone ZooKeeper for runs and tests: loopback only, every write fsynced.

Debian's ``zookeeper`` package ships the server as jars, no daemon we can own:
``/usr/share/java/zookeeper.jar`` names its dependencies in its manifest's
``Class-Path``, so the classpath is that jar and a logging binding
(``slf4j-simple``, which writes to stderr: LocalServer keeps it in
``zookeeper.log``). Java is exec'd directly, never through ``zkServer.sh``, so
the JVM is our direct child: the parent-death signal, pause (SIGSTOP of its
process group) and kill reach the server itself, not a shell in front of it.

Why this ``zoo.cfg``: ZooKeeper bounds a session's timeout by 2 and 20
tickTimes; the audits ask for sessions as short as a lease's ttl (1000 ms and
less), so the tick is small (``TICK_MS``) and the bounds are widened to what a
run may ask for. ``forceSync=yes`` fsyncs the transaction log before a write is
acknowledged, so ``kill-store`` tests durability, not the configuration. No
admin server (a Jetty on port 8080 that two runs would fight over); the
four-letter words are allowed, and ``srvr`` is the readiness probe: it answers
"not currently serving requests" until the database is loaded.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath

#: the server jar of Debian's zookeeper/libzookeeper-java (its manifest names the other jars)
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: an slf4j binding to log to stderr (libslf4j-java, a dependency of the package); without it the server logs nothing
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")
#: ZooKeeper's clock tick: sessions may be 2..MAX_SESSION_TICKS ticks long, and expire on a tick's boundary
TICK_MS = 100
#: the longest session a client may ask for, in ticks (60 s: ttl values far above any audit's)
MAX_SESSION_TICKS = 600
#: a small JVM that starts fast: the server holds a few hundred znodes
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-Xshare:auto", "-XX:TieredStopAtLevel=1")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def find_java() -> str:
    found = shutil.which("java")
    if found is None:
        raise EnvironmentFailure("zookeeper: java is not on PATH (install it: apt-get install -y zookeeper)")
    return found


def four_letter_word(port: int, word: str, timeout_s: float = 1.0, address: str = "127.0.0.1") -> str:
    """Send one of ZooKeeper's four-letter commands to ``address:port``; its whole answer ('' if unreachable)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer(LocalServer):
    """Standalone ZooKeeper (Debian's jars) in the foreground on 127.0.0.1:PORT, data in ``directory``."""

    kind = "zookeeper"

    def __init__(self, directory: StrPath | None = None, port: int | None = None) -> None:
        if not ZOOKEEPER_JAR.exists():
            raise EnvironmentFailure(f"zookeeper: {ZOOKEEPER_JAR} is missing (install it: apt-get install -y zookeeper)")
        self.java = find_java()
        super().__init__(directory, port)

    @property
    def address(self) -> str:
        """Where clients reach it (and the only address it listens on)."""
        return "127.0.0.1"

    @property
    def url(self) -> str:
        return f"zookeeper://{self.address}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def data_directory(self) -> Path:
        return self.directory / "data"

    def config(self) -> list[str]:
        """``zoo.cfg``'s lines (the module docstring says why these); a quorum peer adds its own."""
        return [
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_directory}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.address}",
            f"minSessionTimeout={2 * TICK_MS}",
            f"maxSessionTimeout={MAX_SESSION_TICKS * TICK_MS}",
            "forceSync=yes",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,stat,mntr,cons",
            "maxClientCnxns=0",
        ]

    def _prepare(self) -> None:
        self.data_directory.mkdir(exist_ok=True)
        self.config_path.write_text("\n".join([*self.config(), ""]))

    def _command(self) -> list[str]:
        classpath = [str(ZOOKEEPER_JAR)] + ([str(SLF4J_BINDING)] if SLF4J_BINDING.exists() else [])
        return [
            self.java, *JVM_OPTIONS,
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp", ":".join(classpath),
            MAIN_CLASS, str(self.config_path),
        ]

    def _ready(self) -> bool:
        # "Zxid:" appears only once the server has loaded its database and serves requests
        return "Zxid:" in four_letter_word(self.port, "srvr")
