"""The rule a policy declares with ``grows_in_bulk``, checked on the policy alone: a decode span's
allocations taken one step at a time (free a step's pages, then its new page enters pinned) and in
one batch (free the whole span's pages, then every new page enters pinned, in step order) give
the same victims, and, once the running sessions release their units, the same order of every
later victim. A policy that ``plans_pinned`` is told before the batch's eviction how many victims
precede each page. The engine's test of the same flag compares whole ledgers; this one reaches the
order that a span leaves behind, which a short trace may never read."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st
from test_batches import UniformView
from test_contract import COST, PAGE

from sim.policies import PolicyContext, available_policies, make_policy, policy_class
from sim.policies.base import EvictionPolicy
from sim.policies.s3fifo import S3FIFO
from sim.policies.s3fifo_runs import RunS3FIFO
from sim.units import Tier, uid_of

BULK = [p for p in available_policies() if policy_class(p).grows_in_bulk]
SESSIONS = 4

scenarios = st.tuples(
    st.lists(st.integers(1, 6), min_size=SESSIONS, max_size=SESSIONS),  # pages per session
    st.lists(st.integers(0, SESSIONS - 1), max_size=6),  # sessions hit before the span
    st.lists(st.booleans(), min_size=SESSIONS, max_size=SESSIONS),  # running in the span
    st.lists(st.tuples(st.integers(0, SESSIONS - 1), st.integers(0, 2)), min_size=1, max_size=8),
    st.booleans(),  # victims dropped (no tier below hears their order)
)


class Twin:
    """One policy driven the way the engine drives the GPU tier's."""

    def __init__(
        self,
        name: str,
        dropped: bool,
        capacity: int | None = None,
        policy_class: type[EvictionPolicy] | None = None,
    ) -> None:
        self.view = UniformView()
        ctx = PolicyContext(
            tier=Tier.GPU,
            block_tokens=16,
            num_layers=32,
            view=self.view,
            cost=COST,
            cpu_kv_bytes=None if dropped else 1 << 40,
        )
        self.pol = make_policy(name, ctx) if policy_class is None else policy_class(ctx)
        if capacity is not None:
            self.pol.set_capacity(capacity * PAGE)
        self.pages = [0] * SESSIONS
        self.gone: set[int] = set()

    def new_pages(self, s: int, k: int, now: float) -> list[int]:
        view = self.view
        uids = [uid_of(s, self.pages[s] + i) for i in range(k)]
        self.gone.difference_update(uids)
        for i, uid in enumerate(uids):
            view.first[uid], view.npages[uid], view.sizes[uid] = self.pages[s] + i, 1, PAGE
            view.last[uid], view.next[uid] = now, now + 10.0 * (s + 1)
        self.pages[s] += k
        view.sessions[s].tokens += 16 * k
        return uids

    def held(self, s: int) -> list[int]:
        return [u for u in map(lambda p: uid_of(s, p), range(self.pages[s])) if u not in self.gone]

    def forget_tail(self, s: int) -> None:
        """The session's last units that left the tier are forgotten: its next pages take their
        uids again (which a ghost list may remember)."""
        while self.pages[s] and uid_of(s, self.pages[s] - 1) in self.gone:
            self.pages[s] -= 1

    def victims(self, n: int, now: float) -> list[int]:
        got = [u for a, b in self.pol.evict_extents(n * PAGE, now) for u in range(a, b)]
        self.gone.update(got)
        return got


def drive(name: str, scenario, bulk: bool, twin=None, early: int = 0, reuse: bool = False):
    """The victims of the span and, after its turns end, every later victim in order. ``twin``
    (a ``Twin``) to drive one built otherwise; ``early`` victims leave before the span, and
    ``reuse``: the span's sessions take the uids of their last units that left again."""
    pages, hits, running, steps, dropped = scenario
    t = twin or Twin(name, dropped)
    now = 0.0
    for s in range(SESSIONS):  # a turn each: its pages enter, then it ends
        t.pol.insert_many(t.new_pages(s, pages[s], now), now, True)
        now += 1.0
        t.pol.release(t.held(s), now)
    for s in hits:  # a later turn hits the session's pages (in the tier, all of them)
        now += 1.0
        for uid in t.held(s):
            t.view.last[uid] = now
        t.pol.acquire(t.held(s), now)
        t.pol.release(t.held(s), now + 0.5)
    now += 1.0
    t.victims(early, now)
    live = [s for s in range(SESSIONS) if running[s]]
    for s in live if reuse else ():
        t.forget_tail(s)
    for s in live:  # the span's sessions are admitted: pinned
        t.pol.acquire(t.held(s), now)
    steps = [(live[s % len(live)], k) for s, k in steps] if live else []
    span: list[int] = []
    if bulk and t.pol.plans_pinned:  # the engine's batch, the pages and their places told first
        pages = [u for s, _ in steps for u in t.new_pages(s, 1, now)]
        t.pol.plan_pinned(pages, list(accumulate(k for _, k in steps)))
        span += t.victims(sum(k for _, k in steps), now)
        t.pol.insert_many(pages, now, True)
    elif bulk:  # the engine's batch: every step's victims, then every new page
        span += t.victims(sum(k for _, k in steps), now)
        t.pol.insert_many([u for s, _ in steps for u in t.new_pages(s, 1, now)], now, True)
    else:
        for s, k in steps:
            span += t.victims(k, now)
            t.pol.insert_many(t.new_pages(s, 1, now), now, True)
    now += 1.0
    for s in live:  # the span's turns end
        for uid in t.held(s):
            t.view.last[uid] = now
        t.pol.release(t.held(s), now)
    after: list[int] = []
    while victim := t.victims(1, now + 1.0):
        after += victim
    return (sorted(span) if dropped else span), after


@settings(max_examples=150, deadline=None)
@given(scenarios)
def test_a_span_in_one_batch_equals_its_steps_one_by_one(scenario):
    for name in BULK:
        assert drive(name, scenario, bulk=True) == drive(name, scenario, bulk=False), name


class PerUnitS3FIFO(S3FIFO):
    """S3-FIFO with one entry per unit where units have one size (``S3FIFO`` builds the run form
    there, but not for a subclass)."""


@settings(max_examples=300, deadline=None)
@given(
    scenarios,
    st.integers(3, 30),  # capacity in pages (the engine sets one)
    st.integers(0, 10),  # victims before the span (none: the first eviction is the span's)
    st.booleans(),  # the span's pages take uids that left the tier again (ghosts, perhaps)
    st.sampled_from([S3FIFO, PerUnitS3FIFO]),
)
def test_an_s3fifo_span_in_one_batch_equals_its_steps(scenario, capacity, early, reuse, form):
    """S3-FIFO, in both forms: a page enters M before the first eviction (once S holds its share)
    or as a ghost hit, else S; G trims its oldest keys as the span's victims enter. The victims,
    every later victim, and G after the span are those of one step at a time."""
    got = []
    for bulk in (True, False):
        t = Twin("s3fifo", scenario[-1], capacity, form)
        assert isinstance(t.pol, RunS3FIFO) == (form is S3FIFO)
        ghost: list[list[int]] = []
        release = t.pol.release

        def release_and_look(uids, now, release=release, t=t, ghost=ghost):
            release(uids, now)
            ghost.append(list(t.pol._ghost))

        t.pol.release = release_and_look  # G as each turn ends (the span's last)
        got.append((drive("s3fifo", scenario, bulk, t, early, reuse), ghost))
    assert got[0] == got[1]
