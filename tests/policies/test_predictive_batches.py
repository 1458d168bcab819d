"""predictive's batch paths (a session's units as one run: ``release``, ``acquire``,
``remove_many``, ``insert_many``, ``evict_bytes``, ``evict_extents``) against one call per unit on
the policy as it was before runs (a ``LazyHeap`` of units per bucket, copied here), on twin
instances over an engine-like ``UnitView``: the same victims, in the same order, and the same
candidates throughout."""

from __future__ import annotations

import random

import pytest

from sim.lifetime import LifetimePredictor
from sim.policies import EvictionPolicy, PolicyContext, make_policy
from sim.policies.structures import LazyHeap
from sim.units import SessionKV, Tier, UnitView, extents_of, uid_of

PAGE = 100


class UnitHeaps(EvictionPolicy):
    """predictive one unit at a time, as it was: one ``LazyHeap`` per bucket keyed (a, seq)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.predictor = LifetimePredictor.prior()
        self._heaps = [LazyHeap() for _ in range(self.predictor.num_buckets + 1)]
        self._bucket: dict[int, int] = {}
        self._seq = 0

    def _put(self, uid: int, a: float) -> None:
        sess = self.view.session(uid)
        b = self.predictor.bucket_index(sess.next_turn)
        self._seq += 1
        self._bucket[uid] = b
        self._heaps[b].push(uid, (a, self._seq))

    def _add(self, uid: int, now: float) -> None:
        self._discard(uid)
        self._put(uid, min(now, self.view.last_access_s(uid)))

    def access(self, uid: int, now: float) -> None:
        if uid in self._bucket:
            self._discard(uid)
            self._put(uid, now)

    def _discard(self, uid: int) -> None:
        b = self._bucket.pop(uid, None)
        if b is not None:
            self._heaps[b].discard(uid)

    def peek(self, now: float) -> int | None:
        heads = []
        for b, heap in enumerate(self._heaps):
            uid = heap.min()
            if uid is not None:
                a, seq = heap.key(uid)
                heads.append(((self.predictor.p_return(b, now - a), a, seq), uid))
        return min(heads)[1] if heads else None

    def __len__(self) -> int:
        return len(self._bucket)

    def __contains__(self, uid: int) -> bool:
        return uid in self._bucket


class Twins:
    def __init__(self, rng: random.Random, sessions: int, layers: int) -> None:
        self.rng = rng
        self.kv = [SessionKV(i, f"s{i}", 0) for i in range(sessions)]
        self.view = UnitView(self.kv, PAGE, layers=layers)
        ctx = PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, view=self.view)
        self.fast = make_policy("predictive", ctx)
        self.ref = UnitHeaps(ctx)
        self.units = [
            list(range(uid_of(s, 0), uid_of(s, rng.randint(1, 40)))) for s in range(sessions)
        ]
        self.now = 0.0

    def check(self) -> None:
        assert len(self.fast) == len(self.ref)
        assert self.fast.peek(self.now) == self.ref.peek(self.now)
        for uids in self.units:
            for uid in uids[:: max(1, len(uids) // 5)]:
                assert (uid in self.fast) == (uid in self.ref)

    def some(self, s: int) -> list[int] | range:
        """A session's units as the engine lists them: a range (all of them) or an increasing
        list (some), now and then shuffled or with a duplicate."""
        uids = self.units[s]
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return range(uids[0], uids[-1] + 1)
        if roll < 0.45:
            return range(uids[0], uids[-1] + 1, 2)
        pick = sorted(rng.sample(uids, rng.randint(0, len(uids))))
        if roll < 0.5:
            rng.shuffle(pick)
        elif roll < 0.55 and pick:
            pick.append(pick[0])
        return pick

    def step(self) -> None:
        rng, fast, ref = self.rng, self.fast, self.ref
        if rng.random() < 0.7:  # sometimes several calls at one time
            self.now += rng.choice([0.01, 0.5, 3.0, 40.0, 900.0])
        now = self.now
        s = rng.randrange(len(self.kv))
        sess = self.kv[s]
        op = rng.random()
        if op < 0.3:
            sess.last_access_s = now - rng.choice([0.0, 0.0, 1.0, 30.0, 500.0, -5.0])
            sess.next_turn = rng.choice([0, 1, 1, 2, 3, 5, 9, 20])
            uids = self.some(s)
            if rng.random() < 0.5:
                fast.release(uids, now)
                EvictionPolicy.release(ref, uids, now)
            else:
                fast.insert_many(uids, now)
                EvictionPolicy.insert_many(ref, uids, now)
        elif op < 0.45:
            uids = [u for u in self.some(s) if u in ref]
            fast.acquire(uids, now)
            EvictionPolicy.acquire(ref, uids, now)
        elif op < 0.5:
            uids = self.some(s)
            if rng.random() < 0.3:  # and some of another session's
                other = rng.choice(self.units)
                uids = list(uids) + rng.sample(other, rng.randint(0, len(other)))
            fast.remove_many(uids)
            EvictionPolicy.remove_many(ref, uids)
        elif op < 0.55:  # one unit at a time
            uid = rng.choice(self.units[s])
            if rng.random() < 0.5:
                fast.pin(uid)
                ref.pin(uid)
            else:
                fast.unpin(uid, now)
                ref.unpin(uid, now)
        elif op < 0.6:
            assert fast.evict(now) == ref.evict(now)
        else:
            nbytes = PAGE * rng.choice([1, 2, 5, 17, 60, 400]) - rng.randrange(PAGE)
            want = EvictionPolicy.evict_bytes(ref, nbytes, now)
            if rng.random() < 0.5:
                assert fast.evict_bytes(nbytes, now) == want
            else:
                assert fast.evict_extents(nbytes, now) == extents_of(want)
        self.check()


@pytest.mark.parametrize("seed", range(12))
def test_batches_equal_one_call_per_unit(seed):
    rng = random.Random(seed)
    twins = Twins(rng, sessions=rng.randint(1, 12), layers=rng.choice([1, 1, 4]))
    for _ in range(600):
        twins.step()


def test_a_released_session_is_one_run_evicted_as_extents():
    rng = random.Random(1)
    twins = Twins(rng, sessions=3, layers=1)
    fast = twins.fast
    for s, sess in enumerate(twins.kv):
        sess.last_access_s, sess.next_turn = float(s), 2
        fast.release(range(uid_of(s, 0), uid_of(s, 30)), 10.0)
    assert fast.evict_extents(45 * PAGE, 20.0) == [
        (uid_of(0, 0), uid_of(0, 30)),
        (uid_of(1, 0), uid_of(1, 15)),
    ]
    assert len(fast) == 45
