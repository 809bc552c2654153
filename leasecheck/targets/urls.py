"""Store connection strings: where a ``postgresql://`` / ``redis://`` URL or a libpq DSN connects, and the same
string pointed elsewhere.

Why here and not beside the proxies: a connection string's grammar is a backend's
concern (libpq's ``key=value`` quoting, Redis' default port), while the network
nemesis only deals in ``host:port`` endpoints. The runner joins the two: it asks
:func:`store_endpoint` where the store is, gets a proxy's endpoint from the
nemesis, and hands the worker :func:`with_endpoint`'s rewritten URL.
"""

from __future__ import annotations

import re
import urllib.parse

#: default ports of the stores the runner starts, for URLs that leave the port out
DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379, "zookeeper": 2181, "etcd": 2379,
                 "sentinel": 26379}


#: the URL schemes each store kind's clients take (a Postgres store also takes a libpq ``key=value`` DSN)
SCHEMES = {
    "postgres": ("postgresql", "postgres"), "redis": ("redis", "rediss", "unix", "redis+sentinel"),
    "zookeeper": ("zookeeper",), "etcd": ("etcd",),
}


def url_problem(store: str | None, url: str) -> str | None:
    """What is wrong with ``url`` as the address of a ``store`` (a target's store kind), or None.

    Only the grammar, before anything starts: whether the store answers there is
    the run's to find out (an environment failure, exit 4). A file store (sqlite,
    files) takes any path, an ``exec:`` child or a store of its own any string.
    """
    schemes = SCHEMES.get(store or "")
    if schemes is None:
        return None
    if "://" in url:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in schemes:
            return f"a {store} address starts with {' or '.join(s + '://' for s in schemes)}, not {parts.scheme}://"
        if parts.scheme.lower() != "unix" and not parts.netloc and not urllib.parse.parse_qs(parts.query).get("host"):
            return f"{url!r} names no host"
        return _ports_problem(url, parts)
    if store == "postgres":
        try:
            if _dsn_fields(url):
                return None
        except ValueError:
            pass
        return f"{url!r} is neither a postgresql:// URL nor a libpq key=value connection string"
    return f"{url!r} is not a {store} address: expected {schemes[0]}://HOST:PORT"


def _ports_problem(url: str, parts: urllib.parse.SplitResult) -> str | None:
    """A port that is not a number, in a one-host address or any host of a multi-host one (a cluster's)."""
    hostports = parts.netloc.rpartition("@")[2].split(",")
    for hostport in hostports:
        port = hostport.rpartition("]")[2].rpartition(":")[2] if ":" in hostport.rpartition("]")[2] else ""
        if port and not port.isdigit():
            return f"{url!r}: port could not be cast to integer value as {port!r}"
        if not hostport and len(hostports) > 1:
            return f"{url!r}: an empty host in its list of hosts"
    return None


def hosts_of(url: str) -> list[tuple[str, int]]:
    """Every (host, port) of a multi-host address (``scheme://h1:p1,h2:p2/...``), default ports filled in."""
    parts = urllib.parse.urlsplit(url)
    default = DEFAULT_PORTS.get(parts.scheme.lower().removeprefix("redis+"), 0)
    out = []
    for hostport in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
        out.append((host.strip("[]"), int(port) if port else default))
    return out


def store_endpoint(url: str) -> tuple[str, int]:
    """The TCP (host, port) a ``postgresql://``, ``redis://`` URL or a libpq ``key=value`` DSN connects to.

    Raises ValueError for what a TCP proxy cannot stand in front of: a unix
    socket, several hosts, a file path.
    """
    if "://" not in url:
        return _dsn_endpoint(url)
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"cannot proxy {scheme}:// addresses (only {', '.join(sorted(DEFAULT_PORTS))})")
    query_host = urllib.parse.parse_qs(parts.query).get("host")
    if query_host or not parts.hostname or "," in parts.netloc:
        raise ValueError(f"cannot proxy {url!r}: it needs exactly one TCP host in the address")
    return parts.hostname, parts.port or DEFAULT_PORTS[scheme]


def with_endpoint(url: str, host: str, port: int) -> str:
    """``url`` (or ``key=value`` DSN) pointed at ``host:port`` instead; user, database and options kept."""
    store_endpoint(url)  # the same refusals
    if "://" not in url:
        fields = {**_dsn_fields(url), "host": host, "port": str(port)}
        fields.pop("hostaddr", None)  # libpq would prefer it over host
        return " ".join(f"{key}={_dsn_quote(value)}" for key, value in fields.items())
    parts = urllib.parse.urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{hostport}" if userinfo else hostport))


_DSN_FIELD = re.compile(r"\s*(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")


def _dsn_fields(dsn: str) -> dict[str, str]:
    """A libpq ``key=value`` connection string as a dict (quotes and backslash escapes undone)."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(dsn.rstrip()):
        match = _DSN_FIELD.match(dsn, position)
        if match is None:
            raise ValueError(f"cannot parse the connection string {dsn!r} at {dsn[position:]!r}")
        value = match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        fields[match.group(1)] = value
        position = match.end()
    return fields


def _dsn_quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dsn_endpoint(dsn: str) -> tuple[str, int]:
    fields = _dsn_fields(dsn)
    host = fields.get("hostaddr") or fields.get("host") or ""
    if not host or host.startswith("/") or "," in host:
        raise ValueError(f"cannot proxy {dsn!r}: it needs exactly one TCP host (host=...)")
    return host, int(fields.get("port") or DEFAULT_PORTS["postgresql"])
