"""The image a store's container runs: the one asked for if the engine has it, else one made here.

**No registry needed.** The machines this runs on reach no image registry, so
an image is chosen like this (:func:`choose_image`):

1. the image asked for (``redis:7``, ``postgres:16`` by default) if the engine
   already has it — it is used as it is, its own binaries on its own PATH;
2. else, only when ``pull=True``, pulled from its registry (never by default:
   a pull on a machine without a registry hangs for the client's timeout, and
   a test suite must send no traffic off the machine);
3. else the *host-root* image (:func:`ensure_base_image`): an image made by
   ``docker import`` of an empty tar, run with the host's ``/usr``, ``/lib``,
   ``/lib64``, ``/bin``, ``/sbin`` and ``/etc`` bind-mounted read-only, so the
   container runs the host's own ``redis-server`` / ``postgres``. The server's
   log says which of the three happened.
"""

from __future__ import annotations

import io
import logging
import os
import tarfile
from dataclasses import dataclass

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import Mount

from leasecheck.servers.base import EnvironmentFailure

#: a child of the runner's logger, so these lines land in the run's leasecheck.log
log = logging.getLogger("leasecheck.run.docker")

#: the local, registry-free base image (see ensure_base_image)
HOSTROOT_IMAGE = "leasecheck/hostroot:1"
#: host directories the host-root image is run with, read-only (those that exist)
HOST_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")


def connect_engine(timeout_s: float = 60.0) -> docker.DockerClient:
    """A client for the local engine (``DOCKER_HOST`` or the default socket), checked with a ping."""
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except DockerException as e:
        raise EnvironmentFailure(f"docker: no engine answers ({e}); start one with scripts/start-dockerd.sh") from None
    return client


def _empty_tar() -> bytes:
    """A valid tar archive with no member: the root filesystem of the host-root image."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    return buffer.getvalue()


def ensure_base_image(client: docker.DockerClient, tag: str = HOSTROOT_IMAGE) -> str:
    """Make sure the host-root image exists locally; return its tag.

    It is ``docker import`` of an empty tar: no layer content, no registry, no
    network, ~0.1 s. It has no files of its own — every container made from it
    gets the host's system directories bind-mounted read-only (:data:`HOST_DIRS`)
    and runs the host's binaries. Idempotent; safe to race (both imports give
    the same empty image, the tag just moves).
    """
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    repository, _, version = tag.rpartition(":")
    try:
        client.api.import_image_from_data(
            _empty_tar(), repository=repository, tag=version, changes=["LABEL leasecheck.image=hostroot"]
        )
        client.images.get(tag)
    except (APIError, ImageNotFound) as e:
        raise EnvironmentFailure(f"docker: cannot build the base image {tag} from an empty tar: {e}") from None
    log.info("built base image %s (docker import of an empty tar)", tag)
    return tag


@dataclass(frozen=True)
class ImageChoice:
    """The image a server runs, and whether it needs the host's directories (host-root)."""

    image: str
    hostroot: bool
    note: str


def choose_image(client: docker.DockerClient, wanted: str | None, pull: bool = False) -> ImageChoice:
    """``wanted`` if present locally (or pulled, when ``pull``); else the host-root image. See the module doc."""
    if wanted:
        try:
            client.images.get(wanted)
            return ImageChoice(wanted, False, f"image {wanted} (present locally)")
        except ImageNotFound:
            pass
        if pull:
            try:
                client.images.pull(wanted)
                return ImageChoice(wanted, False, f"image {wanted} (pulled)")
            except DockerException as e:
                reason = f"pulling it failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        else:
            reason = "not present locally and pulling is off"
        note = f"image {wanted}: {reason}; falling back to {HOSTROOT_IMAGE} with the host's binaries"
    else:
        note = f"image {HOSTROOT_IMAGE} with the host's binaries"
    return ImageChoice(ensure_base_image(client), True, note)


def host_mounts() -> list[Mount]:
    """The host's system directories (those that exist), read-only: what a host-root container runs on."""
    return [Mount(path, path, type="bind", read_only=True) for path in HOST_DIRS if os.path.exists(path)]
