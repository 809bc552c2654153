"""The nemesis machinery: seeded schedules, overlapping faults, heal-all, and `leasecheck heal`."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from paths import REPO

from leasecheck.cli import main
from leasecheck.nemesis.catalogue import CATALOGUE, FAULTS, FaultKind, Lazy, Need, UnknownFault, import_fault_modules, lookup
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.faults import PauseProcess
from leasecheck.nemesis.heal import UNDO
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.run.options import BadOptions, RunOptions, check_store, validate
from leasecheck.rundir.storedir import load_faults, save_faults
from leasecheck.waiting import wait_for


class Toy:
    """A fault that only notes what happened to it."""

    def __init__(self, name: str, id_: int, log: list[tuple[str, str]]) -> None:
        self.name, self.id, self.log = name, f"{name}-{id_}", log

    def start(self) -> dict[str, Any]:
        self.log.append(("start", self.id))
        return {"victims": [self.id]}

    def heal(self) -> dict[str, Any] | None:
        self.log.append(("heal", self.id))
        return {"victims": [self.id]}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "toy", "id": self.id}


def toy_kinds(log: list) -> list[FaultKind]:
    """Two catalogue rows whose factories make Toys; at a ttl of 100 ms each lasts 0.1 s."""
    count = iter(range(10_000))

    def row(name: str, events: tuple[str, str]) -> FaultKind:
        return FaultKind(name, "a toy", (1.0, 1.0), events, frozenset(), lambda ctx, rng: Toy(name, next(count), log))

    return [row("pause", ("pause", "resume")), row("kill", ("kill", "start"))]


def schedule(seed: int, events: list, log: list, states: list, max_active: int = 2) -> Nemesis:
    return Nemesis(
        kinds=toy_kinds(log), interval_s=0.02, context=FaultContext(ttl_ms=100),
        record=lambda f, value: events.append((f, value["victims"][0])),
        rng=random.Random(seed), max_active=max_active, on_change=lambda active: states.append(len(active)),
    )


def wait_until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_faults_overlap_up_to_max_active_and_heal_all_undoes_the_rest() -> None:
    events: list = []
    log: list = []
    states: list = []
    n = schedule(1, events, log, states, max_active=2)
    n.start()
    wait_until(lambda: 2 in states and len([e for e in log if e[0] == "heal"]) >= 2)
    n.heal_all()
    started = [name for what, name in log if what == "start"]
    healed = [name for what, name in log if what == "heal"]
    assert sorted(started) == sorted(healed)  # nothing left active
    assert max(states) == 2 and states[-1] == 0
    assert all(f in ("pause", "kill", "resume", "start") for f, _ in events)
    for f, victim in events:  # each event is its own row's: a Toy named kill-3 starts with "kill", heals with "start"
        assert f in {"pause": ("pause", "resume"), "kill": ("kill", "start")}[victim.split("-")[0]]
    n.heal_all()  # idempotent
    assert len([e for e in log if e[0] == "heal"]) == len(healed)


@dataclass
class Twin:
    """A fault equal to every other Twin of its victim, as two pauses of one worker are (dataclass equality)."""

    victim: str
    log: list[tuple[str, int]]

    @property
    def name(self) -> str:
        return "pause"

    def start(self) -> dict[str, Any]:
        self.log.append(("start", id(self)))
        return {"victims": [self.victim]}

    def heal(self) -> dict[str, Any] | None:
        self.log.append(("heal", id(self)))
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return None


def test_equal_faults_are_each_healed_once_whichever_heals_first() -> None:
    """Seen under load: the later of two equal pauses healed on schedule took the earlier off the active list, so
    the earlier was never healed and heal_all failed with a KeyError (an internal error ending the run)."""
    log: list[tuple[str, int]] = []
    kind = FaultKind("pause", "a twin", (1.0, 1.0), ("pause", "resume"), frozenset(), lambda ctx, rng: Twin("w1", log))
    n = schedule(1, [], [], [], max_active=2)
    assert n._inflict(kind, random.Random(1)) and n._inflict(kind, random.Random(2))
    first, second = n.active
    assert first == second and first is not second
    n._heal(second)  # the later one's heal comes first
    assert n.active == [first] and n.active[0] is first
    n.heal_all()
    assert sorted(log) == sorted([("start", id(first)), ("start", id(second)), ("heal", id(second)), ("heal", id(first))])
    assert n.active == [] and not n._kind_of


def test_the_store_is_out_from_a_store_fault_s_start_to_the_end_of_its_heal() -> None:
    """What a stalled holder's wait for its takeover reads: a killed store is out until its restart is done."""
    log: list[tuple[str, int]] = []
    store = next(k for k in CATALOGUE if k.name == "kill-store")
    assert store.on_store and not next(k for k in CATALOGUE if k.name == "pause").on_store
    kind = FaultKind("kill-store", "a twin", (1.0, 1.0), ("kill", "start"), frozenset(), lambda ctx, rng: Twin("store", log),
                     store.situations)
    seen: list[bool] = []
    n = schedule(1, [], [], [])
    assert not n.store_out()
    assert n._inflict(kind, random.Random(1))
    (fault,) = n.active
    fault.heal = lambda: seen.append(n.store_out()) or {"victims": ["store"]}  # type: ignore[method-assign]
    assert n.store_out()
    n.heal_all()
    assert seen == [True] and not n.store_out()


