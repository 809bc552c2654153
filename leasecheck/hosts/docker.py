"""A host that is a container (``docker://NAME``): commands by ``exec``, files by the engine's archives.

Why the SDK and not ``docker exec`` on a shell: the engine answers with the
exit code and the two outputs apart (``demux``), and files cross as tar archives
(``get_archive`` / ``put_archive``) with no shell or ``cat`` needed in the image
for a read. A command's stdin and a file's atomic replacement do need ``sh`` and
``mv`` in the container (the engine's exec has no stdin but a socket to hijack):
the input is put beside the command as a file first.

Commands run in a thread of the host's own, so a container that never answers
costs the caller ``timeout`` seconds, not the run.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.protocol import TIMEOUT_S, HostFileError, HostUnreachable, Ran
from leasecheck.waiting import poll

T = TypeVar("T")
#: runs a command with its stdin from a file put there first (argv: sh -c SCRIPT sh FILE COMMAND...)
_STDIN_SCRIPT = 'f=$1; shift; "$@" < "$f"; s=$?; rm -f "$f"; exit $s'


@dataclass
class DockerHost:
    """The container ``container`` (a name or an id) as a host named ``name``; the engine from the environment."""

    name: str
    container: str
    client: Any = None
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(4, "leasecheck-docker"), repr=False)

    def _engine(self) -> Any:
        if self.client is None:
            try:
                import docker
            except ImportError:
                raise EnvironmentFailure("docker:// hosts need the Docker SDK: pip install 'leasecheck[docker]'") from None
            try:
                self.client = docker.from_env(timeout=60)
            except docker.errors.DockerException as e:
                raise HostUnreachable(f"{self.name}: no Docker engine answers: {e}") from None
        return self.client

    def _call(self, what: str, fn: Callable[[Any], T], timeout: float) -> T:
        """``fn(container)`` in the host's thread, within ``timeout``; the engine's errors as HostUnreachable."""
        import docker

        def call() -> T:
            return fn(self._engine().containers.get(self.container))

        try:
            return self._pool.submit(call).result(timeout)
        except FutureTimeout:
            raise HostUnreachable(f"{self.name}: {what} did not finish within {timeout:g} s") from None
        except docker.errors.NotFound as e:
            raise HostUnreachable(f"{self.name}: no container {self.container}: {e.explanation or e}") from None
        except docker.errors.DockerException as e:
            raise HostUnreachable(f"{self.name}: {what}: {getattr(e, 'explanation', None) or e}") from None

    def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT_S) -> Ran:
        command = list(argv)
        if input is not None:
            stdin = f"/.leasecheck-stdin-{uuid.uuid4().hex}"  # the one folder every image has (the engine cannot write a tmpfs)
            self._put(stdin, input, timeout)
            command = ["sh", "-c", _STDIN_SCRIPT, "sh", stdin, *argv]

        def exec_run(container: Any) -> Ran:
            code, out, err = _exec(container, command)
            return Ran(tuple(argv), _returncode(code), out, err)

        return self._call(" ".join(argv), exec_run, timeout)

    def _put(self, path: str, data: bytes, timeout: float) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(posixpath.basename(path))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        directory = posixpath.dirname(path) or "/"

        def put(container: Any) -> bool:
            try:
                return bool(container.put_archive(directory, buffer.getvalue()))
            except _not_found() as e:
                raise HostFileError(f"{self.name}: cannot write {path}: {getattr(e, 'explanation', None) or e}") from None

        if not self._call(f"writing {path}", put, timeout):
            raise HostFileError(f"{self.name}: cannot write {path}: the engine refused the archive")

    def read_file(self, path: str) -> bytes:
        with tempfile.TemporaryFile() as tar_file:
            self._archive(path, tar_file)
            out = io.BytesIO()
            _copy_member(self.name, path, tar_file, out)
            return out.getvalue()

    def write_file(self, path: str, data: bytes) -> None:
        tmp = f"{path}.leasecheck-tmp"
        self._put(tmp, data, TIMEOUT_S)
        moved = self.run(["mv", "-f", tmp, path])
        if not moved.ok:
            raise HostFileError(f"{self.name}: cannot write {path}: {moved.why()}")

    def fetch(self, remote_path: str, local_path: Path) -> None:
        with tempfile.TemporaryFile() as tar_file:
            self._archive(remote_path, tar_file, timeout=300.0)
            with open(local_path, "wb") as out:
                _copy_member(self.name, remote_path, tar_file, out)

    def _archive(self, path: str, into: Any, timeout: float = TIMEOUT_S) -> None:
        """The engine's tar of ``path``, streamed into the file ``into``."""

        def get(container: Any) -> None:
            try:
                chunks, _stat = container.get_archive(path)
            except _not_found():
                raise HostFileError(f"{self.name}: cannot read {path}: no such file") from None
            for chunk in chunks:
                into.write(chunk)

        self._call(f"reading {path}", get, timeout)
        into.seek(0)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _exec(container: Any, command: list[str]) -> tuple[int | None, bytes, bytes]:
    """Run ``command`` in ``container``: its exit code, stdout and stderr.

    Not the SDK's ``exec_run``, which loses what a quick command printed now and then
    (docker/docker-py#2042, #3332): it reads the attached stream from the socket under the HTTP
    response, and the frames that came in one read with the response's headers sit in that
    response's buffer, never read. Here the frames are read through the buffer, then the exit
    code asked of the engine once the exec has ended (a read to the stream's end can come
    before the engine records the code).
    """
    api = container.client.api
    exec_id = api.exec_create(container.id, command, stdout=True, stderr=True)["Id"]
    sock = api.exec_start(exec_id, socket=True)
    response = getattr(sock, "_response", None)  # kept on the socket by the SDK, with the buffer
    try:
        out, err = _demux(response.raw._fp.fp if response is not None else io.BufferedReader(sock))
    finally:
        if response is not None:
            response.close()  # first: its close flushes the reader over the socket, an error once that is closed
        sock.close()

    def ended() -> dict[str, Any] | None:
        state: dict[str, Any] = api.exec_inspect(exec_id)
        return None if state.get("Running") else state

    return (poll(ended, TIMEOUT_S) or {}).get("ExitCode"), out, err


def _demux(reader: Any) -> tuple[bytes, bytes]:
    """The engine's multiplexed stream to its end: frames of an 8-byte header (stream, 3 zeros, size) and a payload."""
    streams = {1: bytearray(), 2: bytearray()}
    while len(header := reader.read(8)) == 8:
        size = int.from_bytes(header[4:8], "big")
        payload = reader.read(size) if size else b""
        streams.get(header[0], streams[1]).extend(payload)
        if len(payload) < size:
            break
    return bytes(streams[1]), bytes(streams[2])


def _returncode(code: int | None) -> int:
    """The engine says 128 + N for a command killed by signal N (as a shell would): minus N, as the other transports."""
    if code is None:
        return -1
    return -(code - 128) if 128 < code < 128 + 65 else code


def _not_found() -> type[Exception]:
    """The SDK's "no such container or file" (imported late: the SDK is an extra)."""
    import docker

    return docker.errors.NotFound


def _copy_member(host: str, path: str, tar_file: Any, out: Any) -> None:
    """Copy the one regular file of the archive the engine made of ``path`` into ``out``."""
    with tarfile.open(fileobj=tar_file, mode="r") as tar:
        for info in tar:
            extracted = tar.extractfile(info) if info.isfile() else None
            if extracted is not None:
                shutil.copyfileobj(extracted, out)
                return
    raise HostFileError(f"{host}: cannot read {path}: not a regular file")
