"""A simulated *correct* lease store: the ground truth of every generated history.

The property tests (``tests/support/sim.py``) and the benchmarks (``bench/gen.py``) both need
histories whose verdict is known without a checker. Both get them from a
discrete-event simulation whose store is this one class: every operation takes
effect at one linearization point strictly inside its (invoke, completion), and
``SimStore.apply`` answers it there exactly as the lease model of docs/contracts/lease-model.md allows
(``read-resource`` too: the resource's fence and the log of the effects it accepted),
plus the time rules of a real store (a lease ends ttl after its last claim or renew,
misjudged by at most the clock uncertainty). One store for both means a fix to the
ground truth reaches the tests and the benchmarks at once.

It lives in the package (not in ``tests/`` or ``bench/``) so that both import it by
its one name, however pytest or a benchmark is started. Pure Python, no I/O, and no
randomness of its own: the caller's ``random.Random`` decides everything, so a seed
gives the same history.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED

MS = 1_000_000  # nanoseconds per millisecond

#: how the store's clock misjudges each lease's length, within the clock uncertainty:
#: "exact" (never), "random" (drawn per grant / renew), "fast" (leases end up to the
#: uncertainty early) or "slow" (up to the uncertainty late)
StoreClock = Literal["exact", "random", "fast", "slow"]

#: (completion type, completion value): ("ok", {...}) or ("fail", {"reason": ...})
Outcome = tuple[str, dict[str, Any]]


@dataclass(slots=True)
class SimNode:
    """The store's durable record of one node, plus its protected resource."""

    status: str = READY
    epoch: int = 0  # the largest epoch granted (the current lease's)
    owner: str | None = None
    result: str | None = None
    expires: int = 0  # harness ns at which the current lease runs out (the store's view)
    resource_max: int = 0  # the protected resource's fence: largest epoch accepted (or granted, under "lease")
    tokens: dict[str, int] = field(default_factory=dict)  # unfenced: token -> hidden epoch
    accepted: list[dict[str, Any]] = field(default_factory=list)  # the resource's log: each accepted effect, in order


class SimStore:
    """A correct fenced (or token-based unfenced) lease store; ``apply`` at a time.

    Fenced, claims hand out epochs 1, 2, ... per node and the protected resource
    accepts an effect iff its epoch is ≥ the resource's fence. ``effect_fence``
    says what moves that fence, as the history header will: ``"lease"`` (like the
    reference backends) lifts it at every granted claim, in the claim's own step;
    ``"token"`` (a storage service that knows only what it was shown) only at
    accepted effects. Unfenced, a claim hands out an opaque token and the resource
    asks the store whether it is the newest lease's, the way a backend without
    fencing tokens must; ``effect_fence`` does not apply.
    """

    def __init__(
        self,
        ttl_ns: int,
        *,
        clock_uncertainty_ns: int = 0,
        fenced: bool = True,
        store_clock: StoreClock = "exact",
        rng: random.Random | None = None,
        nodes: Iterable[str] = (),
        effect_fence: EffectFence = "lease",
    ) -> None:
        if store_clock == "random" and clock_uncertainty_ns and rng is None:
            raise ValueError("a randomly misjudging store clock needs an rng")
        if not fenced and rng is None:
            raise ValueError("an unfenced store needs an rng for its tokens")
        self.ttl = ttl_ns
        self.cu = clock_uncertainty_ns
        self.fenced = fenced
        self.store_clock = store_clock
        self.effect_fence: EffectFence = effect_fence
        self.rng = rng
        self.nodes: dict[str, SimNode] = {}
        self._tokens = 0
        for n in nodes:
            self.add(n)

    def add(self, node: str) -> None:
        self.nodes[node] = SimNode()

    def _lease_end(self, t: int) -> int:
        if self.store_clock == "fast":
            return t + self.ttl - self.cu
        if self.store_clock == "slow":
            return t + self.ttl + self.cu
        if self.store_clock == "random" and self.cu:
            assert self.rng is not None
            return t + self.ttl + self.rng.randint(-self.cu, self.cu)
        return t + self.ttl

    def _new_token(self) -> str:
        assert self.rng is not None
        self._tokens += 1
        return f"tok-{self._tokens}-{self.rng.randint(0, 0xFFFF):04x}"

    def apply(self, t: int, f: str, node: str, value: dict[str, Any]) -> Outcome:
        """Apply one operation at its linearization point ``t`` (harness ns)."""
        st = self.nodes[node]
        if f == "claim":
            return self._claim(t, st, value["owner"])
        if f == "read":
            return "ok", read_value(st, self.fenced)
        if f == "read-resource":  # fence and log at one point: the ground truth a correct store's read gives
            return "ok", {"fence": st.resource_max if self.fenced else None, "accepted": [dict(e) for e in st.accepted]}
        # the epoch an op names: carried (fenced) or looked up by its token (unfenced)
        e = value["epoch"] if self.fenced else st.tokens.get(value.get("token"), -1)  # type: ignore[arg-type]
        if f == "effect":
            outcome = self._effect(st, e)
            if outcome[0] == "ok":
                entry = {"epoch": e} if self.fenced else {"epoch": None, "token": value.get("token")}
                st.accepted.append({**entry, "payload": value.get("payload", "")})
            return outcome
        return self._lease_op(t, st, f, e, value)

    def _claim(self, t: int, st: SimNode, owner: str) -> Outcome:
        if st.status == SUCCEEDED:
            return "fail", {"reason": "terminal"}
        if st.status == RUNNING and st.expires > t:
            return "fail", {"reason": "held"}
        st.epoch += 1
        st.status, st.owner, st.result = RUNNING, owner, None
        st.expires = self._lease_end(t)
        if self.fenced:
            if self.effect_fence == "lease":  # the resource is coupled to the store: the claim fences it
                st.resource_max = max(st.resource_max, st.epoch)
            return "ok", {"epoch": st.epoch}
        token = self._new_token()
        st.tokens[token] = st.epoch
        return "ok", {"epoch": None, "token": token}

    def _effect(self, st: SimNode, e: int) -> Outcome:
        # fenced: the resource's own fence check (never below its fence, which a
        # claim has lifted already under "lease");
        # unfenced: the resource asks the store whether the token is the newest lease's
        if self.fenced:
            if e >= st.resource_max:
                st.resource_max = e
                return "ok", {}
            return "fail", {"reason": "stale"}
        return ("ok", {}) if e == st.epoch else ("fail", {"reason": "stale"})

    def _lease_op(self, t: int, st: SimNode, f: str, e: int, value: dict[str, Any]) -> Outcome:
        """renew, commit, release: only the current, held, unexpired lease."""
        if e < st.epoch:
            return "fail", {"reason": "stale"}
        if st.status == SUCCEEDED:
            return "fail", {"reason": "terminal"}
        if st.status != RUNNING:
            return "fail", {"reason": "not-owner"}
        if st.expires <= t:
            return "fail", {"reason": "expired"}
        if f == "renew":
            st.expires = self._lease_end(t)
        elif f == "commit":
            st.status, st.result = SUCCEEDED, value["result"]
        elif f == "release":
            st.status, st.owner = READY, None
        else:
            raise ValueError(f"not a lease operation: {f!r}")
        return "ok", {}


def read_value(st: SimNode, fenced: bool = True) -> dict[str, Any]:
    """What a read returns: status and epoch, the owner unless READY, the result once SUCCEEDED."""
    out: dict[str, Any] = {"status": st.status, "epoch": st.epoch if fenced else None}
    if st.status != READY:
        out["owner"] = st.owner
    if st.status == SUCCEEDED:
        out["result"] = st.result
    return out