class Held:
    """A fault of the store that refuses, as the Docker engine does (409), to start while another holds the store."""

    def __init__(self, name: str, holder: list[str], log: list[tuple[str, str, float]]) -> None:
        self.name, self.holder, self.log = name, holder, log

    def start(self) -> dict[str, Any]:
        if self.holder:
            raise RuntimeError(f"{self.name} started while {self.holder[0]} holds the store")
        self.holder.append(self.name)
        self.log.append(("start", self.name, time.monotonic()))
        return {"victims": ["store"]}

    def heal(self) -> dict[str, Any] | None:
        time.sleep(0.01)  # an engine's restart takes a while: a tick must not start a fault in the middle of it
        self.holder.remove(self.name)
        self.log.append(("heal", self.name, time.monotonic()))
        return {"victims": ["store"]}

    def undo_record(self) -> dict[str, Any] | None:
        return None


def test_faults_holding_the_store_never_overlap_nor_start_during_a_heal() -> None:
    """CI, redis@docker seed 19: a docker-pause started while a docker-kill was on or being undone on the heal thread,
    the engine answered 409 (container not running) and the run failed. Ticks every 10-30 ms, faults of 0.1 s: two
    faults of the store each wait for the other's heal to end; a worker fault (holding nothing) still overlaps them."""
    holder: list[str] = []
    log: list[tuple[str, str, float]] = []
    toys: list[tuple[str, str]] = []
    docker_kill, docker_pause = FAULTS["docker-kill"], FAULTS["docker-pause"]
    assert docker_kill.holds == docker_pause.holds == "store" and FAULTS["pause"].holds is None
    kinds = [FaultKind(k.name, "a held toy", (1.0, 1.0), k.events, frozenset(), (lambda name: lambda ctx, rng: Held(name, holder, log))(k.name),
                       k.situations, holds=k.holds) for k in (docker_kill, docker_pause)]
    count = iter(range(10_000))
    kinds.append(FaultKind("pause", "a toy", (1.0, 1.0), ("pause", "resume"), frozenset(), lambda ctx, rng: Toy("pause", next(count), toys)))
    states: list[list[str]] = []
    n = Nemesis(kinds=kinds, interval_s=0.02, context=FaultContext(ttl_ms=100), record=lambda f, value: None,
                rng=random.Random(3), on_change=lambda active: states.append(sorted(f.name for f in active)))
    n.start()
    wait_until(lambda: n.error is not None or len([e for e in log if e[0] == "heal"]) >= 6)
    n.heal_all()
    assert n.error is None, n.error
    assert {name for what, name, _ in log if what == "start"} == {"docker-kill", "docker-pause"}
    for (what, name, at), (after, next_name, next_at) in pairwise(log):  # start, heal, start, heal, ...
        assert (what, after) in (("start", "heal"), ("heal", "start")) and at <= next_at, log
        assert what == "heal" or name == next_name, log
    assert any("pause" in active and len(active) == 2 for active in states), states  # the store's hold is not everyone's


