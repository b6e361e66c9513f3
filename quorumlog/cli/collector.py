"""Python's cycle collector during a command's start-up: paused while the command's modules load, then on again.

Loading them makes some 37,000 objects the collector tracks (classes, functions, their tables), all but a few
hundred of them kept for the life of the process. Collecting while they load was time lost (some 60
collections), and at exit Python's finalisation went over all of them again: together a fifth of `quorumlog
status`, most of it at exit. The entry points pause the collector before importing anything heavy; once the
command's modules are in, gc.freeze() moves what they made out of its reach for good (the few hundred garbage
objects among them stay: a few KB, once) and it runs again for what the command does, a node's life included.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what was allocated while paused and turn the collector back on (nothing if pause() did not)."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False
