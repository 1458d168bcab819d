"""The contract every registered policy keeps (hypothesis), whoever wrote it.

Random sequences of the calls the engine makes (insert, pinned or not; access; pin; unpin; the batch
acquire/release of a session's units; remove; victim, peeked or followed by remove; a pinned unit
growing; a unit leaving and coming back) are
checked against a reference set of members: the victim is always an unpinned member (None only when
there is none), asking twice without a change names the same unit, ``len`` and ``in`` agree with the
unpinned members, a removed or pinned unit is never named, and the same sequence gives the same
victims. Units are the engine's (``sim.units.Unit`` with a ``SessionKV``), their fields maintained
as the engine does, and the context carries the Llama-3-8B/H100 cost model for cost-aware policies.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodels import cost_model
from sim.policies import PolicyContext, available_policies, make_policy
from sim.units import SessionKV, Tier, Unit

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token

OPS = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10**6), st.integers(0, 10**6)),
               min_size=1, max_size=120)


class Driver:
    """Applies an op sequence to one policy the way the engine would, checking as it goes."""

    def __init__(self, name: str, tier: Tier, capacity_pages: int | None) -> None:
        ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=COST.model.num_layers, seed=0,
                            cost=COST)
        self.pol = make_policy(name, ctx)
        self.name, self.tier = name, tier
        if capacity_pages is not None and hasattr(self.pol, "set_capacity"):
            self.pol.set_capacity(capacity_pages * PAGE)
        self.sessions = [SessionKV(i, f"s{i}", i % 3) for i in range(4)]
        self.members: dict[int, Unit] = {}
        self.gone: dict[int, Unit] = {}
        self.next_key = 0
        self.seq = 0
        self.now = 0.0
        self.victims: list[int | None] = []

    # -- the engine's calls ----------------------------------------------------------------------
    def _enter(self, u: Unit, pinned: bool) -> None:
        self.seq += 1
        u.tier, u.tier_seq, u.tier_since_s, u.pinned = self.tier, self.seq, self.now, pinned
        self.members[u.key] = u
        self.pol.insert(u, self.now)

    def new_unit(self, a: int, b: int) -> None:
        sess = self.sessions[a % len(self.sessions)]
        self.next_key += 1
        pages = 1 + b % 3
        u = Unit(self.next_key, sess, sum(x.pages for x in sess.units), pages, pages * PAGE,
                 created_s=self.now, last_access_s=self.now, hits=1,
                 next_access_s=self.now + (b % 50) if b % 7 else math.inf)
        sess.units.append(u)
        sess.tokens += pages * 16
        sess.tier_pages[self.tier] += pages
        self._enter(u, pinned=a % 3 == 0)

    def come_back(self, a: int, b: int) -> None:
        if not self.gone:
            return self.new_unit(a, b)
        u = self.gone.pop(sorted(self.gone)[a % len(self.gone)])
        u.hits, u.last_access_s = 1, self.now
        self._enter(u, pinned=b % 2 == 0)

    def _pick(self, a: int, pinned: bool | None):
        keys = sorted(k for k, u in self.members.items() if pinned is None or u.pinned == pinned)
        return self.members[keys[a % len(keys)]] if keys else None

    def access(self, a: int) -> None:
        u = self._pick(a, False if a % 4 else None)   # mostly unpinned, as the engine does
        if u is not None:
            u.last_access_s = self.now
            u.hits += 1
            self.pol.access(u, self.now)

    def pin(self, a: int) -> None:
        u = self._pick(a, False)
        if u is not None:
            self.pol.pin(u)
            u.pinned = True

    def unpin(self, a: int, b: int) -> None:
        u = self._pick(a, True)
        if u is not None:
            u.last_access_s = self.now
            u.next_access_s = self.now + (b % 40) if b % 5 else math.inf
            u.pinned = False
            self.pol.unpin(u, self.now)

    def acquire(self, a: int) -> None:
        """A turn starts: the batch call for a session's unpinned units (a hit, then pinned)."""
        sess = self.sessions[a % len(self.sessions)]
        units = [u for u in sess.units if u.key in self.members and not u.pinned]
        if units:
            for u in units:
                u.last_access_s = self.now
                u.hits += 1
            self.pol.acquire(units, self.now)
            for u in units:
                u.pinned = True

    def release(self, a: int, b: int) -> None:
        """A turn ends: the batch call for a session's pinned units, flags cleared, page order."""
        sess = self.sessions[a % len(self.sessions)]
        units = [u for u in sess.units if u.key in self.members and u.pinned]
        if units:
            nxt = self.now + (b % 40) if b % 5 else math.inf
            for u in units:
                u.pinned = False
                u.last_access_s, u.next_access_s = self.now, nxt
            self.pol.release(units, self.now)

    def grow(self, a: int) -> None:
        u = self._pick(a, True)
        if u is not None:
            u.pages += 1
            u.size += PAGE

    def remove(self, u: Unit) -> None:
        self.pol.remove(u)
        del self.members[u.key]
        u.pinned = False
        u.tier = Tier.DROPPED
        self.gone[u.key] = u

    def victim(self, evict: bool) -> None:
        v = self.pol.victim(self.now)
        unpinned = [u for u in self.members.values() if not u.pinned]
        if v is None:
            assert not unpinned, f"{self.name}: no victim with {len(unpinned)} candidates"
        else:
            assert v.key in self.members, f"{self.name}: victim {v.key} is not a member"
            assert not v.pinned, f"{self.name}: victim {v.key} is pinned"
            again = self.pol.victim(self.now)
            assert again is v, f"{self.name}: victim() changed without a change ({v.key}, {again and again.key})"
        self.victims.append(None if v is None else v.key)
        if evict and v is not None:
            self.remove(v)

    def check(self) -> None:
        unpinned = [u for u in self.members.values() if not u.pinned]
        assert len(self.pol) == len(unpinned), f"{self.name}: len {len(self.pol)} != {len(unpinned)}"
        for u in self.members.values():
            assert (u in self.pol) == (not u.pinned), f"{self.name}: membership of {u.key}"
        for u in list(self.gone.values())[:20]:
            assert u not in self.pol, f"{self.name}: removed unit {u.key} still a candidate"

    def run(self, ops) -> list:
        for op, a, b in ops:
            self.now += 1.0
            if op == 0:
                self.new_unit(a, b)
            elif op == 1:
                self.access(a)
            elif op == 2:
                self.pin(a)
            elif op == 3:
                self.unpin(a, b)
            elif op == 4:
                u = self._pick(a, None)
                if u is not None:
                    self.remove(u)
            elif op == 5:
                self.victim(evict=b % 4 != 0)
            elif op == 6:
                self.grow(a)
            elif op == 7:
                self.come_back(a, b)
            elif op == 9:
                self.acquire(a)
            elif op == 10:
                self.release(a, b)
            else:
                self.new_unit(a, b)
            self.check()
        # drain: every unpinned unit comes out exactly once, then there is no victim
        n = sum(not u.pinned for u in self.members.values())
        for _ in range(n):
            self.victim(evict=True)
        assert self.pol.victim(self.now) is None and len(self.pol) == 0
        return self.victims


@pytest.mark.parametrize("name", available_policies())
def test_contract(name):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
              database=None)
    @given(ops=OPS, tier=st.sampled_from([Tier.GPU, Tier.CPU]),
           capacity_pages=st.one_of(st.none(), st.integers(1, 200)))
    def run(ops, tier, capacity_pages):
        first = Driver(name, tier, capacity_pages).run(ops)
        second = Driver(name, tier, capacity_pages).run(ops)
        assert first == second, f"{name}: the same calls gave different victims"

    run()


@pytest.mark.parametrize("name", available_policies())
def test_empty_policy_has_no_victim(name):
    pol = make_policy(name, PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, cost=COST))
    assert pol.victim(0.0) is None and len(pol) == 0