class Slow:
    """A fault whose start and heal each take a while and note when they ran (a failover, a rebuild)."""

    def __init__(self, name: str, spans: list[tuple[str, float, float]]) -> None:
        self.name, self.spans = name, spans

    def _span(self, what: str) -> dict[str, Any]:
        began = time.monotonic()
        time.sleep(0.015)
        self.spans.append((what, began, time.monotonic()))
        return {"victims": [self.name]}

    def start(self) -> dict[str, Any]:
        return self._span("start")

    def heal(self) -> dict[str, Any] | None:
        return self._span("heal")

    def undo_record(self) -> dict[str, Any] | None:
        return None


def test_a_fault_never_starts_while_another_is_being_healed() -> None:
    """CI, postgres-standby seed 1: a failover started (killing the primary) while the heal of a partition rebuilt the
    deposed member from that primary, and the rebuild's pg_basebackup timed out. Faults that hold nothing still overlap;
    their starts and heals (heal_all's included) take turns."""
    spans: list[tuple[str, float, float]] = []
    kinds = [FaultKind(name, "a slow toy", (1.0, 1.0), ("a", "b"), frozenset(), (lambda n: lambda ctx, rng: Slow(n, spans))(name))
             for name in ("isolate-primary", "failover")]
    states: list[int] = []
    n = Nemesis(kinds=kinds, interval_s=0.01, context=FaultContext(ttl_ms=60), record=lambda f, value: None,
                rng=random.Random(4), max_active=2, on_change=lambda active: states.append(len(active)))
    n.start()
    wait_until(lambda: len([s for s in spans if s[0] == "heal"]) >= 12)
    n.heal_all()
    assert n.error is None, n.error
    ordered = sorted(spans, key=lambda s: s[1])
    for (what, _, end), (after, begin, _) in pairwise(ordered):
        assert end <= begin, f"{after} began {end - begin:.4f} s before the {what} ended"
    assert 2 in states  # the faults themselves overlap


def test_the_schedule_flows_from_the_seed() -> None:
    def choices(seed: int) -> list[str]:
        log: list = []
        n = schedule(seed, [], log, [], max_active=100)  # never skips a tick
        n.start()
        wait_until(lambda: len([e for e in log if e[0] == "start"]) >= 5)
        n.heal_all()
        return [name.split("-")[0] for what, name in log if what == "start"][:5]

    assert choices(7) == choices(7)
    assert any(choices(s) != choices(7) for s in (1, 2, 3))


def test_pause_fault_stops_and_heal_resumes_a_real_process() -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        fault = PauseProcess(process=3, pid=p.pid)
        assert fault.start() == {"victims": [3], "pid": p.pid}
        wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_STOPPED)
        assert fault.undo_record() == {"kind": "sigcont", "pids": [p.pid], "tree": True}
        fault.heal()
        wait_until(lambda: psutil.Process(p.pid).status() != psutil.STATUS_STOPPED)
        assert fault.undo_record() is None
    finally:
        p.kill()
        p.wait()


def test_pause_stops_the_workers_children_too() -> None:
    """A worker's backend may run in a child (an exec: target): the pause must stop it as well."""
    p = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        child = wait_for(lambda: next(iter(psutil.Process(p.pid).children()), None), timeout=10.0, what="the shell's child")
        fault = PauseProcess(process=3, pid=p.pid)
        fault.start()
        wait_until(lambda: child.status() == psutil.STATUS_STOPPED)
        assert psutil.Process(p.pid).status() == psutil.STATUS_STOPPED
        fault.heal()
        wait_until(lambda: child.status() != psutil.STATUS_STOPPED and psutil.Process(p.pid).status() != psutil.STATUS_STOPPED)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_leasecheck_heal_resumes_what_a_dead_harness_left_stopped(tmp_path: Path) -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        p.send_signal(signal.SIGSTOP)
        wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_STOPPED)
        save_faults(tmp_path, [{"kind": "sigcont", "pids": [p.pid]}])
        r = CliRunner().invoke(main, ["heal", str(tmp_path)], catch_exceptions=False)
        assert r.exit_code == 0 and f"SIGCONT to [{p.pid}]" in r.stdout
        wait_until(lambda: psutil.Process(p.pid).status() != psutil.STATUS_STOPPED)
        assert load_faults(tmp_path) == []
        again = CliRunner().invoke(main, ["heal", str(tmp_path)], catch_exceptions=False)
        assert "nothing to heal" in again.stdout
    finally:
        p.kill()
        p.wait()


