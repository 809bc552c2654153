"""The conformance scenarios of a zombie: an old owner that resumes after its lease was taken over.

Its renew, commit and effect are refused and its read shows the new holder
(``zombie``); its release does not free the new holder's lease
(``zombie-release``, the classic unfenced-lock bug); and it stays out once the
new lease has lapsed too (``zombie-after-lapse``).
"""

from __future__ import annotations

import time

from leasecheck.kit.scenario_clients import claim_until_granted, closing, fresh_node, patient_ttl_ms, takeover_timeout
from leasecheck.kit.scenario_outcomes import SUPERSEDED_REFUSALS, Result, holds, lease_name, said, supersedes
from leasecheck.targets.base import Lease, Outcome, Refused, Target
from leasecheck.targets.registry import TargetSpec


def _took_over(old_client: Target, new_client: Target, node: str, spec: TargetSpec, scenario: str) -> tuple[Lease, Lease] | Result:
    """The old owner's lease, and the new holder's taken over after it expired; or the Result that ends the scenario."""
    old_client.add_node(node)
    old = old_client.try_claim(node, "zombie")
    if not isinstance(old, Lease):
        return Result(scenario, False, f"the first claim was {said(old)}")
    new = claim_until_granted(new_client, node, "successor", timeout=takeover_timeout(spec))
    if new is None:
        return Result(scenario, False, "nobody could claim after the old lease expired")
    if not supersedes(new, old):
        return Result(scenario, False, f"the takeover's {lease_name(new)} is not a later lease than the old owner's {lease_name(old)}")
    return old, new


def _judged(outcomes: dict[str, Outcome]) -> tuple[list[str], str, dict[str, str | None]]:
    """A zombie's ops judged: (those applied: not refused as superseded), "f -> outcome" words, and the facts."""
    accepted = [f for f, r in outcomes.items() if not (isinstance(r, Refused) and r.reason in SUPERSEDED_REFUSALS)]
    words = ", ".join(f"{f} -> {'ok' if r is None else r.reason}" for f, r in outcomes.items())
    return accepted, words, {f: None if r is None else r.reason for f, r in outcomes.items()}


def zombie(spec: TargetSpec) -> Result:
    """The old owner resumes after a new lease exists: its renew, commit and effect are refused, its read shows the new holder.

    Any refusal that means "not yours any more" will do (:data:`SUPERSEDED_REFUSALS`):
    a fenced store says ``stale``, a token store may say ``expired`` or
    ``not-owner``. An op that was applied is the bug, whatever the store calls it.
    The zombie's read comes after the takeover completed, so it must show the
    new lease: a client that answers from its own memory of the lease it took
    shows the zombie a node it no longer owns.
    """
    old_client, new_client = spec.make(), spec.make()
    node = fresh_node("zombie")
    with closing(old_client, new_client):
        leases = _took_over(old_client, new_client, node, spec, "zombie")
        if isinstance(leases, Result):
            return leases
        old, new = leases
        outcomes = {
            "renew": old_client.renew(old),
            "commit": old_client.commit(old, "zombie-result"),
            "effect": old_client.effect(old, "zombie-write"),
        }
        seen_by_zombie = old_client.read(node)
        state = new_client.read(node)
    accepted, words, facts = _judged(outcomes)
    if accepted:
        return Result("zombie", False, f"the old owner ({lease_name(old)}) after takeover ({lease_name(new)}): {words}; final state {state}", facts)
    if not holds(state, new):
        return Result("zombie", False, f"the old owner's ops were refused ({words}), yet the new holder lost the node: {state}", facts)
    if not holds(seen_by_zombie, new):
        return Result("zombie", False, f"the old owner's read shows a lease the store no longer has: {seen_by_zombie}, while the new holder reads {state}", facts)
    return Result("zombie", True, f"old owner's ops after takeover: {words}; both read the new holder's lease", facts)


def zombie_release(spec: TargetSpec) -> Result:
    """The old owner gives its lease back after a takeover: refused, and the new holder's lease stays its own.

    The classic unfenced-lock bug (a release that deletes the lock without
    checking whose it is) frees the *new* holder's lease: a bystander can then
    claim the node while the new holder still works. So after the zombie's
    release a bystander's claim must be refused ``held``, and the new holder
    must still renew and commit.

    The new holder asks for a lease of :func:`patient_ttl_ms`, so that its own
    lease cannot run out while the scenario probes it on a slow machine: a
    bystander's grant or a refused renew is then the zombie's doing alone.
    """
    old_client, bystander = spec.make(), spec.make()
    new_client = spec.make(ttl_ms=patient_ttl_ms(spec))
    node = fresh_node("zombie-release")
    with closing(old_client, new_client, bystander):
        leases = _took_over(old_client, new_client, node, spec, "zombie-release")
        if isinstance(leases, Result):
            return leases
        old, new = leases
        released = old_client.release(old)
        stolen = bystander.try_claim(node, "bystander")
        state = new_client.read(node)
        renewed = new_client.renew(new)
        committed = new_client.commit(new, "successor-result")
    words = (
        f"the old owner's release ({lease_name(old)}) -> {said(released)}; a bystander's claim -> {said(stolen)}; "
        f"read -> {state.status} owned by {state.owner}; the new holder's renew -> {said(renewed)}, commit -> {said(committed)}"
    )
    facts = {"release": said(released), "bystander": said(stolen), "renew": said(renewed), "commit": said(committed)}
    if isinstance(stolen, Lease) or not holds(state, new) or renewed is not None or committed is not None:
        return Result("zombie-release", False, f"the zombie's release freed the new holder's lease ({lease_name(new)}): {words}", facts)
    if not (isinstance(released, Refused) and released.reason in SUPERSEDED_REFUSALS):
        return Result("zombie-release", False, f"the zombie's release was not refused as superseded: {words}", facts)
    return Result("zombie-release", True, words, facts)


def zombie_after_lapse(spec: TargetSpec) -> Result:
    """The old owner resumes once the *new* lease has lapsed too (its holder went silent) and nobody has claimed since:
    its effect and commit are still refused.

    A store that only asks "is somebody else's lease live right now?" lets the zombie back in
    here (``sqlite-live-lease-guard``): the new holder is silent, so no live lease objects. A
    newer lease was granted, so the old one is over for good, lapsed successor or not. The
    scenario waits one and a half ttl past the takeover (the lapse is a matter of
    time: there is no event to wait on), then the old owner writes and commits.
    """
    old_client, new_client = spec.make(), spec.make()
    node = fresh_node("zombie-after-lapse")
    with closing(old_client, new_client):
        leases = _took_over(old_client, new_client, node, spec, "zombie-after-lapse")
        if isinstance(leases, Result):
            return leases
        old, new = leases
        time.sleep(1.5 * spec.config.ttl_ms / 1000 + 0.05)  # the new holder stays silent past its ttl
        outcomes = {"effect": old_client.effect(old, "zombie-write"), "commit": old_client.commit(old, "zombie-result")}
    accepted, words, facts = _judged(outcomes)
    if accepted:
        return Result("zombie-after-lapse", False,
                      f"the old owner ({lease_name(old)}) once the new lease ({lease_name(new)}) had lapsed: {words}", facts)
    return Result("zombie-after-lapse", True, f"old owner's ops once the new lease lapsed: {words}", facts)
