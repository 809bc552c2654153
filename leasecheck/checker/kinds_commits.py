"""The commit family of docs/contracts/anomaly-kinds.md: a node completed twice, or a completion lost.

``duplicate-commit`` and ``lost-commit``, checked straight from their
definitions on every node, fenced or not: a lease is named by its epoch, or by
its token when unfenced. A lost commit's explanation names each field the read
shows otherwise, so that a person sees at once what the store forgot.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from leasecheck.checker.explain import at, describe, outcome
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.model import agrees, freeze, result_of
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import SUCCEEDED


def commits(n: NodeHistory, out: Findings) -> None:
    """duplicate-commit and lost-commit: a lease is named by its epoch, or by its token when unfenced."""
    node, ops, fenced = n.node, n.ops, n.fenced
    key: Callable[[Op], Any] = (lambda o: o.value.get("epoch")) if fenced else (lambda o: freeze(o.value.get("token")))
    done = sorted((op for op in ops if op.type == "ok" and op.f == "commit"), key=lambda o: o.index)
    if not done:
        return
    first = done[0]
    keys = {key(first)}
    for c in done[1:]:
        if key(c) not in keys:
            keys.add(key(c))
            out.add(
                "duplicate-commit", node, [first, c],
                f"{describe(first)} succeeded at {at(first.complete_time)} and {describe(c)} succeeded at "
                f"{at(c.complete_time)}: two different leases both completed the node.",
            )
    reads = sorted((op for op in ops if op.type == "ok" and op.f == "read"), key=lambda o: o.invoke_time)
    starts = [r.invoke_time for r in reads]
    # the owner each lease's ok claim asked for: of the claims invoked before the commit completed, the first to
    # complete (a claim invoked later cannot be the committed lease's; counting it made the explanation of a history
    # so far differ from the whole history's, see leasecheck.checker.online)
    claims = sorted((op for op in ops if op.type == "ok" and op.f == "claim"), key=lambda o: (o.complete_time or 0, o.index))

    def owner_of(c: Op, want: Any) -> Any:
        assert c.complete_time is not None
        return next((op.value.get("owner") for op in claims if op.invoke_time < c.complete_time
                     and (op.result.get("epoch") if fenced else freeze(op.result.get("token"))) == want), None)

    for c in done:
        want = key(c)
        assert c.complete_time is not None  # an ok op completed
        for r in reads[bisect_right(starts, c.complete_time):]:
            v = r.result
            seen_key = v.get("epoch") if fenced else freeze(v.get("token"))
            if (
                v.get("status") == SUCCEEDED
                and (seen_key is None or seen_key == want)
                and ("result" not in v or agrees(result_of(c), v["result"]))  # not given: not compared
            ):
                continue
            out.add("lost-commit", node, [c, r], lost_commit_explanation(c, r, fenced, owner_of(c, want)))


def lost_commit_explanation(c: Op, r: Op, fenced: bool, owner: Any = None) -> str:
    """Why read ``r`` loses commit ``c``: each field it shows otherwise (status, epoch or token, owner,
    result) with both values, and the fields it agrees on.

    ``owner`` is what the lease's claim asked to be recorded (None: no claim
    said): it never makes the anomaly (docs/contracts/anomaly-kinds.md compares status, epoch and
    result), but a read that shows another owner says whose lease the store
    kept, so it is named too. A field the read does not give is not compared; a
    null result of a read that shows SUCCEEDED is.
    """
    v = r.result
    lease = "epoch" if fenced else "token"
    stated = c.value.get("result")
    #: (field, what the commit made it, what the read shows, compared)
    fields: list[tuple[str, Any, Any, bool]] = [
        ("status", SUCCEEDED, v.get("status"), True),
        (lease, c.value.get(lease), v.get(lease), v.get(lease) is not None),
        ("owner", owner, v.get("owner"), owner is not None and v.get("owner") is not None),
        ("result", stated, v.get("result"),
         stated is not None and "result" in v and (v["result"] is not None or v.get("status") == SUCCEEDED)),
    ]

    def value(name: str, x: Any) -> str:
        return str(x) if name == "status" else repr(x)

    def field_(name: str, x: Any) -> str:
        return f"no {name}" if x is None else f"{name} {value(name, x)}"

    compared = [(name, made, seen) for name, made, seen, yes in fields if yes]
    differ = [f"{field_(name, seen)} instead of {value(name, made)}" for name, made, seen in compared if freeze(made) != freeze(seen)]
    same = [field_(name, made) for name, made, seen in compared if freeze(made) == freeze(seen)]
    made = [field_(name, x) for name, x, _, _ in fields[1:] if x is not None]
    agreed = f" ({_listed(same)} agree)" if same else ""
    return (
        f"{describe(c)} succeeded at {at(c.complete_time)}, making the node SUCCEEDED"
        f"{' with ' + _listed(made) if made else ''}; but {describe(r)}, invoked later at {at(r.invoke_time)}, "
        f"shows {_listed(differ) or outcome(r)}{agreed}."
    )


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)
