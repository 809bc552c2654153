"""Faults of several victims inside ops, and faults paced by evidence (issue 34, the default gate's coverage).

Before, one fault landed inside one op (each ``paused-inside-OP`` 0 or 1 times in a 30 s run) and the schedule kept
its pace however short the run was of what a fault seeks; a default ``--until-covered`` gate hit its cap on every
seed. Now an aim arms several kinds at once and the fault takes a worker for each as it lands, an op that ends short
of its drawn boundary is held after its last reply, and a hurried schedule comes sooner with the same draws.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from leasecheck.frame.aiming import Aimer
from leasecheck.machine.aim_slot import AimSlot, Arm
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.faults import KillProcess, PauseProcess, make_kill, make_pause
from leasecheck.nemesis.inside import PAUSE_INSIDE_SHARE, SLOTS, VICTIMS, Aim, InFlight, aims_inside, choose
from leasecheck.nemesis.schedule import HURRIED, Nemesis
from leasecheck.run.holds import Hold
from leasecheck.waiting import wait_for


def test_an_aim_arms_several_kinds_and_takes_one_worker_for_each(tmp_path: Path) -> None:
    aimer = Aimer(tmp_path / "aim", resource_reads=True)
    aims = [Aim("claim", 2, 50.0), Aim("renew", 1, 40.0), Aim("release", 3, 30.0)]
    came = aimer.aim(aims, timeout_s=5.0, gather_s=5.0)
    got: list[InFlight] = []

    def notes() -> None:
        wait_for(lambda: len(AimSlot(tmp_path / "aim").armed()) == 3, timeout=5.0, what="the slot armed")
        serial = AimSlot(tmp_path / "aim").armed()[0].serial
        aimer.note(7, serial, "claim", 1, 100)  # not the armed boundary yet
        aimer.note(7, serial, "claim", 2, 100)  # lands
        aimer.note(8, serial, "claim", 2, 200)  # that kind landed already
        aimer.note(7, serial, "renew", 1, 300)  # that worker is a victim already
        aimer.note(9, serial, "effect", 1, 400)  # not armed
        aimer.note(9, serial - 1, "renew", 1, 400)  # another aim's
        aimer.note(9, serial, "release", 2, 500, True)  # ended short of its boundary: held after its last reply
        aimer.note(10, serial, "renew", 1, 600)

    threading.Thread(target=notes).start()
    got = list(came)
    assert [(op.process, op.f, op.boundary, op.last) for op in got] == [
        (7, "claim", 2, False), (9, "release", 2, True), (10, "renew", 1, False)]
    assert got[1].to_json()["how"] == "held by the worker after its last reply, before its completion was stamped"
    assert AimSlot(tmp_path / "aim").armed() == ()  # disarmed once all landed
    aimer.close()


def test_the_others_are_waited_for_a_little_once_the_first_landed(tmp_path: Path) -> None:
    aimer = Aimer(tmp_path / "aim", resource_reads=True)
    came = aimer.aim([Aim("claim", 1, 50.0), Aim("renew", 1, 40.0)], timeout_s=30.0, gather_s=0.2)

    def note() -> None:
        wait_for(lambda: bool(AimSlot(tmp_path / "aim").armed()), timeout=5.0, what="the slot armed")
        aimer.note(3, AimSlot(tmp_path / "aim").armed()[0].serial, "claim", 1, 0)

    threading.Thread(target=note).start()
    began = time.monotonic()
    assert [op.process for op in came] == [3]
    assert time.monotonic() - began < 5.0  # the gather's 0.2 s, not the aim's 30
    aimer.close()


def test_choose_draws_distinct_kinds_landed_least_first(tmp_path: Path) -> None:
    aimer = Aimer(tmp_path / "aim", resource_reads=False)
    aimer.landed("pause").update({"claim": 2, "renew": 1, "effect": 1, "commit": 1, "read": 3})
    for seed in range(20):
        draws = choose(aimer, "pause", random.Random(seed), most=VICTIMS)
        kinds = [d.f for d in draws]
        assert kinds[0] == "release" and set(kinds[1:]) <= {"renew", "effect", "commit"} and len(set(kinds)) == VICTIMS
        assert all(d.at == 1 for d in draws)  # no op of theirs seen yet: the first boundary, which every op has
    assert [d.f for d in choose(aimer, "pause", random.Random(1), most=0)] == ["release"]  # one at least
    assert choose(aimer, "pause", random.Random(4), 2) == choose(aimer, "pause", random.Random(4), 2)
    aimer.close()


SLOTS_KINDS = ("claim", "renew", "effect", "commit", "release", "read", "read-resource")


def test_with_a_coverage_goal_every_kind_short_of_it_is_armed_at_once(tmp_path: Path) -> None:
    """A default gate's aims armed the rarest three kinds and waited a second for a release while the claims went by;
    now every kind short of the goal is armed, and the victims are the first to come."""
    aimer = Aimer(tmp_path / "aim", resource_reads=True, want=3)
    aimer.landed("kill").update({"claim": 3, "renew": 2, "effect": 5, "commit": 0, "read": 3})
    kinds = [d.f for d in choose(aimer, "kill", random.Random(2), most=1)]
    assert kinds[:3] == sorted(kinds[:3], key=lambda f: aimer.landed("kill")[f]) and set(kinds) == {
        "commit", "release", "read-resource", "renew"}
    aimer.landed("kill").update({"commit": 3, "release": 3, "read-resource": 3, "renew": 1})
    assert len(choose(aimer, "kill", random.Random(2), most=2)) == 2  # none short: the two landed least, as without a goal
    slot = AimSlot(tmp_path / "aim")
    every = [Aim(f, 1, 10.0) for f in SLOTS_KINDS]
    assert len(every) == SLOTS
    came = aimer.aim(every, timeout_s=5.0, gather_s=5.0)
    threading.Thread(target=lambda: (wait_for(lambda: len(slot.armed()) == SLOTS, timeout=5.0, what="all armed"),
                                     aimer.note(4, slot.armed()[0].serial, "release", 1, 0))).start()
    assert next(came).f == "release"
    assert {a.f for a in slot.armed()} == set(SLOTS_KINDS) - {"release"}  # a kind that landed is disarmed at once
    came.close()  # the caller has its victims: disarmed
    assert slot.armed() == ()
    aimer.close()


def test_an_op_that_ends_before_its_boundary_is_held_after_its_last_reply() -> None:

    notes: list[tuple[int, bool]] = []
    db = sqlite3.connect(":memory:")
    began = time.monotonic()
    with Hold(Arm(1, "claim", 5, 0.05), lambda k, last: notes.append((k, last))):
        db.execute("select 1")
        db.execute("select 2")
    assert notes == [(1, False), (2, False), (2, True)]
    assert time.monotonic() - began >= 0.05
    notes.clear()
    with Hold(Arm(1, "claim", 1, 0.0), lambda k, last: notes.append((k, last))):
        db.execute("select 1")
        db.execute("select 2")
    assert notes == [(1, False), (2, False)]  # held at its boundary: not again at the end


class W:
    def __init__(self, slot: int, pid: int) -> None:
        self.slot, self.process, self.pid = slot, 10 + slot, pid


class Landed:
    """An aiming whose workers all hold an op of each armed kind at once (what the factory sees from a real run)."""

    def __init__(self, workers: Sequence[W], ops: tuple[str, ...] = ("claim", "renew", "effect", "read")) -> None:
        self.workers, self.ops = workers, ops
        self.counts: dict[str, Counter[str]] = {}
        self.armed: list[Aim] = []
        self.want: int | None = None
        self.before = False
        self.needs: frozenset[str] = frozenset()

    def landed(self, fault: str) -> Counter[str]:
        return self.counts.setdefault(fault, Counter())

    def required(self, fault: str) -> frozenset[str]:
        return self.needs

    def boundaries(self, f: str) -> int:
        return 1

    def holding(self, pid: int) -> bool:
        return True

    def outlast(self, op: InFlight) -> None:
        return None

    def aim(self, aims: Sequence[Aim], timeout_s: float, gather_s: float) -> Iterator[InFlight]:
        self.armed = list(aims)
        for aim, w in zip(aims, self.workers):
            yield InFlight(w.process, aim.f, 1000 * w.slot, 1, aim.hold_ms)


def test_a_pause_aims_inside_while_a_kind_is_short_else_by_the_seed_and_a_kill_always() -> None:
    """Without a goal (or once none is short) a pause stops a holder between ops as often as one inside an op, by the
    seed: on SQLite a stop inside a write's transaction freezes every rival, so the holder pauses make the zombies."""
    aiming = Landed([])
    draws = [aims_inside(aiming, "pause", random.Random(seed)) for seed in range(200)]
    assert 0.35 < sum(draws) / len(draws) < 0.65 and PAUSE_INSIDE_SHARE == 0.5
    assert draws == [aims_inside(aiming, "pause", random.Random(seed)) for seed in range(200)]  # the seed's
    assert all(aims_inside(aiming, "kill", random.Random(seed)) for seed in range(50))
    aiming.want = 2
    aiming.landed("pause").update({"claim": 2, "renew": 2, "effect": 2, "read": 1})
    assert all(aims_inside(aiming, "pause", random.Random(seed)) for seed in range(50))  # read is short
    aiming.landed("pause")["read"] += 1
    assert not all(aims_inside(aiming, "pause", random.Random(seed)) for seed in range(50))  # none short: the mix
    assert not aims_inside(None, "pause", random.Random(1))
    aiming.want, aiming.needs = None, frozenset({"effect"})  # --require paused-inside-effect, never landed yet
    aiming.counts.clear()
    aiming.landed("pause").update({"claim": 1, "renew": 1, "read": 1})
    assert all(aims_inside(aiming, "pause", random.Random(seed)) for seed in range(50))
    assert all(choose(aiming, "pause", random.Random(seed))[0].f == "effect" for seed in range(50))  # armed first
    aiming.landed("pause")["effect"] += 1
    assert not all(aims_inside(aiming, "pause", random.Random(seed)) for seed in range(50))  # landed: the mix again


