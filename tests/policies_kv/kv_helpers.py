"""Shared helpers for the KV-policy tests: hand-built units, a random driver with a brute-force
reference, a sequence-level LRU written against the adapter's interface, and stand-in contexts."""
from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from costmodels import PensieveConstants
from sim.adapters import adapt
from sim.units import SessionKV, Tier, Unit

BT = 16
PAGE = 1 << 20


@dataclass(frozen=True)
class Ctx:
    """A PolicyContext stand-in that also carries the fields proposed for the engine to fill
    (``cpu_kv_bytes``, ``predictor``): the policies read those with getattr."""

    tier: int = Tier.GPU
    block_tokens: int = BT
    num_layers: int = 4
    seed: int = 0
    cost: Any = None
    cpu_kv_bytes: float | None = None
    predictor: Any = None


class FakeCost:
    """Only what the Pensieve formula reads: pensieve_constants(n_new)."""

    def __init__(self, alpha: float, beta: float, non_attention: float) -> None:
        self.k = (alpha, beta, non_attention)
        self.asked: list[int] = []

    def pensieve_constants(self, n_new: int = 1) -> PensieveConstants:
        self.asked.append(n_new)
        return PensieveConstants(n_new, *self.k)


def session(index: int, tokens: int, priority: int = 0, next_turn: int = 1) -> SessionKV:
    s = SessionKV(index, f"s{index}", priority)
    s.tokens = tokens
    s.next_turn = next_turn
    return s


def unit(key: int, sess: SessionKV, page: int, last_access: float = 0.0, layer: int = -1,
         pages: int = 1, size: int = PAGE, next_access: float = math.inf) -> Unit:
    u = Unit(key, sess, page, pages, size, tier=Tier.GPU, layer=layer, last_access_s=last_access,
             next_access_s=next_access)
    sess.units.append(u)
    return u


def drain(policy, now: float) -> list[int]:
    """Evict everything at ``now`` the way the engine does (peek, then remove): the keys in order."""
    out = []
    while (v := policy.victim(now)) is not None:
        out.append(v.key)
        policy.remove(v)
    return out


# -- the random driver ---------------------------------------------------------------------------
@dataclass
class Rec:
    a: float          # last use as the policy defines it (min(last_access_s, now) at add; now on a hit)
    seq: int          # order of becoming a candidate / last hit (LRU order)
    completed: int    # SessionKV.next_turn when it became a candidate
    priority: int
    cost: float