def test_leasecheck_nemeses_lists_every_fault() -> None:
    r = CliRunner().invoke(main, ["nemeses"], catch_exceptions=False)
    assert r.exit_code == 0
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names[:13] == [  # today's faults keep their names and order; a new one is appended
        "pause", "kill", "pause-store", "kill-store", "clock-bump", "clock-strobe", "clock-store",
        "partition", "latency", "bandwidth", "docker-pause", "docker-kill", "docker-disconnect",
    ]


# -------------------------------------------------------------------------- the fault catalogue


def test_leasecheck_nemeses_prints_every_catalogue_row() -> None:
    r = CliRunner().invoke(main, ["nemeses"], catch_exceptions=False)
    lines = r.stdout.splitlines()
    assert len(lines) == len(CATALOGUE)
    for line, kind in zip(lines, CATALOGUE):
        name, description = line.split(maxsplit=1)
        assert (name, description) == (kind.name, kind.description)


def test_every_row_is_complete() -> None:
    assert len(FAULTS) == len(CATALOGUE)  # names are unique
    for kind in CATALOGUE:
        low, high = kind.duration
        assert 0 <= low <= high, kind.name
        assert all(kind.events) and len(kind.events) == 2, kind.name
        assert kind.description and "\n" not in kind.description, kind.name
        if Need.TOXIPROXY in kind.needs or Need.DOCKER in kind.needs or Need.FAKETIME in kind.needs:
            assert Need.SERVER in kind.needs, kind.name  # each of those is a way to run or reach a store server


def test_docker_factories_are_lazy() -> None:
    """docker is an optional extra: the catalogue names its factories, it does not import them."""
    docker_rows = [kind for kind in CATALOGUE if Need.DOCKER in kind.needs]
    assert docker_rows and all(isinstance(kind.factory, Lazy) for kind in docker_rows)
    assert {kind.module for kind in docker_rows} == {"leasecheck.nemesis.container"}


def test_every_factory_finds_no_victim_in_an_empty_run() -> None:
    """No worker, no clock, no proxy, no server: every fault says 'not now' (None) rather than failing."""
    for kind in CATALOGUE:
        assert kind.make(FaultContext(ttl_ms=1000), random.Random(1)) is None, kind.name


class W:
    """A ready worker as the faults see it: slot, process number (10 + slot), and a pid."""

    def __init__(self, slot: int, pids: list[int]) -> None:
        self.slot, self.process, self.pid = slot, 10 + slot, pids[slot]


def test_a_factory_picks_a_ready_worker_from_the_seed(sleepers: list[int]) -> None:
    context = FaultContext(ttl_ms=1000, workers=lambda: [W(2, sleepers), W(0, sleepers), W(1, sleepers)])
    pick = [FAULTS["pause"].make(context, random.Random(seed)) for seed in range(20)]
    assert all(isinstance(f, PauseProcess) and f.pid == sleepers[f.process - 10] for f in pick)
    assert {f.process for f in pick if f is not None} == {10, 11, 12}
    again = [FAULTS["pause"].make(context, random.Random(seed)) for seed in range(20)]
    assert [f.process for f in pick if f] == [f.process for f in again if f]


def test_a_pause_or_clock_fault_aims_at_a_worker_that_holds_a_lease(sleepers: list[int]) -> None:
    workers = [W(0, sleepers), W(1, sleepers), W(2, sleepers)]
    holders: set[int] = {11}
    context = FaultContext(ttl_ms=1000, workers=lambda: workers, holders=lambda: holders)
    assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {11}  # type: ignore[union-attr]
    holders = set()  # nobody holds a lease: any worker will do
    assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {10, 11, 12}  # type: ignore[union-attr]
    writing: set[int] = {12}  # a write in flight comes first: stopped between a store's check and its write
    holders = {11}
    context = FaultContext(ttl_ms=1000, workers=lambda: workers, holders=lambda: holders, writing=lambda: writing)
    assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {12}  # type: ignore[union-attr]
    writing = set()
    assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {11}  # type: ignore[union-attr]


