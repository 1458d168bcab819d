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

    def __init__(self, name: str, dropped: bool) -> None:
        self.view = UniformView()
        ctx = PolicyContext(
            tier=Tier.GPU,
            block_tokens=16,
            num_layers=32,
            view=self.view,
            cost=COST,
            cpu_kv_bytes=None if dropped else 1 << 40,
        )
        self.pol = make_policy(name, ctx)
        self.pages = [0] * SESSIONS
        self.gone: set[int] = set()

    def new_pages(self, s: int, k: int, now: float) -> list[int]:
        view = self.view
        uids = [uid_of(s, self.pages[s] + i) for i in range(k)]
        for i, uid in enumerate(uids):
            view.first[uid], view.npages[uid], view.sizes[uid] = self.pages[s] + i, 1, PAGE
            view.last[uid], view.next[uid] = now, now + 10.0 * (s + 1)
        self.pages[s] += k
        view.sessions[s].tokens += 16 * k
        return uids

    def held(self, s: int) -> list[int]:
        return [u for u in map(lambda p: uid_of(s, p), range(self.pages[s])) if u not in self.gone]

    def victims(self, n: int, now: float) -> list[int]:
        got = [u for a, b in self.pol.evict_extents(n * PAGE, now) for u in range(a, b)]
        self.gone.update(got)
        return got


def drive(name: str, scenario, bulk: bool) -> tuple[list[int], list[int]]:
    pages, hits, running, steps, dropped = scenario
    t = Twin(name, dropped)
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
    live = [s for s in range(SESSIONS) if running[s]]
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