def test_a_required_inside_situation_names_the_kinds_a_fault_must_land_in(tmp_path: Path) -> None:
    aimer = Aimer(tmp_path / "aim", resource_reads=False, require=("paused-inside-claim", "killed-inside-read-resource",
                                                                   "claim-race-ready", "killed-inside-commit"))
    try:
        assert aimer.required("pause") == {"claim"} and aimer.required("kill") == {"commit"}  # no resource reads here
    finally:
        aimer.close()


def test_a_pause_stops_a_worker_inside_each_kind_and_heals_them_all(sleepers: list[int]) -> None:
    workers = [W(i, pid) for i, pid in enumerate(sleepers)]
    aiming = Landed(workers)
    ctx = FaultContext(ttl_ms=1000, workers=lambda: workers, aiming=aiming)
    fault = make_pause(ctx, random.Random(1))
    assert isinstance(fault, PauseProcess)
    value = fault.start()
    try:
        assert len(aiming.armed) == 3  # five running: three victims leave two
        assert value["victims"] == [10, 11, 12] and value["pids"] == sleepers[:3] and value["pid"] == sleepers[0]
        assert [i["f"] for i in value["inside"]] == [a.f for a in aiming.armed]
        assert [i["process"] for i in value["inside"]] == [10, 11, 12]
        assert all(psutil.Process(pid).status() == psutil.STATUS_STOPPED for pid in sleepers[:3])
        assert all(psutil.Process(pid).status() != psutil.STATUS_STOPPED for pid in sleepers[3:])
        assert fault.undo_record() == {"kind": "sigcont", "pids": sleepers[:3], "tree": True}
        assert sum(aiming.landed("pause").values()) == 3
        # a second pause now (a seed whose draw aims it inside): three of five are stopped, two run; one victim at most
        again = make_pause(ctx, random.Random(3))
        assert isinstance(again, PauseProcess) and len(aiming.armed) == 1
    finally:
        assert fault.heal() == {"victims": [10, 11, 12], "pid": sleepers[0]}
    wait_for(lambda: all(psutil.Process(pid).status() != psutil.STATUS_STOPPED for pid in sleepers), timeout=5.0,
             what="every victim continued")


