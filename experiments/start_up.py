"""Start-up helpers shared by the command modules."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def start_up_frozen() -> Iterator[None]:
    """The cyclic garbage collector off while a command imports its libraries and reads its
    input, then what exists is frozen (``gc.freeze``) before it is back on. Importing pandas,
    pyarrow and pydantic makes a few hundred thousand objects that live to the end of the
    process: with the collector on, the collections their allocation sets off scan them again
    and again (about an eighth of the import time); turned back on without the freeze, its first
    collection would scan them all at once. A caller that turned the collector off keeps it off
    and decides itself."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