def test_a_pause_is_never_aimed_at_a_worker_stopped_already(sleepers: list[int]) -> None:
    """A paused worker keeps its write in flight: a second pause aimed at it again would end with the first's SIGCONT,
    while its window, recorded open until its own heal, said the worker was stopped when it ran (ci: the attribution
    test met a resume with no pause of its own open). Another writer is chosen, else a holder, else anyone running."""
    workers = [W(0, sleepers), W(1, sleepers), W(2, sleepers)]
    writing, holders = {11, 12}, {10, 12}
    context = FaultContext(ttl_ms=1000, workers=lambda: workers, holders=lambda: holders, writing=lambda: writing)
    first = PauseProcess(12, sleepers[2])
    first.start()
    try:
        assert first.paused and {FAULTS["pause"].make(context, random.Random(seed)).process  # type: ignore[union-attr]
                                 for seed in range(20)} == {11}
        writing = {12}  # the stopped one is the only writer: a holder that runs
        assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {10}  # type: ignore[union-attr]
    finally:
        first.heal()
    assert {FAULTS["pause"].make(context, random.Random(seed)).process for seed in range(20)} == {12}  # type: ignore[union-attr]


def test_each_clock_fault_of_a_run_goes_the_other_way_from_the_one_before() -> None:
    """The first by the seed, then alternating: a 30 s run's four to six clock faults set a clock behind half the time
    (with random signs after the second, a seed could get a single short window behind)."""
    from leasecheck.nemesis.worker_clocks import ClockControl

    pids = [1000, 1001, 1002]  # a clock fault acts on the workers' clock files, never on a pid
    firsts = set()
    for seed in range(6):
        clocks = ClockControl()
        try:
            for w in range(3):
                clocks.clock(w)
            context = FaultContext(ttl_ms=1000, workers=lambda: [W(0, pids), W(1, pids), W(2, pids)], clocks=clocks)
            rng = random.Random(seed)
            signs = []
            for kind in ("clock-bump", "clock-strobe", "clock-bump", "clock-strobe", "clock-bump"):
                fault = FAULTS[kind].make(context, rng)
                fault.start()  # type: ignore[union-attr]
                signs.append(fault.delta_ms > 0)  # type: ignore[union-attr]
                assert clocks.lagging(fault.victims[0]) == (fault.delta_ms < 0)  # type: ignore[union-attr]
                fault.heal()  # type: ignore[union-attr]
            assert signs == [signs[0], not signs[0]] * 2 + [signs[0]], (seed, signs)
            firsts.add(signs[0])
        finally:
            clocks.cleanup()
    assert firsts == {True, False}, "the first direction is the seed's"


def test_durations_are_drawn_in_ttls() -> None:
    context = FaultContext(ttl_ms=2000)
    for kind in CATALOGUE:
        low, high = kind.duration
        seconds = kind.duration_s(context, random.Random(4))
        assert 2 * low <= seconds <= 2 * high, kind.name


def test_unknown_faults_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownFault) as e:
        lookup(["pause", "frobnicate", "gc"])
    assert str(e.value) == f"unknown nemesis frobnicate, gc (known: {', '.join(kind.name for kind in CATALOGUE)})"
    with pytest.raises(BadOptions, match=r"unknown nemesis frobnicate \(known: pause, kill, "):
        validate(RunOptions(nemesis=("frobnicate",)))
    r = CliRunner().invoke(main, ["run", "--nemesis", "pause,frobnicate"], catch_exceptions=False)
    assert r.exit_code == 3
    assert all(kind.name in r.stderr for kind in CATALOGUE)
    assert [kind.name for kind in validate(RunOptions(nemesis=("kill", "pause")))] == ["kill", "pause"]


@pytest.mark.parametrize(
    ("nemesis", "env", "store", "refusal"),
    [
        (("docker-pause",), "local", "redis", "docker-pause needs --env docker"),
        (("pause", "docker-kill", "docker-disconnect"), "local", "postgres", "docker-kill, docker-disconnect need --env docker"),
        (("clock-store",), "docker", "postgres", "clock-store runs the store under libfaketime, which --env docker does not do"),
        (("partition",), "local", "sqlite", "has no store server"),
        (("pause-store",), "local", None, "has no store server"),
        (("docker-pause",), "docker", "sqlite", "has no store server"),
    ],
)
def test_needs_are_enforced(nemesis: tuple[str, ...], env: str, store: str | None, refusal: str) -> None:
    opts = RunOptions(nemesis=nemesis, env=env)
    with pytest.raises(BadOptions, match=refusal):
        check_store(opts, validate(opts), store)


