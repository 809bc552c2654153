"""The store's power cut: its server SIGKILLed and every write it never fsynced dropped, then started again.

``kill-store`` kills a server's processes, but the kernel keeps every byte they wrote:
only a lost page cache loses what a store acknowledged before it fsynced. This fault
cuts the power of a server that runs on the power-loss layer
(:class:`~leasecheck.nemesis.context.PowerLossServer`), which holds everything unsynced
in its memory and drops it on command. It is recorded like ``kill-store`` (``kill``,
then ``start`` at the heal), and its ``kill`` event says what was dropped: ``bytes``,
``files`` and directory ``entries`` never made durable.

Nothing to undo from outside (``leasecheck heal``): what was lost stays lost, and a
server left down by a killed harness is the guard's and the run folder's to clean up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from leasecheck.nemesis.context import FaultContext, PowerLossServer


@dataclass
class PowerCut:
    """Cut the store server's power (``start``); bring it back on what survived (``heal``)."""

    server: PowerLossServer
    #: each file's latest unsynced page reaches the disk half written
    torn: bool = False
    victim: str = "store"
    name: str = "power-loss"
    down: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        dropped = self.server.power_cut(self.torn)
        self.down = True
        return {"victims": [self.victim], "dropped": dropped}

    def heal(self) -> dict[str, Any] | None:
        if not self.down:
            return None
        self.down = False
        self.server.start()
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return None


def make_power_loss(ctx: FaultContext, rng: random.Random) -> PowerCut | None:
    """The catalogue's ``power-loss``: the store's server, if it runs on the power-loss layer."""
    server = ctx.server
    if not isinstance(server, PowerLossServer) or not server.on_layer:
        return None
    return PowerCut(server)
