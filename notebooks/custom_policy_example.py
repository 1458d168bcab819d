"""A worked example: your own eviction policy, run by kvsim without registering it.

Name the class as ``module:Class`` in the experiment YAML and kvsim imports it (the repository root
must be importable, as it is when you run ``kvsim`` from it)::

    policies: [lru, "notebooks.custom_policy_example:LargestSessionFirst"]

or from Python::

    from sim import MemoryConfig, simulate
    simulate(sessions, cost, MemoryConfig(gpu_kv_gb=2, cpu_kv_gb=8),
             policy="notebooks.custom_policy_example:LargestSessionFirst")

What a policy must do (``sim.policies.base.EvictionPolicy``): keep the *candidates* of one tier (the
engine builds one instance per tier and only unpinned units are candidates) and answer
``peek(now)`` with the one to evict next, without changing anything; the base class's ``evict``
takes that unit out through ``_discard``. Units are integer ids (uids); read what you need about one
through ``self.view`` (``session(uid)``, ``first_page(uid)``, ``layer(uid)``, ``size(uid)``,
``last_access_s(uid)``). Override ``_add`` (a unit became a candidate), ``_discard`` (it stopped
being one), ``peek``, ``__len__`` and ``__contains__``; optionally ``access`` (a hit). Never read a
clock: use ``now``.

This one evicts from the session holding the most context first (``SessionKV.tokens``: a long
conversation frees the most room per decision), its last page first; ties go to the session that
came first in the trace, then to the unit that became a candidate first. The key cannot change while
a unit is a candidate (a session's tokens only grow while it runs, and then all its units are
pinned), so a heap with lazy deletion (``sim.policies.structures.LazyHeap``) is exact: O(log n) per
operation.
"""
from __future__ import annotations

from sim.policies import EvictionPolicy
from sim.policies.structures import LazyHeap


class LargestSessionFirst(EvictionPolicy):
    name = "largest-session-first"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._heap = LazyHeap()     # uid keyed (-session tokens, session index, -page, seq)
        self._seq = 0               # order of becoming a candidate: the last tie-break

    def _add(self, uid: int, now: float) -> None:
        s = self.view.session(uid)
        self._seq += 1
        self._heap.push(uid, (-s.tokens, s.index, -self.view.first_page(uid), self._seq))

    def _discard(self, uid: int) -> None:
        self._heap.discard(uid)

    def peek(self, now: float) -> int | None:
        return self._heap.min()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, uid: int) -> bool:
        return uid in self._heap
