"""Shared helpers for the KV-policy tests: a hand-built unit view, a random driver with a
brute-force reference, a sequence-level LRU written against the adapter's interface, and contexts."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from costmodels import PensieveConstants
from sim.adapters import adapt
from sim.policies import PolicyContext
from sim.units import SessionKV, Tier

BT = 16
PAGE = 1 << 20


class HandView:
    """A unit view over hand-placed units: each uid has a session, a page span, a layer, a size, and
    its own last and next access (tests set them per unit)."""

    per_session = True
    unit_bytes = None

    def __init__(self) -> None:
        self.units: dict[int, tuple[SessionKV, int, int, int, int]] = {}
        self.last: dict[int, float] = {}
        self.next: dict[int, float] = {}
        self.by_session: dict[int, list[int]] = {}  # session index -> its uids, in placement order

    def unit(
        self,
        uid: int,
        sess: SessionKV,
        page: int,
        last_access: float = 0.0,
        layer: int = -1,
        pages: int = 1,
        size: int = PAGE,
        next_access: float = math.inf,
    ) -> int:
        self.units[uid] = (sess, page, pages, layer, size)
        self.last[uid] = last_access
        self.next[uid] = next_access
        self.by_session.setdefault(sess.index, []).append(uid)
        return uid

    def session(self, uid: int) -> SessionKV:
        return self.units[uid][0]

    def first_page(self, uid: int) -> int:
        return self.units[uid][1]

    def pages(self, uid: int) -> int:
        return self.units[uid][2]

    def layer(self, uid: int) -> int:
        return self.units[uid][3]

    def size(self, uid: int) -> int:
        return self.units[uid][4]

    def last_access_s(self, uid: int) -> float:
        return self.last[uid]

    def next_access_s(self, uid: int) -> float:
        return self.next[uid]


def Ctx(
    view: HandView | None = None,
    tier: int = Tier.GPU,
    block_tokens: int = BT,
    num_layers: int = 4,
    cost: Any = None,
    cpu_kv_bytes: float | None = None,
    predictor: Any = None,
) -> PolicyContext:
    """A PolicyContext over ``view`` (a fresh HandView when None: ``policy.view``)."""
    return PolicyContext(
        tier=tier,
        block_tokens=block_tokens,
        num_layers=num_layers,
        view=view if view is not None else HandView(),
        cost=cost,
        cpu_kv_bytes=cpu_kv_bytes,
        predictor=predictor,
    )


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


def drain(policy, now: float) -> list[int]:
    """Evict everything at ``now`` the way the engine does: the uids in order."""
    out = []
    while (v := policy.evict(now)) is not None:
        out.append(v)
    return out


# -- the random driver ---------------------------------------------------------------------------
@dataclass
class Rec:
    a: float  # last use as the policy defines it (min(last access, now) at add; now on a hit)
    seq: int  # order of becoming a candidate / last hit (LRU order)
    completed: int  # SessionKV.next_turn when it became a candidate
    priority: int
    cost: float
    next: float = math.inf  # next access when it became a candidate


def random_world(
    rng: random.Random,
    view: HandView,
    n_sessions: int = 10,
    max_pages: int = 6,
    layers: bool = False,
) -> tuple[list[SessionKV], list[int]]:
    """Sessions of random length, their units placed in ``view``: (sessions, all uids)."""
    sessions, uids, uid = [], [], 0
    for i in range(n_sessions):
        pages = rng.randint(1, max_pages)
        s = session(
            i,
            rng.randint((pages - 1) * BT + 1, pages * BT),
            rng.choice([-1, 0, 0, 1]),
            rng.randint(0, 5),
        )
        sessions.append(s)
        for p in range(pages):
            for layer in range(4) if layers else (-1,):
                uid += 1
                uids.append(view.unit(uid, s, p, layer=layer, size=PAGE // (4 if layers else 1)))
    return sessions, uids


def run_random(
    policy,
    ref_key: Callable[..., Any],
    seed: int,
    steps: int = 1500,
    integer_times: bool = False,
    layers: bool = False,
    cost_of=None,
    max_pages: int = 6,
) -> int:
    """Random insert/pin/hit/remove/evict traffic on ``policy`` (whose view is a fresh HandView);
    every victim must be the minimum of ``ref_key(uid, its Rec, now, all Recs by uid)`` over the
    candidates, and ``peek`` must name it without changing anything. Returns the number of victims
    checked."""
    rng = random.Random(seed)
    view: HandView = policy.view
    sessions, every = random_world(rng, view, max_pages=max_pages, layers=layers)
    rec: dict[int, Rec] = {}  # the candidates
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
        uids = view.by_session[s.index]
        if op < 0.3:  # release a session's units (a turn completes, or a demotion arrives)
            old = rng.random() < 0.2
            nxt = (
                math.inf
                if rng.random() < 0.2
                else now + (rng.choice([1, 3, 8]) if integer_times else rng.expovariate(0.1))
            )
            for uid in uids:
                if uid in rec:
                    continue
                if not old:
                    view.last[uid] = now
                view.next[uid] = nxt
                seq += 1
                policy.insert(uid, now)
                c = cost_of(uid) if cost_of else 0.0
                rec[uid] = Rec(min(view.last[uid], now), seq, s.next_turn, s.priority, c, nxt)
        elif op < 0.45:  # admission: hit then pin every candidate unit of the session
            for uid in uids:
                if uid in rec:
                    policy.access(uid, now)
                    policy.pin(uid)
                    del rec[uid]
            s.next_turn += 1  # ...and the turn finishes at once, keeping its old last access
        elif op < 0.55 and rec:  # a hit on one candidate (cachesim-style)
            uid = rng.choice(sorted(rec))
            policy.access(uid, now)
            seq += 1
            r = rec[uid]
            r.a, r.seq = now, seq
        elif op < 0.62 and rec:  # a candidate leaves for another reason
            uid = rng.choice(sorted(rec))
            del rec[uid]
            policy.remove(uid)
        else:  # the engine needs room
            for _ in range(rng.randint(1, 3)):
                v = policy.peek(now)
                if not rec:
                    assert v is None and policy.evict(now) is None
                    break
                best = min(rec, key=lambda u: ref_key(u, rec[u], now, rec))
                assert v == best, (
                    f"t={now}: policy chose {v}, reference {best}: "
                    f"{ref_key(v, rec[v], now, rec)} vs "
                    f"{ref_key(best, rec[best], now, rec)}"
                )
                assert policy.peek(now) == v and policy.evict(now) == v
                checked += 1
                del rec[v]
        assert len(policy) == len(rec)
        for uid in every:
            assert (uid in policy) == (uid in rec)
    return checked


def since_key(uid: int, r: Rec, now: float, recs=None):
    """Pensieve's exact order: value cost/(now - a) (idle 0: +inf), then cost, then a, then uid."""
    idle = Fraction(now) - Fraction(r.a)
    value = (1, Fraction(0)) if idle == 0 else (0, Fraction(r.cost) / idle)
    return value, r.cost, r.a, uid


def until_key(uid: int, r: Rec, now: float, recs=None):
    """cost-belady's exact order: value cost/(next - now) (never: 0, due: +inf), then cost, then
    the later next access, then uid."""
    n = r.next
    if n == math.inf:
        value = (0, Fraction(0))
    elif n <= now:
        value = (1, Fraction(0))
    else:
        value = (0, Fraction(r.cost) / (Fraction(n) - Fraction(now)))
    return value, r.cost, -n, uid


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
        ids = sorted(
            (c.sequence_id for c in candidates if not c.is_pinned),
            key=lambda sid: rank.get(sid, -1),
        )
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


AdaptedSeqLRU = adapt(
    SeqLRU, name="seq-lru"
)  # an EvictionPolicy: usable as "kv_helpers:AdaptedSeqLRU"
