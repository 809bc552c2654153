"""One pass that proves an ordinary fenced node clean, so the table runs only on the rest.

Most nodes of a real history are one or a few lease lives told in order: a claim
granted a new epoch, its holder's effects, renews and reads, a commit or a
release, failed claims of rivals in between. For such a node every row of
:data:`leasecheck.checker.table.CHECKS` finds nothing and the epoch-order decision
(:func:`leasecheck.checker.order.decide`, then ``decide_register``) says
linearizable without a search; running them costs a dozen lists, sorts and
:class:`~leasecheck.checker.precedence.MaxBefore` tables per node, which is where
the checker's time went on histories of many small nodes.

:func:`clean_counts` walks the node's ops once, in completion order, keeping a few
running values, and answers (with the node's op counts) only when it has shown
that the reference would report nothing and decide the node without a search. It
never finds anomalies: anything it cannot prove (an out-of-order op, an epoch that
goes back, a read that needs an indeterminate op, a time bound that is tight)
makes it answer None, and the caller runs the reference table on that node, which finds and
explains whatever is there. So the fast path can only change how long a verdict
takes, never what it says; the property tests hold it to the reference on
generated histories, valid and with every kind planted.

Why a running maximum is enough. Every reference check of a fenced node asks,
for an op X, about the ok ops completed strictly before X's invoke: the largest
epoch they observed (the stale kinds, ``epoch-regression``) or the largest block
``4·epoch + phase`` they belong to (the decision's real-time test). With the ops
in completion order those ops all come before X in the list, so the maximum
over everything listed before X bounds theirs from above: if X passes against
the larger set, it passes against the exact one. The other checks are proven the
same way, each against a set that contains the reference's (see the comments).

Reads of the protected resource (``read-resource``) name no epoch and change
nothing, so the pass only counts them; a node with one is then held to the
resource row itself (:func:`~leasecheck.checker.kinds_resource.resource_findings`,
which yields nothing on a clean node): one look at its reads more, and a node
without pays nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leasecheck.checker.kinds_resource import resource_findings
from leasecheck.checker.model import agrees, freeze
from leasecheck.histories import Header, Op
from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED

NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class Rules:
    """What the history's header makes of a node's checks, worked out once per history."""

    #: ``effect_fence: "token"``: an effect is judged only against accepted effects
    token_fence: bool
    #: ttl − clock uncertainty in ns, when ``overlapping-lease`` and ``premature-expiry`` apply (None: they do not)
    surely_held_ns: float | None
    #: ttl + clock uncertainty in ns, when ``stuck-lease`` applies (None: it does not)
    surely_expired_ns: float | None

    @classmethod
    def of(cls, header: Header) -> Rules:
        """The same figures :class:`~leasecheck.checker.findings.NodeHistory` computes, by the same arithmetic."""
        held = (header.ttl_ms - header.clock_uncertainty_ms) * NS_PER_MS
        expired = (header.ttl_ms + header.clock_uncertainty_ms) * NS_PER_MS
        return cls(
            token_fence=header.effect_fence == "token",
            surely_held_ns=held if header.deadlines and held > 0 else None,
            surely_expired_ns=expired if header.deadlines else None,
        )


def clean_counts(ops: list[Op], rules: Rules) -> tuple[int, int, int] | None:
    """The node's (ok, fail, info) op counts when the reference provably finds nothing on it
    and decides it without a search; None when that is not proven (the node may well be
    clean): run the reference on it. The counts are the verdict's stats, taken in this pass.
    """
    try:
        counts = _scan(ops, rules)
        if counts is None:
            return None
        ok, fails, infos, resource_reads = counts
        # the node's resource was read: the pass above proved its lease clean, and the resource row finds nothing
        # exactly when the function it runs yields nothing (one pass over the reads, on this node alone)
        if resource_reads and next(resource_findings(ops, "token" if rules.token_fence else "lease"), None) is not None:
            return None
        return ok, fails, infos
    except (KeyError, TypeError):
        # a field the common case always has is missing, or an ok or failed op has no
        # completion time: leave it to the reference
        return None


def _scan(ops: list[Op], rules: Rules) -> tuple[int, int, int, int] | None:
    """(ok, fail, info, ok reads of the resource) when the lease rows provably find nothing, else None."""
    token_fence = rules.token_fence
    window = rules.surely_held_ns
    slack = rules.surely_expired_ns
    fails = infos = 0
    last_done = -1  # completion times are non-decreasing in the list, or we give up
    max_seen = 0  # largest epoch observed by an ok op listed so far (0: a READY read's)
    max_effect = 0  # largest epoch of an ok effect listed so far ("token")
    max_block = -1  # largest block 4·epoch + phase of an ok lease op listed so far
    # the current lease: the last ok claim's epoch (0: none yet), owner and invoke, the
    # latest invoke of its ok renews, the earliest invoke of an ok or info release of it
    lease = 0
    owner: Any = None
    claimed_at = 0
    renewed_at: int | None = None
    released_at: int | None = None
    ended = 0  # the epoch the last ok commit or release ended (0: none)
    ended_by_commit = False
    committed = 0  # the epoch of the ok commit (0: none)
    result: Any = None  # what the ok commit recorded
    granted_done: int | None = None  # completion of the last ok claim or renew invoked before it completed
    maybe_from: int | None = None  # earliest invoke of an info claim or renew listed so far
    resource_reads = 0  # ok reads of the protected resource: judged after the pass (they name no epoch)
    done: int  # an ok or failed op's completion (None would raise TypeError below: not proven)
    for op in ops:
        typ = op.type
        f = op.f
        if typ == "ok":
            done = op.complete_time  # type: ignore[assignment]
            if done < last_done or op.invoke_time > done:
                return None  # out of completion order, or completed before it was invoked
            last_done = done
            if f == "read-resource":
                resource_reads += 1
                continue
            e = op.epoch
            if type(e) is not int:
                return None  # the decision needs an epoch for every ok op: the search decides
            if f == "effect":
                # stale-effect: an accepted effect below an epoch observed (or accepted) before it
                if e < (max_effect if token_fence else max_seen):
                    return None
                if e > max_effect:
                    max_effect = e
                if e > max_seen:
                    max_seen = e
                continue
            if f == "claim":
                # epoch-regression and duplicate-epoch; the epoch is > 0 since max_seen ≥ 0
                if e <= max_seen or committed:
                    return None  # (a later epoch after the commit: the decision refutes it)
                if window is not None and lease and _may_overlap(done, claimed_at, renewed_at, released_at, window):
                    return None
                max_seen = e
                max_block = 4 * e
                lease = e
                claimed_at = op.invoke_time
                owner = op.value.get("owner")
                renewed_at = released_at = None
                if claimed_at < done:
                    granted_done = done
                continue
            # every other ok op names the current lease's epoch (a READY read may show epoch 0
            # before any claim): an older one would be stale or behind its block, a newer
            # one was granted by no ok claim (an info claim would have to be matched to it:
            # the reference's business)
            if e != lease:
                return None
            if f == "read":
                block = _read_block(op.result, e, lease, ended, ended_by_commit, result, owner)
                if block is None or block < max_block:
                    return None
                max_block = block
                continue
            if not lease or e < max_seen:
                return None  # no claim granted it; stale-renew, stale-commit (a release behind it)
            if f == "renew":
                if 4 * e + 1 < max_block:
                    return None
                max_block = 4 * e + 1
                t = op.invoke_time
                if renewed_at is None or t > renewed_at:
                    renewed_at = t
                if t < done:
                    granted_done = done
            elif f == "commit" or f == "release":
                if ended == e or 4 * e + 2 < max_block:
                    return None  # two ends of one epoch, or an end behind its block
                max_block = 4 * e + 2
                ended = e
                if f == "commit":
                    if committed:
                        return None
                    committed = e
                    ended_by_commit = True
                    result = op.value.get("result")  # a read compares it only when a str (above)
                else:
                    ended_by_commit = False
                    t = op.invoke_time
                    if released_at is None or t < released_at:
                        released_at = t
            else:
                return None
        elif typ == "fail":
            fails += 1
            done = op.complete_time  # type: ignore[assignment]
            if done < last_done:
                return None
            last_done = done
            if f == "claim" and slack is not None and op.result["reason"] == "held":
                # stuck-lease: an info claim or renew invoked before the refusal completed, or
                # a grant invoked before it whose lease had not surely expired by its invoke
                if (maybe_from is None or maybe_from >= done) and (
                        granted_done is None or op.invoke_time > granted_done + slack):
                    return None
            elif (window is not None and (f == "renew" or f == "commit" or f == "release")
                  and op.result["reason"] == "expired"
                  and _maybe_premature(op.epoch, done, lease, claimed_at, renewed_at, window)):
                return None
        elif typ == "info":
            infos += 1
            if f == "claim" or f == "renew":
                t = op.invoke_time
                if maybe_from is None or t < maybe_from:
                    maybe_from = t
            elif f == "commit" or f == "release":
                e = op.value.get("epoch")
                if type(e) is not int:
                    return None  # the decision cannot place it: the search decides
                if f == "release" and e == lease and lease:
                    t = op.invoke_time
                    if released_at is None or t < released_at:
                        released_at = t
        else:
            return None
    ok = len(ops) - fails - infos
    if ok == resource_reads:
        return None  # no ok op names an epoch: is it fenced at all? The reference knows
    return ok, fails, infos, resource_reads


def _may_overlap(done: int, claimed_at: int, renewed_at: int | None, released_at: int | None, window: float) -> bool:
    """``overlapping-lease`` not disproven for a claim completed at ``done`` over the current lease (claimed, last
    renewed, released at those invokes). The previous holder is the last claim (epochs grow in list order), and its
    renews and ok releases were all listed before this claim (a later one would be stale); an info release listed
    later could only excuse it, so not counting it errs toward "not proven"."""
    if claimed_at >= done:
        return True
    if released_at is not None and released_at < done:
        return False
    t = claimed_at
    if renewed_at is not None:
        if renewed_at >= done:
            return True
        if renewed_at > t:
            t = renewed_at
    return done < t + window


def _read_block(r: Any, e: int, lease: int, ended: int, ended_by_commit: bool, result: Any, owner: Any) -> int | None:
    """The block ``4·epoch + phase`` of an ok read of the current lease's epoch ``e`` that agrees with what the pass
    has seen (its owner, the end and result it shows); None: not proven."""
    status = r["status"]
    if status == RUNNING:
        if not lease:
            return None
        block = 4 * e + 1
    elif status == READY and not e:
        return 3
    elif status in (READY, SUCCEEDED):
        # the state this epoch's end left: that end is listed before (it completed
        # first, else the read's block would be behind it) and must be the one
        # the read shows, with the result it recorded
        if not lease or ended != e or ended_by_commit != (status == SUCCEEDED):
            return None
        if status == SUCCEEDED:
            seen = r.get("result")  # absent (a queue that stores none): the full checks decide
            if type(seen) is not str or seen != result:
                return None
        block = 4 * e + 3
    else:
        return None
    if status != READY and owner is not None:
        # agrees(owner_of(claim), seen); equal values freeze equal
        if "owner" not in r:  # not given: the full checks decide
            return None
        seen = r["owner"]
        if seen != owner and (type(owner) is str or not agrees(freeze(owner), seen)):
            return None
    # lost-commit: a read invoked after the commit completed is listed after it, so
    # its block is at least the commit's: it can only be a SUCCEEDED read of the
    # committed epoch with its result, checked above
    return block


def _maybe_premature(e: Any, done: int, lease: int, claimed_at: int, renewed_at: int | None, window: float) -> bool:
    """``premature-expiry`` not disproven for a renew, commit or release refused ``expired`` at ``done``: the grants
    of its epoch completed before its invoke are all listed before it, so the latest invoke among this lease's claim
    and ok renews listed so far bounds the reference's T from above; an older (or unknown) epoch is the reference's."""
    if type(e) is not int:
        return False
    if e != lease or not lease:
        return True
    t = claimed_at if renewed_at is None or renewed_at < claimed_at else renewed_at
    return done < t + window