@pytest.mark.parametrize(
    ("nemesis", "env", "store"),
    [(("docker-pause", "pause"), "docker", "redis"), (("clock-store", "partition"), "local", "postgres"), (("pause", "clock-bump"), "local", "sqlite")],
)
def test_what_a_run_provides_is_accepted(nemesis: tuple[str, ...], env: str, store: str) -> None:
    opts = RunOptions(nemesis=nemesis, env=env)
    check_store(opts, validate(opts), store)


def test_every_fault_module_registers_its_undo_records() -> None:
    """`leasecheck heal` loads the catalogue's modules; each kind of undo record then has its function."""
    modules = import_fault_modules()
    assert set(modules) == {kind.module for kind in CATALOGUE}
    assert {"sigcont", "clock-reset", "faketime-reset", "toxiproxy", "docker"} <= set(UNDO)


def test_docs_fault_table_is_the_catalogue() -> None:
    """The fault table of docs/faults.md is `leasecheck nemeses --markdown`, word for word: one list of faults."""
    r = CliRunner().invoke(main, ["nemeses", "--markdown"], catch_exceptions=False)
    assert r.exit_code == 0
    table = r.output.splitlines()
    assert len(table) == 2 + len(CATALOGUE)
    page = [line.strip() for line in (REPO / "docs" / "faults.md").read_text().splitlines()]
    start = page.index(table[0])
    assert page[start : start + len(table)] == table, "docs/faults.md's fault table differs: run `python -m leasecheck.docgen`"
    assert not page[start + len(table)].startswith("|"), "docs/faults.md's fault table has rows the catalogue lacks"


def test_every_row_requires_situations_of_the_vocabulary() -> None:
    """A run with a fault counts only if it reached what the fault exists for (docs/coverage.md)."""
    from leasecheck.histories.vocabulary import SITUATIONS

    for kind in CATALOGUE:
        assert set(kind.situations) <= set(SITUATIONS), kind.name
    store = ("pause-store", "kill-store", "partition", "docker-pause", "docker-kill", "docker-disconnect")
    power = ("power-loss", "power-loss-member", "power-loss-all")
    assert {kind.name: kind.situations for kind in CATALOGUE} == {
        "pause": ("claim-after-expiry",), "kill": ("claim-after-expiry",),
        **dict.fromkeys(store, ("lease-expires-during-store-fault",)),
        **dict.fromkeys(power, ("lease-expires-during-store-fault", "granted-before-power-loss", "claim-after-power-loss")),
        "clock-bump": ("lease-held-by-skewed-worker",), "clock-strobe": ("lease-held-by-skewed-worker",),
        "clock-store": (), "latency": (), "bandwidth": (),
        "isolate-primary": ("lease-granted-before-primary-lost", "claim-during-member-partition"),
        "partition-halves": ("claim-during-member-partition",), "partition-bridge": ("claim-during-member-partition",),
        "kill-primary": ("lease-granted-before-primary-lost", "lease-renewed-across-failover", "lease-expires-during-store-fault"),
        "pause-primary": ("lease-granted-before-primary-lost", "lease-expires-during-store-fault"),
        "failover": ("lease-granted-before-primary-lost", "lease-renewed-across-failover"), "clock-member": (),
    }


class Lost:
    """A fault on a host whose connection is lost: its start or its heal fails as the host transports say
    (:class:`~leasecheck.hosts.protocol.HostUnreachable`), until ``back`` says the host answers again."""

    def __init__(self, name: str, fail: str, back: list[bool]) -> None:
        self.name, self.fail, self.back, self.on = name, fail, back, False

    def _step(self, step: str) -> None:
        from leasecheck.hosts.protocol import HostUnreachable

        if step == self.fail and not self.back:
            raise HostUnreachable(f"db1: kill -{'STOP' if step == 'start' else 'CONT'} 4242: the connection was lost before it exited")

    def start(self) -> dict[str, Any]:
        self._step("start")
        self.on = True
        return {"victims": ["store"]}

    def heal(self) -> dict[str, Any] | None:
        if not self.on:
            return None
        self._step("heal")
        self.on = False
        return {"victims": ["store"]}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "toy", "id": self.name} if self.on else None


