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


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # the most glibc takes on a 64-bit machine
_GLIBC_DEFAULT = 128 * 1024  # both thresholds' defaults


@contextmanager
def freed_memory_kept() -> Iterator[None]:
    """For the length of a command on glibc: blocks up to 32 MiB come from the heap, and freed heap
    memory stays with the process for the next allocation, instead of each block being mapped
    afresh and handed back when freed. A numpy pipeline over a million requests allocates tens of
    temporaries of a few MiB; each page of a fresh map faults on its first write (microseconds in
    a virtual machine), which was more time than some of the passes themselves. On the way out
    glibc's default thresholds are set back (fixed from then on: glibc's own raising of the mmap
    threshold as blocks are freed stays off in a process that goes on, a notebook or a test);
    the heap's free top is handed back at the next free past the trim threshold. Elsewhere (no
    glibc) nothing is done."""
    try:
        import ctypes  # numpy imports it anyway

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        yield
        return
    set_here = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    set_here = mallopt(_M_TRIM_THRESHOLD, 1 << 30) == 1 and set_here
    try:
        yield
    finally:
        if set_here:
            mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
