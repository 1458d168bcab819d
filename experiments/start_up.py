"""Start-up helpers shared by the command modules."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def start_up_frozen() -> Iterator[Callable[[], None]]:
    """For the length of a command: the cyclic garbage collector off while it imports its
    libraries and reads its input, until it calls the function this yields (its start-up is
    over), which freezes what exists (``gc.freeze``) and turns the collector back on; on the way
    out the frozen objects are handed back (``gc.unfreeze``).

    Importing pandas, pyarrow and pydantic makes a few hundred thousand objects that live to the
    end of the process: with the collector on, every collection that their allocation sets off
    scans them again, and so does every full one later; turned back on without the freeze, its
    first collection would scan them all at once. A caller that turned the collector off or froze
    objects of its own decides itself: nothing is done then."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield lambda: None
        return
    frozen = False

    def started() -> None:
        nonlocal frozen
        if not frozen:
            gc.freeze()
            frozen = True
            gc.enable()

    gc.disable()
    try:
        yield started
    finally:
        if frozen:
            gc.unfreeze()
        gc.enable()
