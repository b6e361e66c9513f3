"""Which ledgers a bookie must not call absent (BookKeeper #2612's limbo), sans-I/O: the decision the node's
bookie (server/services/bookie.py) makes when it registers in `_meta`, and the simulator makes alike.

    limbo = BookieLimbo(read("limbo.json"), storage.ledgers(), read("registered.json"))  # before serving
    new = limbo.on_registration(registered_instance, my_instance, ledgers_naming_me)    # after reading `_meta`
    if new is not None: write("limbo.json", new) durably; limbo.persisted(new)
    (register my instance in `_meta`); write("registered.json", my_instance) durably; limbo.registered()

A bookie whose registered instance id is not its own may have lost the data the cluster wrote to it (a wiped
disk): every ledger whose ensembles name it and that it held no state for is in limbo, and its absent entries
are answered UNKNOWN rather than NO_SUCH_ENTRY, so recovery never takes a lost copy for an absent one.

"Held" means held when the storage was opened, before any request was served, by an instance that had
registered itself from this disk before: a fencing read or a recovery add that arrives before the
registration creates the ledger's state on the empty disk, and a bookie that judged by what it holds at
registration would leave that ledger out of limbo and answer NO_SUCH_ENTRY for entries it acknowledged before
the wipe. That state survives a restart, so a disk that came back empty and never registered holds nothing it
may vouch for: the instance it registered last is kept on the disk (lost with it). Until the registration is
done, every ledger is in limbo.
"""

from __future__ import annotations

from typing import Iterable


class BookieLimbo:
    def __init__(self, persisted: Iterable[int], held_at_open: Iterable[int], registered_here: str | None) -> None:
        self.ledgers: set[int] = set(persisted)  # in limbo (durable in the runtime: limbo.json)
        self.held_at_open = frozenset(held_at_open)
        self.registered_here = registered_here  # the instance this disk last registered (None: never)
        self.known = False  # compared with `_meta` since the storage was opened

    def in_limbo(self, ledger_id: int) -> bool:
        return not self.known or ledger_id in self.ledgers

    def on_registration(self, registered_instance: str | None, instance: str,
                        ledgers_naming_me: Iterable[int]) -> frozenset[int] | None:
        """The limbo set to make durable before `instance` is registered, or None when nothing is new."""
        if registered_instance == instance:
            return None
        held = self.held_at_open if self.registered_here == instance else frozenset()
        new = (set(ledgers_naming_me) - held) | self.ledgers
        return frozenset(new) if new != self.ledgers else None

    def persisted(self, ledgers: Iterable[int]) -> None:
        self.ledgers = set(ledgers)

    def registered(self, instance: str) -> None:
        self.registered_here = instance
        self.known = True

    def deleted(self, ledger_id: int) -> None:
        self.ledgers.discard(ledger_id)
