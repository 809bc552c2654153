"""Installing for a store: every client library is an extra, named wherever it is missing; listing imports none.

``leasecheck targets`` lists every registered backend from its class attributes
alone: each backend's module imports its client library (psycopg, redis, kazoo,
etcd3 and gRPC, SQLAlchemy, filelock, portalocker, ...) only where it uses it, and
the class declares what it needs (``requires``) and the extra that installs it
(``extra``). This holds the line as tests/local/test_startup.py does: by the modules a
fresh interpreter has loaded when the command exits, not by a timing.

A library that is not installed is simulated in the child interpreter by
``sys.modules[name] = None`` (Python's own way to make a module unimportable:
``import`` raises ModuleNotFoundError and ``importlib.util.find_spec`` finds
nothing), so the suite's environment, which has every extra, can play a user's
that has none. The child then says what a user without the extra sees.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.targets.registry import EXTRA_OF_MODULE, available, load

#: the client libraries of the backends (and what they pull in): listing the backends loads none of them
CLIENTS = ("psycopg", "psycopg_binary", "redis", "kazoo", "etcd3", "grpc", "google.protobuf", "sqlalchemy",
           "sqlalchemy_dlock", "filelock", "portalocker", "redis_lock", "docker")

PROBE = (
    "import atexit, json, sys\n"
    "for name in filter(None, sys.argv.pop(1).split(',')):\n"
    "    sys.modules[name] = None  # not installed, as far as this process can tell\n"
    "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + json.dumps(sorted(m for m in sys.modules if sys.modules[m] is not None)) + '\\n'))\n"
    "from leasecheck.cli import main\n"
    "main()\n"
)


def leasecheck(*args: str, without: tuple[str, ...] = (), cwd: Path | None = None) -> tuple[int, str, str, set[str]]:
    """``leasecheck ARGS`` in a fresh interpreter where the modules ``without`` are not installed.

    Its exit code, stdout, stderr (without the probe's line) and the modules it had loaded at exit.
    """
    r = subprocess.run([sys.executable, "-c", PROBE, ",".join(without), *args], capture_output=True, text=True,
                       timeout=120, cwd=cwd)
    err, _, modules = r.stderr.rpartition("\nMODULES ")
    return r.returncode, r.stdout, err.strip(), set(json.loads(modules))


def clients_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == c or m.startswith(c + ".") for c in CLIENTS))


def rows_of(stdout: str) -> dict[str, dict]:
    return {row["name"]: row for row in map(json.loads, stdout.splitlines())}


# ------------------------------------------------------------------ listing loads no client library


def test_targets_json_lists_every_backend_and_loads_no_client_library() -> None:
    rc, out, err, modules = leasecheck("targets", "--json")
    assert rc == 0, err
    rows = rows_of(out)
    assert set(rows) == set(available())
    assert "leasecheck.targets.postgres_lease" in modules and "leasecheck.targets.locks.etcd3_lock" in modules
    assert clients_in(modules) == []
    for name, row in rows.items():
        assert "error" not in row, row
        assert row["store"] and isinstance(row["fenced"], bool) and row["summary"], name
        assert row["installed"] is True, row  # the suite's environment has every extra
    assert rows["postgres"]["requires"] == ["psycopg"] and rows["postgres"]["extra"] == "postgres"
    assert rows["sqlite"]["requires"] == [] and rows["sqlite"]["extra"] is None


def test_the_targets_table_loads_no_client_library_either() -> None:
    rc, out, err, modules = leasecheck("targets")
    assert rc == 0, err
    assert "sqlalchemy-dlock" in out and "etcd3-lock" in out and "not installed" not in out
    assert clients_in(modules) == []


# ------------------------------------------------------------------ a missing library names its extra


@pytest.mark.parametrize(("library", "extra", "backends"), [
    ("psycopg", "postgres", {"postgres", "postgres-client-clock", "postgres-fence-in-memory", "postgres-grace-after-failover"}),
    ("redis", "redis", {"redis", "redis-token", "redis-no-increment", "redis-queue-as-authority"}),
    ("kazoo", "audit", {"kazoo-lock", "kazoo-lock-zxid"}),
    ("sqlalchemy_dlock", "audit", {"sqlalchemy-dlock"}),
])
def test_a_backend_whose_library_is_missing_is_listed_with_its_extra(library: str, extra: str, backends: set[str]) -> None:
    rc, out, err, _ = leasecheck("targets", "--json", without=(library,))
    assert rc == 0, err
    rows = rows_of(out)
    assert set(rows) == set(available())  # every row is still there, described from its class
    lacking = {name for name, row in rows.items() if not row["installed"]}
    assert lacking >= backends
    for name in lacking:
        row = rows[name]
        assert library in row["missing"] and row["summary"], row
        assert row["install"] == f"pip install 'leasecheck[{row['extra']}]'", row
    for name in backends:
        assert rows[name]["install"] == f"pip install 'leasecheck[{extra}]'"
    rc, table, err, _ = leasecheck("targets", without=(library,))
    assert rc == 0, err
    for name in backends:
        assert f"not installed (needs {library}): pip install 'leasecheck[{extra}]'" in what_it_is(table, name), table


def what_it_is(table: str, name: str) -> str:
    """The last column of ``name``'s row in the ``leasecheck targets`` table, all its lines."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {name} "))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("│ ") or lines[i].split("│")[1].strip()), len(lines))
    return "\n".join(line.split("│")[-2].strip() for line in lines[start:end])


def test_audit_adapters_that_need_redis_name_the_audit_extra() -> None:
    """redis-py-lock needs only redis, but the audited libraries are installed together: ``[audit]``."""
    rows = rows_of(leasecheck("targets", "--json", without=("redis",))[1])
    for name in ("redis-py-lock", "python-redis-lock", "portalocker-redis"):
        assert rows[name]["install"] == "pip install 'leasecheck[audit]'"
    assert rows["sqlite"]["installed"] and rows["postgres"]["installed"]


@pytest.mark.parametrize(("target", "library", "extra"), [
    ("postgres", "psycopg", "postgres"),
    ("postgres-client-clock", "psycopg", "postgres"),
    ("redis", "redis", "redis"),
    ("etcd3-lock", "etcd3", "audit"),
])
def test_run_without_the_library_exits_3_naming_the_extra(tmp_path: Path, target: str, library: str, extra: str) -> None:
    """A missing extra is the user's to install, known before anything starts: a usage error (exit 3), not the environment's."""
    rc, out, err, modules = leasecheck("run", "--target", target, "--time-limit", "1", "--store", str(tmp_path / "st"),
                                       without=(library,))
    assert rc == 3, err
    assert err == f"leasecheck run: {target!r} needs {library}, which is not installed: pip install 'leasecheck[{extra}]'"
    assert "Traceback" not in err and "replay" not in out + err
    assert not (tmp_path / "st").exists()  # refused before anything was made or started
    assert "leasecheck.servers.postgres" not in modules


def test_audit_without_the_library_exits_3_naming_the_extra() -> None:
    rc, _, err, _ = leasecheck("audit", "kazoo", without=("kazoo",))
    assert rc == 3 and err.count("\n") == 0, err
    assert "kazoo, which is not installed: pip install 'leasecheck[audit]'" in err and err.count("pip install") == 1


def test_an_adapter_whose_own_import_lacks_a_client_is_told_the_extra(tmp_path: Path) -> None:
    """A team's adapter imports psycopg at its top (as `new-target` writes it): the line names the extra too."""
    (tmp_path / "acme_pg.py").write_text(textwrap.dedent(
        '''
        import psycopg

        from leasecheck.targets.postgres_lease import PostgresLease

        class AcmeLease(PostgresLease):
            """Acme's lease."""
            name = "acme"
        '''
    ))
    rc, _, err, _ = leasecheck("run", "--target", "acme_pg:AcmeLease", "--store", str(tmp_path / "st"), without=("psycopg",),
                               cwd=tmp_path)
    assert rc == 3, err
    assert err.startswith("leasecheck run: 'acme_pg:AcmeLease': cannot import acme_pg")
    assert err.endswith(": pip install 'leasecheck[postgres]'") and err.count("\n") == 0


TEAM_ADAPTER = textwrap.dedent(
    '''
    from leasecheck.targets.sqlite_lease import SqliteLease

    class TeamLease(SqliteLease):
        """A team's Postgres adapter, as `new-target --store-kind postgres` writes it: no requires declared."""
        name, store = "team", "postgres"
    '''
)


def test_a_run_that_must_start_a_server_without_its_client_exits_3_naming_the_extra(tmp_path: Path) -> None:
    """leasecheck asks a Postgres server it started whether it is ready through psycopg: seen as an internal error, exit 4."""
    (tmp_path / "team_pg.py").write_text(TEAM_ADAPTER)
    rc, out, err, modules = leasecheck("run", "--target", "team_pg:TeamLease", "--store", str(tmp_path / "st"),
                                       without=("psycopg",), cwd=tmp_path)
    assert rc == 3, err
    assert err == ("leasecheck run: --target team_pg:TeamLease: starting a postgres server needs psycopg, which is not installed: "
                   "pip install 'leasecheck[postgres]'")
    assert not (tmp_path / "st").exists() and "leasecheck.servers.postgres" not in modules
    assert "replay" not in out + err  # refused before the banner


def test_the_plugins_stores_say_which_extra_a_server_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `new-target`'s generated test shows ("no store for ...: ...") instead of ModuleNotFoundError: No module named 'psycopg'."""
    from leasecheck.errors import EnvironmentFailure
    from leasecheck.kit.testing import Stores
    from leasecheck.targets.sqlite_lease import SqliteLease

    class TeamLease(SqliteLease):
        name, store = "team", "redis"

    monkeypatch.delenv("LEASECHECK_URL", raising=False)
    monkeypatch.setitem(sys.modules, "redis", None)
    with Stores(tmp_path / "servers") as stores, pytest.raises(EnvironmentFailure) as failed:
        stores.url(TeamLease, tmp_path)
    assert str(failed.value) == "starting a redis server needs redis, which is not installed: pip install 'leasecheck[redis]'"
    assert stores.started == {}


# ------------------------------------------------------------------ what each backend declares, and the extras


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _closure(extra: str, extras: dict[str, list[str]]) -> tuple[set[str], set[str]]:
    """The extras ``extra`` installs (itself included) and the distributions they name, lower-cased."""
    seen: set[str] = set()
    dists: set[str] = set()
    todo = [extra]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            m = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", req)
            assert m, req
            if m.group(1) == "leasecheck":
                todo.extend(e.strip() for e in (m.group(2) or "").split(","))
            else:
                dists.add(m.group(1).lower())
    return seen, dists


def _provided(dists: set[str]) -> set[str]:
    """The distributions ``dists`` install, with their own requirements one level down, lower-cased."""
    out = set(dists)
    for dist in dists:
        for req in importlib.metadata.requires(dist) or ():
            if "extra ==" not in req:
                out.add(re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0].lower())
    return {d.replace("_", "-") for d in out}


