"""cost-belady: an offline, cost-weighted Belady *heuristic* bound (not an optimum).

Belady's MIN evicts the unit whose next use is farthest; with unequal miss costs the optimal
offline eviction is NP-hard (generalised caching; Chrobak et al., "Generalized caching is NP-hard"
for the fault model with sizes and costs), so this policy is a heuristic reference line:
evict the candidate with the lowest

    value = recovery_cost / (next_access_s - now)

i.e. cheap to lose and needed late. ``next_access_s`` is the session's next turn arrival under the
current schedule, which the engine writes at each completion (offline knowledge: this policy is an
upper-bound reference, never deployable). ``recovery_cost`` is the cost model's price of undoing the
eviction from this tier (``pensieve.recovery_cost_s``, asked once per distinct input, priced by ``costmodels.recovery``: recompute time for a unit that is dropped,
pipelined swap-in time for a GPU unit demoted to a CPU tier that can hold it).

Order, exactly: a unit never used again (next_access = inf) has value 0; a unit whose next turn has
already arrived (next_access <= now, its turn waits in the queue) has value +inf; otherwise u goes
before v iff cost_u * (next_v - now) < cost_v * (next_u - now) in exact arithmetic. Ties: lower cost,
then the later next access, then the lower uid. The value is time-dependent, so the candidates
sit in the same kinetic tournament as Pensieve's (``KineticMin`` in ``UNTIL`` mode, grouped by
next_access; all units of a session share it): O(log n) updates, O(1 + E log n) per decision for
the E certificates expired since the previous one.
"""

from __future__ import annotations

import numpy as np

from sim.policies.kinetic import UNTIL
from sim.policies.pensieve import PricesSpans, RecoveryCosts, _need_cost
from sim.policies.registry import register


@register("cost-belady")
class CostBelady(PricesSpans):
    offline = True  # reads view.next_access_s (the future)
    mode = UNTIL

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        _need_cost(ctx, self.name)
        self._recovery = RecoveryCosts(ctx)

    def unit_cost(self, uid: int) -> float:
        return self._recovery(uid)

    def unit_costs(self, uids: list[int] | range) -> list[float] | np.ndarray:
        return self._recovery.many(uids)

    session_time = True  # the session's next access

    def unit_time(self, uid: int, now: float) -> float:
        return self.view.next_access_s(uid)

    def hit_time(self, uid: int, now: float) -> float:
        return self.view.next_access_s(uid)  # cachesim sets the next access before the hit