def random_world(rng: random.Random, n_sessions: int = 10, max_pages: int = 6, layers: bool = False):
    sessions, units, key = [], [], 0
    for i in range(n_sessions):
        pages = rng.randint(1, max_pages)
        s = session(i, rng.randint((pages - 1) * BT + 1, pages * BT), rng.choice([-1, 0, 0, 1]),
                    rng.randint(0, 5))
        sessions.append(s)
        for p in range(pages):
            for layer in (range(4) if layers else (-1,)):
                key += 1
                units.append(unit(key, s, p, layer=layer, size=PAGE // (4 if layers else 1)))
    return sessions, units


def run_random(policy, ref_key: Callable[..., Any], seed: int, steps: int = 1500,
               integer_times: bool = False, layers: bool = False, cost_of=None,
               max_pages: int = 6) -> int:
    """Random insert/pin/unpin/hit/remove/victim traffic; every victim must be the minimum of
    ``ref_key(unit, its Rec, now, all Recs by key)`` over the candidates. Returns the number of
    victims checked."""
    rng = random.Random(seed)
    sessions, units = random_world(rng, max_pages=max_pages, layers=layers)
    cand: dict[int, Unit] = {}
    rec: dict[int, Rec] = {}
    seq = 0
    now = 0.0
    checked = 0
    for _ in range(steps):
        if integer_times:
            now += rng.choice([0, 0, 1, 2, 5])
        else:
            now += rng.choice([0.0, rng.expovariate(0.5), rng.random() * 1e-3])
        op = rng.random()
        s = rng.choice(sessions)
        if op < 0.3:  # release a session's units (a turn completes, or a demotion arrives)
            old = rng.random() < 0.2
            nxt = math.inf if rng.random() < 0.2 else now + (rng.choice([1, 3, 8]) if integer_times
                                                           else rng.expovariate(0.1))
            for u in s.units:
                if u.key in cand:
                    continue
                if not old:
                    u.last_access_s = now
                u.next_access_s = nxt
                seq += 1
                policy.insert(u, now)
                cand[u.key] = u
                c = cost_of(u) if cost_of else 0.0
                rec[u.key] = Rec(min(u.last_access_s, now), seq, s.next_turn, s.priority, c)
        elif op < 0.45:  # admission: hit then pin every candidate unit of the session
            for u in s.units:
                if u.key in cand:
                    policy.access(u, now)
                    policy.pin(u)
                    u.pinned = True
                    del cand[u.key], rec[u.key]
            for u in s.units:  # ...and the turn finishes at once, keeping its old last_access
                if u.pinned:
                    u.pinned = False
            s.next_turn += 1
        elif op < 0.55 and cand:  # a hit on one candidate (cachesim-style)
            u = cand[rng.choice(sorted(cand))]
            policy.access(u, now)
            seq += 1
            r = rec[u.key]
            r.a, r.seq = now, seq
        elif op < 0.62 and cand:  # a candidate leaves for another reason
            u = cand.pop(rng.choice(sorted(cand)))
            del rec[u.key]
            policy.remove(u)
        else:  # the engine needs room
            for _ in range(rng.randint(1, 3)):
                v = policy.victim(now)
                if not cand:
                    assert v is None
                    break
                best = min(cand.values(), key=lambda u: ref_key(u, rec[u.key], now, rec))
                assert v is best, (f"t={now}: policy chose {v.key}, reference {best.key}: "
                                   f"{ref_key(v, rec[v.key], now, rec)} vs "
                                   f"{ref_key(best, rec[best.key], now, rec)}")
                checked += 1
                policy.remove(v)
                del cand[v.key], rec[v.key]
        assert len(policy) == len(cand)
        for u in units:
            assert (u in policy) == (u.key in cand)
    return checked


def since_key(u: Unit, r: Rec, now: float, recs=None):
    """Pensieve's exact order: value cost/(now - a) (idle 0: +inf), then cost, then a, then key."""
    idle = Fraction(now) - Fraction(r.a)
    value = (1, Fraction(0)) if idle == 0 else (0, Fraction(r.cost) / idle)
    return value, r.cost, r.a, u.key


def until_key(u: Unit, r: Rec, now: float, recs=None):
    """cost-belady's exact order: value cost/(next - now) (never: 0, due: +inf), then cost, then
    the later next access, then key."""
    n = u.next_access_s
    if n == math.inf:
        value = (0, Fraction(0))
    elif n <= now:
        value = (1, Fraction(0))
    else:
        value = (0, Fraction(r.cost) / (Fraction(n) - Fraction(now)))
    return value, r.cost, -n, u.key


# -- a sequence-level policy written against the adapter's interface ------------------------------
class SeqLRU:
    """Least recently accessed sequence first, as a team would write it for a sequence-level API."""

    def __init__(self) -> None:
        self.order: OrderedDict[str, None] = OrderedDict()
        self.selections = 0

    def update_access(self, sequence_id: str) -> None:
        self.order[sequence_id] = None
        self.order.move_to_end(sequence_id)

    def select_victims(self, candidates, required_blocks: int) -> list[str]:
        self.selections += 1
        rank = {sid: i for i, sid in enumerate(self.order)}
        ids = sorted((c.sequence_id for c in candidates if not c.is_pinned),
                     key=lambda sid: rank.get(sid, -1))
        out, freed = [], 0
        by_id = {c.sequence_id: c for c in candidates}
        for sid in ids:
            out.append(sid)
            freed += len(by_id[sid].block_ids)
            if freed >= required_blocks:
                break
        return out

    def get_metrics(self) -> dict:
        return {"selections": self.selections}


AdaptedSeqLRU = adapt(SeqLRU, name="seq-lru")   # an EvictionPolicy: usable as "kv_helpers:AdaptedSeqLRU"
