"""S3-FIFO's run form keeps a member's counter in a byte (``s3fifo_runs.MAX_COUNT``): a unit hit
more often than that saturates, and walks read only ``min(counter, 3)``. The run form against the
per-unit form (``test_s3fifo_runs.Twins``) past the byte's range: the same victims, moves and
reinsertions, the counters the same up to the saturation."""

from __future__ import annotations

from test_s3fifo_runs import Twins
from twin_driver import PAGE, uids_of

from sim.policies import s3fifo_runs
from sim.units import Tier


def test_counters_past_a_byte_give_the_per_unit_victims():
    twins = Twins(Tier.GPU, 20)
    cold, hot = uids_of(0, 0, 12), uids_of(1, 0, 12)
    twins.both("insert_many", cold + hot, 0.0, False)
    twins.state.update(dict.fromkeys(cold + hot, "cand"))
    twins.check()
    for t in range(s3fifo_runs.MAX_COUNT + 45):  # a hit alone, and a turn's batches
        twins.both("access", hot[0], float(t))
        twins.both("acquire", hot[1:], float(t))
        twins.both("release", hot[1:], float(t))
    twins.check()
    assert twins.runs.count_of(hot[0]) == twins.runs.count_of(hot[1]) == s3fifo_runs.MAX_COUNT
    for k in (3, 5, 7, 2):  # S's walk moves the hot units to M, M's reinserts them
        twins.gone(twins.both("evict_bytes", k * PAGE, 0.0))
        twins.check()
    assert twins.state  # (some are left: the walks went through both queues)
