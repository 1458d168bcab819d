"""Prefix sharing as a part of the engine: the shared-prefix pool (``sim.prefix``) joined to the
session table, and each session's prefix placed at its first turn's arrival. Started by the first
session whose first turn names shared blocks (with ``memory.prefix_sharing`` on)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.config import raise_first, sharing_problems
from sim.memory import SHARED
from sim.prefix import SharedPrefixes, prefix_keys
from sim.units import SessionKV
from traces.records import Session

if TYPE_CHECKING:
    from sim.scheduler import Scheduler

# The pool's session index: above every trace session's (as a pool after the last session would
# be), and fixed, so a stream of unknown length cannot reach it. uid = index << 24 | unit stays
# below 2**63.
POOL_INDEX = (1 << 32) - 1


class PrefixSharing(SharedPrefixes):
    def __init__(self, core: Scheduler) -> None:
        raise_first(sharing_problems(core.memory_cfg, core.budget_cfg, core.sparse_cfg))
        super().__init__(core.mem, POOL_INDEX)
        self.core = core
        core.kv[POOL_INDEX] = self.pool  # policies read the pool's units through the view

    def place(self, sess: SessionKV, session: Session) -> None:
        """A session's shared prefix, at its first turn's arrival: SHARED placeholders lead its
        array, so its pages keep the positions of its whole context."""
        core = self.core
        pages = self.register(sess.index, prefix_keys(session, core.bt))
        if pages:
            sess.tier.extend(bytes([SHARED]) * pages)
            sess.tier_pages[SHARED] = pages
            sess.tokens = pages * core.bt
            core.live_pages += pages
            core.peak_live_pages = max(core.peak_live_pages, core.live_pages)

    def forget(self, index: int) -> None:
        """Session ``index`` has no turn left: let go of its record (the pool's pages stay)."""
        self.units.pop(index, None)