@pytest.mark.parametrize("fail", ["start", "heal"])
def test_a_fault_whose_host_is_lost_is_recorded_failed_and_the_run_goes_on(fail: str) -> None:
    """A host lost mid-run (issue 35): the schedule does not stop (before, the error ended the run, exit 4); the step
    that failed is a ``fault-failed`` event with the error; a heal that failed keeps the fault in ``unhealed`` (and in
    the state file, through ``on_change``), and heal_all tries it again: healed once the host answers."""
    from leasecheck.nemesis.protocol import FAULT_FAILED

    events: list[tuple[str, dict[str, Any]]] = []
    states: list[list[dict[str, Any] | None]] = []
    back: list[bool] = []
    kind = FaultKind("pause-store", "a toy", (1.0, 1.0), ("pause", "resume"), frozenset(), lambda ctx, rng: Lost("pause-store", fail, back))
    n = Nemesis(kinds=[kind], interval_s=0.02, context=FaultContext(ttl_ms=50), record=lambda f, value: events.append((f, value)),
                rng=random.Random(1), on_change=lambda active: states.append([f.undo_record() for f in active]))
    n.start()
    wait_until(lambda: n.error is not None or sum(f == FAULT_FAILED for f, _ in events) >= 3)
    assert n.error is None, n.error
    failed = [v for f, v in events if f == FAULT_FAILED]
    assert failed[0] == {"fault": "pause-store", "step": fail,
                         "error": f"db1: kill -{'STOP' if fail == 'start' else 'CONT'} 4242: the connection was lost before it exited"}
    if fail == "start":  # never on: nothing is kept, nothing to heal
        assert not [f for f, _ in events if f in ("pause", "resume")] and n.unhealed == []
        n.heal_all()
        return
    assert len(n.unhealed) >= 3 and [f for f, _ in events if f == "resume"] == [], events  # started, never healed
    assert {"kind": "toy", "id": "pause-store"} in states[-1], states[-1]  # the state file keeps it for `leasecheck heal`
    back.append(True)  # the host answers again: heal_all's second try heals every one
    n.heal_all()
    assert n.unhealed == [] and states[-1] == []
    assert len([f for f, _ in events if f == "resume"]) == len([f for f, _ in events if f == "pause"])


def test_a_run_with_a_fault_step_that_failed_is_never_valid_and_says_which() -> None:
    """The run verdict reads the ``fault-failed`` events: an otherwise valid run is unknown, naming each; a proven
    anomaly stays invalid (a proof does not depend on what the faults did)."""
    from leasecheck.checker.coverage import Coverage
    from leasecheck.nemesis.protocol import FAULT_FAILED
    from leasecheck.verdict.run_verdict import Evidence, run_verdict

    evidence = Evidence(held=1)  # a claim refused held: it tested contention, and nothing else is asked (no ops, faults)
    assert run_verdict(True, evidence, [], Coverage(), ops=()) == (True, None)
    evidence.nemesis.append((FAULT_FAILED, {"fault": "pause-store", "step": "heal", "error": "db1: the connection was lost"}))
    validity, reason = run_verdict(True, evidence, [], Coverage(), ops=())
    assert validity == "unknown" and reason is not None
    assert "what the run tested is not sure: the heal of pause-store failed (db1: the connection was lost)" in reason, reason
    assert run_verdict(False, evidence, [], Coverage(), ops=())[0] is False


def test_every_fault_declares_its_family_and_the_verdict_reads_the_families() -> None:
    """A fault's family is declared with its row, never derived from its event names or situations: the windows the
    verdict and the coverage read are the families'."""
    from leasecheck.nemesis.catalogue import FAMILIES
    from leasecheck.verdict.run_verdict import WORKER_CLOCK_FAULTS, WORKER_STOP_FAULTS

    assert {k.family for k in CATALOGUE} == set(FAMILIES)
    by = {f: sorted(k.name for k in CATALOGUE if k.family == f) for f in FAMILIES}
    assert by["worker"] == ["kill", "pause"] and by["worker-clock"] == ["clock-bump", "clock-strobe"]
    assert by["power"] == ["power-loss", "power-loss-all", "power-loss-member"]
    assert [k.name for k in WORKER_STOP_FAULTS] == ["pause", "kill"]
    assert [k.name for k in WORKER_CLOCK_FAULTS] == ["clock-bump", "clock-strobe"]
    assert all(k.loses_power == (k.family == "power") for k in CATALOGUE)