def test_a_kill_takes_a_worker_inside_each_kind(sleepers: list[int]) -> None:
    workers = [W(i, pid) for i, pid in enumerate(sleepers)]
    ctx = FaultContext(ttl_ms=1000, workers=lambda: workers, aiming=Landed(workers))
    fault = make_kill(ctx, random.Random(3))
    assert isinstance(fault, KillProcess)
    value = fault.start()
    assert value["victims"] == [10, 11, 12] and len(value["inside"]) == 3
    wait_for(lambda: all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                         for pid in sleepers[:3]), timeout=5.0, what="the victims dead")
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in sleepers[3:])


def test_a_hurried_fault_whose_aim_missed_waits_for_the_next_tick(sleepers: list[int]) -> None:
    workers = [W(i, pid) for i, pid in enumerate(sleepers)]

    class Missing(Landed):
        def aim(self, aims: Sequence[Aim], timeout_s: float, gather_s: float) -> Iterator[InFlight]:
            return iter(())

    aiming = Missing(workers)
    hurried = {"pause": False}
    ctx = FaultContext(ttl_ms=1000, workers=lambda: workers, aiming=aiming, hurried=lambda f: hurried[f])
    assert isinstance(make_pause(ctx, random.Random(1)), PauseProcess)  # not hurried: falls back to a worker
    hurried["pause"] = True
    assert isinstance(make_pause(ctx, random.Random(1)), PauseProcess)  # never landed yet: falls back (it must start)
    aiming.landed("pause")["claim"] += 1
    assert make_pause(ctx, random.Random(1)) is None


