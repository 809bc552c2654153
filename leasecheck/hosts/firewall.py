"""The rules a partition adds to a member's firewall, each tagged with the run's id, and only those removed.

A partition between members is Jepsen's: on each side, drop every packet from
the other's address (``iptables -I INPUT -s PEER/32 -j DROP``). On a host
leasecheck did not start the firewall is the team's: it holds their rules, and
maybe another leasecheck run's. So every rule added carries a comment,
``leasecheck:RUN_ID`` (``-m comment``); a heal deletes the rules whose comment is
exactly this run's, found by reading ``iptables -S INPUT``, and nothing else;
``leasecheck heal --hosts`` after a killed harness deletes every ``leasecheck:``
rule. By hand: ``iptables -S INPUT | grep leasecheck:``, then the same line with
``-D`` for ``-A``.

Inserted first (``-I``), not appended: a host that accepts its peers by an
earlier rule (``-A INPUT -s 10.0.0.0/24 -j ACCEPT``, common under a DROP policy)
would never reach an appended DROP. ``-w`` waits for the xtables lock: two faults
on one host at once must not fail each other.
"""

from __future__ import annotations

import re
import shlex

from leasecheck.errors import BadInput, EnvironmentFailure
from leasecheck.hosts.protocol import Host

#: every comment leasecheck puts on a rule starts so
TAG = "leasecheck:"
_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
IPTABLES = ("iptables", "-w", "10")


def tag(run_id: str) -> str:
    """The comment on this run's rules; a run id is letters, digits, ``_.-`` (it goes through shells and iptables)."""
    if not _RUN_ID.match(run_id):
        raise BadInput(f"run id {run_id!r}: letters, digits, '_', '.' and '-' only, at most 200")
    return TAG + run_id


def _rule(peer: str, run_id: str) -> list[str]:
    return ["INPUT", "-s", f"{peer}/32", "-m", "comment", "--comment", tag(run_id), "-j", "DROP"]


def drop_from(host: Host, peer: str, run_id: str) -> None:
    """Drop every packet ``host`` receives from ``peer``, first of its INPUT rules; EnvironmentFailure if refused."""
    ran = host.run([*IPTABLES, "-I", *_rule(peer, run_id)])
    if not ran.ok:
        raise EnvironmentFailure(f"{host.name}: cannot cut it from {peer}: {ran.why()}")


def undrop(host: Host, peer: str, run_id: str) -> bool:
    """Delete the rule :func:`drop_from` added (one copy); False if there was none."""
    ran = host.run([*IPTABLES, "-D", *_rule(peer, run_id)])
    if ran.ok:
        return True
    if "does a matching rule exist" in ran.err or "Bad rule" in ran.err or "No chain/target/match" in ran.err:
        return False
    raise EnvironmentFailure(f"{host.name}: cannot mend its link to {peer}: {ran.why()}")


def rules(host: Host) -> list[list[str]]:
    """The host's INPUT rules as ``iptables -S INPUT`` prints them, each split into its words."""
    ran = host.run([*IPTABLES, "-S", "INPUT"])
    if not ran.ok:
        raise EnvironmentFailure(f"{host.name}: cannot read its firewall: {ran.why()}")
    return [shlex.split(line) for line in ran.out.splitlines() if line.startswith("-A ")]


def comment_of(rule: list[str]) -> str | None:
    return rule[rule.index("--comment") + 1] if "--comment" in rule[:-1] else None


def tagged(host: Host, run_id: str | None = None) -> list[list[str]]:
    """The rules of run ``run_id`` (exactly its tag), or of every leasecheck run (None)."""
    found = []
    for rule in rules(host):
        comment = comment_of(rule)
        if comment is not None and (comment == tag(run_id) if run_id is not None else comment.startswith(TAG)):
            found.append(rule)
    return found


def remove_tagged(host: Host, run_id: str | None = None) -> list[str]:
    """Delete the rules of run ``run_id`` (None: of every leasecheck run); the rules deleted, as ``-S`` printed them."""
    done = []
    for rule in tagged(host, run_id):
        ran = host.run([*IPTABLES, "-D", *rule[1:]])
        if not ran.ok:
            raise EnvironmentFailure(f"{host.name}: cannot delete {shlex.join(rule)}: {ran.why()}")
        done.append(shlex.join(rule))
    return done