def _client_imports(module_file: str) -> set[str]:
    """The client libraries a module imports anywhere (at its top, in a function, under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(module_file).read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        found |= {n.partition(".")[0] for n in names if n.partition(".")[0] in EXTRA_OF_MODULE}
    return found


@pytest.mark.parametrize("name", sorted(available()))
def test_every_backend_declares_the_libraries_its_module_imports_and_an_extra_that_installs_them(name: str) -> None:
    cls = load(name)
    assert _client_imports(inspect.getfile(cls)) <= set(cls.requires), f"{name}: declare them in requires"
    if not cls.requires:
        assert cls.extra is None, name
        return
    extras = _pyproject()["project"]["optional-dependencies"]
    assert cls.extra in extras, f"{name}: extra {cls.extra!r} is not in pyproject.toml"
    _, dists = _closure(cls.extra, extras)
    installed = _provided(dists)
    providers = importlib.metadata.packages_distributions()
    for module in cls.requires:
        assert {p.lower().replace("_", "-") for p in providers[module]} & installed, f"{name}: [{cls.extra}] does not install {module}"
        # the hint for a team's own adapter that imports the module names an extra that installs it too
        assert {p.lower().replace("_", "-") for p in providers[module]} & _provided(_closure(EXTRA_OF_MODULE[module], extras)[1])


def test_all_installs_every_backends_extra_and_pytest_is_a_base_dependency() -> None:
    """`all`: every backend's client library and the container SDK; pytest for the plugin and new-target's test comes with leasecheck."""
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    named, _ = _closure("all", extras)
    wanted = {load(name).extra for name in available()} - {None}
    assert wanted | {"docker"} <= named, f"[all] misses {sorted(wanted - named)}"
    assert not {"test", "bench", "docs"} & named, "[all] is for using leasecheck; the suite's tools are [test]"
    assert any(re.fullmatch(r"pytest>=\d+(\.\d+)*", d) for d in project["dependencies"]), project["dependencies"]
    for req in [*project["dependencies"], *(r for e in ("postgres", "redis", "docker", "audit") for r in extras[e])]:
        assert req.startswith("leasecheck[") or re.search(r"(>=|==)\d", req), f"no lower bound: {req}"