def _ticks(hurry: bool, seconds: float) -> list[str]:
    log: list[str] = []

    class Note:
        def __init__(self, name: str) -> None:
            self.name = name

        def start(self) -> dict[str, Any]:
            log.append(self.name)
            return {"victims": [self.name]}

        def heal(self) -> dict[str, Any] | None:
            return None

        def undo_record(self) -> dict[str, Any] | None:
            return None

    def row(name: str) -> FaultKind:
        return FaultKind(name, "a toy", (0.0, 0.0), ("a", "b"), frozenset(), lambda ctx, rng: Note(name), seeks=(f"{name}-short",))

    kinds = [row("pause"), row("kill")]
    n = Nemesis(kinds, 0.2, FaultContext(ttl_ms=100), lambda f, v: None, random.Random(5), max_active=10,
                hurry=lambda kind: hurry and kind.name == "pause")
    n.start()
    time.sleep(seconds)
    n.heal_all()
    return log


def test_a_hurried_schedule_comes_sooner_with_the_same_draws() -> None:
    slow, fast = _ticks(False, 2.0), _ticks(True, 2.0)
    assert len(fast) > 1.3 * len(slow)  # the pause's turns (half of them) wait three tenths: ~ (1 + 0.3) / 2 of the time
    assert fast[:len(slow)] == slow  # the same deal, only sooner
    assert HURRIED < 1


def test_the_deadline_hurries_only_the_faults_short_of_what_they_seek(tmp_path: Path) -> None:
    from leasecheck.nemesis.catalogue import FAULTS
    from leasecheck.run.deadline import Deadline
    from leasecheck.run.options import RunOptions

    kinds = (FAULTS["pause"], FAULTS["clock-bump"])
    history = tmp_path / "history.jsonl"
    history.write_text("")
    paced: list[bool] = []
    end = Deadline(history, kinds, (), 10.0, 40.0, 0.0, goal=RunOptions(until_covered=True).coverage_goal(kinds))
    end.on_pace = lambda: paced.append(True)
    assert not any(end.hurry(k) for k in kinds)  # nothing counted yet: nothing short
    end._pace(frozenset({"paused-inside-claim"}))
    assert end.hurry(FAULTS["pause"]) and not end.hurry(FAULTS["clock-bump"]) and paced == [True]
    end._pace(frozenset({"paused-inside-claim"}))
    assert paced == [True]  # told only of a change


def test_an_until_covered_run_hurries_its_short_faults_from_its_first_count_not_from_its_time_limit(tmp_path: Path) -> None:
    from leasecheck.nemesis.catalogue import FAULTS
    from leasecheck.run.deadline import Deadline
    from leasecheck.run.options import RunOptions

    kinds = (FAULTS["pause"], FAULTS["kill"])
    history = tmp_path / "history.jsonl"
    history.write_text("")
    now = time.monotonic()
    gate = Deadline(history, kinds, (), 10.0, 40.0, now, goal=RunOptions(until_covered=True).coverage_goal(kinds))
    fixed = Deadline(history, kinds, (), 10.0, 10.0, now)
    assert not gate.passed(now + 0.1) and not fixed.passed(now + 0.1)  # well before the time limit: both go on
    assert gate.hurry(FAULTS["pause"]) and gate.hurry(FAULTS["kill"])  # nothing reached yet: every inside op is short
    assert not fixed.hurry(FAULTS["pause"])  # without a goal a run keeps its pace
