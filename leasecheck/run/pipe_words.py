"""The words a lease run's worker sends the recorder on its pipe, declared once: their names, fields and answers.

Why a module of its own: the worker's end (:mod:`.worker_pipe`, :mod:`.workload`)
writes them and the recorder (:mod:`.recorder`) reads them, through a
:class:`multiprocessing.connection.Connection` that carries plain tuples (one
pickle each, no class to import in the worker's hot path). The first item of a
message is its :class:`Word`; the fields after it are listed here, and the
recorder's table of answers is keyed by these names, so a word said on one side
and not understood on the other is a ``KeyError`` at the first message, not a
silently dropped event.
"""

from __future__ import annotations

from typing import Final


class Word:
    """A message's kind (its first item), with the fields that follow it. Plain strings, not an enum: a word goes
    over the pipe with every op, and a string pickles in a few bytes where an enum member names its class."""

    #: (f, node, value, t, wait): an op invoked at history time ``t``; ``wait``: a racing claim, held until its
    #: rival's claim is in (answered True)
    INVOKE: Final = "invoke"
    #: (type, value, t): the op in flight completed
    COMPLETE: Final = "complete"
    #: (completion, message): a completion held back to go with the worker's next message (one send for two)
    BATCH: Final = "batch"
    #: (serial, f, boundary, invoked, last): an op held for the nemesis' aim reached a request boundary
    BETWEEN: Final = "between"
    #: (t,): asleep until history time ``t`` at least: nothing it sends next is stamped earlier
    IDLE: Final = "idle"
    #: (): up, past its start-up; a fault may hit it from now on
    HELLO: Final = "hello"
    #: (message,): its backend client could not be made
    BROKEN: Final = "broken"
    #: (node, key, phase, timeout_s): a stalled worker waits for its node's phase (answered "reached" or not)
    AWAIT: Final = "await"
    #: (): the next delivery, please (answered with a node, a tagged delivery, "" for none yet, None: stop)
    NEXT: Final = "next"
    #: (node,): granted a lease it will write late in; a contender may wait for it
    LATE: Final = "late"
    #: (node,): the node's work is done: acknowledged to the queue
    DONE: Final = "done"
    #: (node,): given back: the queue hands it out again at once
    REQUEUE: Final = "requeue"
    #: (counts,): a worker that ran without recording reports its op counts at exit
    TALLY: Final = "tally"
    #: (): its process number is retired after an ``info`` op (answered with the next)
    RENUMBER: Final = "renumber"


#: every word
WORDS: Final = tuple(v for k, v in vars(Word).items() if k.isupper())
#: the words whose worker waits for the recorder's answer: nothing it sends next is stamped before that answer
ASKS = frozenset({Word.NEXT, Word.AWAIT, Word.RENUMBER})
#: the words that carry a history event (what a dead worker's unread messages are searched for)
EVENTS = frozenset({Word.INVOKE, Word.COMPLETE})

__all__ = ["ASKS", "EVENTS", "WORDS", "Word"]
