"""The contract every ``Records`` store of the audited adapters keeps (``targets/locks/lockbase.py``).

One copy of the assertions, called by each store's test module with a fresh
node on a real server: a fenced write is applied iff no larger fence wrote
before (and raises the stored fence), an effect is guarded by the same fence
that a claim lifts, and an unfenced write is plain, trusting the lock; the
resource reads back (``resource``) with the record's fence, in one snapshot.
"""

from __future__ import annotations

from leasecheck.targets.locks.lockbase import Record, Records


def fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records: Records, node: str) -> None:
    assert records.get(node) == Record("READY")
    assert records.put(node, {"status": "RUNNING", "owner": "w1", "token": "t5"}, fence=5)
    assert not records.put(node, {"status": "SUCCEEDED", "result": "late"}, fence=4)
    assert records.get(node) == Record("RUNNING", "w1", "t5", None, 5)
    assert records.put(node, {"status": "SUCCEEDED", "result": "r"}, fence=5)  # the same fence: applied
    assert records.put(node, {"status": "RUNNING", "owner": "w2", "token": "t7", "result": None}, fence=7)
    assert records.get(node) == Record("RUNNING", "w2", "t7", None, 7)  # None removed the result


def fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records: Records, node: str) -> None:
    assert records.append_effect(node, "t2", "first", fence=2)
    assert records.get(node) == Record("READY", fence=2)  # the effect raised the fence
    assert records.put(node, {"status": "RUNNING", "token": "t3"}, fence=3)  # the next holder's claim
    assert not records.append_effect(node, "t2", "zombie", fence=2)
    assert records.append_effect(node, "t3", "second", fence=3)
    assert records.effects(node) == [
        {"token": "t2", "payload": "first", "fence": 2}, {"token": "t3", "payload": "second", "fence": 3},
    ]
    assert records.get(node) == Record("RUNNING", None, "t3", None, 3)
    # read back in one snapshot: the record's fence with the entries, oldest first
    assert records.resource(node) == (3, records.effects(node))  # type: ignore[attr-defined]


def unfenced_writes_are_plain_and_trust_the_lock(records: Records, node: str) -> None:
    assert records.put(node, {"status": "RUNNING", "owner": "w1", "token": "a"}, fence=9)
    assert records.put(node, {"status": "SUCCEEDED", "result": "r", "owner": None})  # no fence: applied regardless
    assert records.append_effect(node, "old", "zombie")
    assert records.get(node) == Record("SUCCEEDED", None, "a", "r", 9)
    assert records.effects(node) == [{"token": "old", "payload": "zombie", "fence": None}]
    assert records.resource(node) == (9, [{"token": "old", "payload": "zombie", "fence": None}])  # type: ignore[attr-defined]
