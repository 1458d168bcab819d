"""Run sequence-level eviction policies in kvsim unchanged.

Some teams write policies against a sequence-level interface::

    class MyPolicy:
        def select_victims(self, candidates: list[EvictionCandidate], required_blocks: int) -> list[str]: ...
        def update_access(self, sequence_id: str) -> None: ...
        def get_metrics(self) -> dict: ...

``SequencePolicyAdapter`` turns such an object into a kvsim ``EvictionPolicy`` (one per tier, as
always). Name the class in the YAML as ``module:Class``; ``resolve_policy_class`` (which the registry
calls for a ``module:Class`` that is not an ``EvictionPolicy``) wraps it with ``adapt``. Or wrap by
hand: ``adapt(MyPolicy, name="mine", **kwargs)`` gives an ``EvictionPolicy`` subclass whose instances
build ``MyPolicy(**kwargs)``.

Mapping (a *sequence* is a kvsim session, its id ``SessionKV.session_id``):

* ``peek(now)`` / ``evict(now)``: if no plan is pending, the adapter offers every sequence with
  candidate units in this tier as an ``EvictionCandidate`` and calls
  ``select_victims(candidates, required_blocks=1)`` (kvsim evicts one unit at a time and asks again
  while it is short, so "at least one block" is the exact requirement of each call). The returned ids
  form the plan: ``evict`` hands their units out one by one, tail page first, until the plan is used
  up. A ``peek`` only looks: it asks the user's policy when no plan is pending and keeps the answer
  for the next ``evict`` (so a peek then an evict asks once, like an evict alone). Any other change
  of the candidate set or of recency (a unit added, hit, pinned or removed, other than by ``evict``)
  drops the plan, so the user's policy always decides on the current candidates.
* ``update_access(seq)`` is called when a sequence is used or enters this tier's candidates: on a hit
  (``access``) and whenever one of its units becomes a candidate (released by its turn, demoted into
  the tier, inserted by a miss) -- exactly the events that move a unit to the back of kvsim's LRU.
  Repeated calls for the same sequence at the same time (its units arriving together) are sent once.
* ``metrics()`` returns ``get_metrics()``.

``EvictionCandidate`` fields: ``block_ids`` the uids of the sequence's candidate units in this tier
(``sim.units``: ``session index << 24 | unit index``), ``last_access_time`` their latest last use,
``access_count`` their highest use count (uses since the unit entered this tier, its entry included:
the adapter counts them, and forgets a unit's count when it leaves the tier), ``priority``
``SessionKV.priority``, ``is_pinned`` always False (pinned sequences are never offered),
``estimated_lifetime`` the predictor's expected remaining idle time (``mean_residual_s``) when the
context carries a predictor, else None, ``sequence_length`` ``SessionKV.tokens``, ``max_length`` the
same (kvsim does not know a request's max_tokens). A ``kvsim cachesim`` object (no session) is a
sequence of its own, ``obj<id>``, of length its size.

Cost: a selection round builds one candidate per sequence, O(S) -- inherent to an interface that
takes the whole candidate list. Within a plan each further victim is O(log u).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from sim.policies.base import EvictionPolicy
from sim.policies.structures import LazyHeap


@dataclass(slots=True)
class EvictionCandidate:
    sequence_id: str
    block_ids: list[int]
    last_access_time: float
    access_count: int
    priority: int
    is_pinned: bool
    estimated_lifetime: float | None
    sequence_length: int
    max_length: int


@runtime_checkable
class SequencePolicy(Protocol):
    def select_victims(
        self, candidates: list[EvictionCandidate], required_blocks: int
    ) -> list[str]: ...

    def update_access(self, sequence_id: str) -> None: ...

    def get_metrics(self) -> Mapping[str, Any]: ...


_METHODS = ("select_victims", "update_access", "get_metrics")


def is_sequence_policy(obj: Any) -> bool:
    """True for a class (or object) with callable select_victims, update_access and get_metrics."""
    return all(callable(getattr(obj, m, None)) for m in _METHODS)


class _Seq:
    __slots__ = ("last_access", "session", "sid", "units")

    def __init__(self, sid: str, session) -> None:
        self.sid = sid
        self.session = session  # None for a cachesim object
        self.units = LazyHeap()  # candidate uids keyed (-first_page, -layer, -uid)
        self.last_access = -float("inf")


class SequencePolicyAdapter(EvictionPolicy):
    """An ``EvictionPolicy`` driving a sequence-level policy object (module docstring)."""

    user_factory: ClassVar[Callable[[], Any] | None] = None
    needs_predictor: ClassVar[bool] = True  # fills EvictionCandidate.estimated_lifetime

    def __init__(self, ctx, user: Any = None) -> None:
        super().__init__(ctx)
        if user is None:
            factory = type(self).user_factory
            if factory is None:
                raise TypeError(
                    "SequencePolicyAdapter needs a user policy object or a user_factory "
                    "(use sim.adapters.adapt(UserClass))"
                )
            user = factory()
        if not is_sequence_policy(user):
            raise TypeError(f"{type(user).__name__} lacks one of {', '.join(_METHODS)}")
        self.user = user
        self._seqs: dict[str, _Seq] = {}
        self._where: dict[int, _Seq] = {}  # candidate uid -> its sequence
        self._hits: dict[int, int] = {}  # uid in this tier (pinned or not) -> uses since entry
        self._plan: deque[str] = deque()
        self._notified: tuple[str, float] | None = None

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._hits[uid] = 1  # entering the tier is its first use
        if not pinned:
            self._add(uid, now)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._hits.pop(uid, None)
        if not pinned:
            self._discard(uid)

    def _add(self, uid: int, now: float) -> None:
        if uid in self._where:
            self._drop(uid)
        if uid not in self._hits:  # a candidate the adapter never saw enter
            self._hits[uid] = 1
        view = self.view
        sid = self._sid(uid)
        s = self._seqs.get(sid)
        if s is None:
            s = self._seqs[sid] = _Seq(sid, view.session(uid))
        s.units.push(uid, (-view.first_page(uid), -view.layer(uid), -uid))
        a = view.last_access_s(uid)
        s.last_access = max(s.last_access, min(now, a))
        self._where[uid] = s
        self._plan.clear()
        self._notify(sid, now)

    def access(self, uid: int, now: float) -> None:
        if uid in self._hits:
            self._hits[uid] += 1
        s = self._where.get(uid)
        if s is not None:
            s.last_access = max(s.last_access, now)
            self._plan.clear()
        self._notify(self._sid(uid), now)

    def _discard(self, uid: int) -> None:
        if self._drop(uid):
            self._plan.clear()

    def _evicted(self, uid: int) -> None:
        self._hits.pop(uid, None)
        self._drop(uid)  # the plan's own victim: the plan stays

    def _drop(self, uid: int) -> bool:
        s = self._where.pop(uid, None)
        if s is None:
            return False
        s.units.discard(uid)
        if not s.units:
            del self._seqs[s.sid]
        return True

    def _notify(self, sid: str, now: float) -> None:
        if self._notified != (sid, now):
            self._notified = (sid, now)
            self.user.update_access(sid)

    def _sid(self, uid: int) -> str:
        sess = self.view.session(uid)
        return sess.session_id if sess is not None else f"obj{uid}"

    # -- victims ---------------------------------------------------------------------------------
    def peek(self, now: float) -> int | None:
        if not self._where:
            return None
        plan = self._plan
        for _ in range(2):
            while plan:
                s = self._seqs.get(plan[0])
                if s is None:  # used up: the sequence has no candidate left
                    plan.popleft()
                    continue
                return s.units.min()
            plan.extend(self._select(now))  # the user's answer for the current candidates
        raise AssertionError("unreachable: a non-empty plan of live sequences was just made")

    def _select(self, now: float) -> list[str]:
        cands = [self._candidate(s, now) for s in self._seqs.values()]
        chosen = self.user.select_victims(cands, 1)
        name = type(self.user).__name__
        if not chosen:
            raise ValueError(
                f"{name}.select_victims returned no victim among {len(cands)} candidates"
            )
        plan, seen = [], set()
        for sid in chosen:
            if sid not in self._seqs:
                raise ValueError(
                    f"{name}.select_victims returned {sid!r}, which is not a candidate "
                    f"(pinned, in another tier, or unknown)"
                )
            if sid not in seen:
                seen.add(sid)
                plan.append(sid)
        return plan

    def _candidate(self, s: _Seq, now: float) -> EvictionCandidate:
        sess = s.session
        uids = sorted(s.units)
        if sess is None:  # a cachesim object: its size stands for its length
            size = self.view.size
            priority, completed, length = 0, 1, sum(size(u) for u in uids)
        else:
            priority, completed, length = sess.priority, sess.next_turn, sess.tokens
        pred = getattr(self.ctx, "predictor", None)
        lifetime = None if pred is None else pred.mean_residual_s(completed, now - s.last_access)
        hits = self._hits
        return EvictionCandidate(
            sequence_id=s.sid,
            block_ids=uids,
            last_access_time=s.last_access,
            access_count=max(hits[u] for u in uids),
            priority=priority,
            is_pinned=False,
            estimated_lifetime=lifetime,
            sequence_length=length,
            max_length=length,
        )

    def metrics(self) -> Mapping[str, Any]:
        return self.user.get_metrics()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, uid: int) -> bool:
        return uid in self._where


def adapt(
    user_cls: Callable[..., Any], name: str | None = None, **kwargs: Any
) -> type[SequencePolicyAdapter]:
    """An ``EvictionPolicy`` subclass whose instances wrap ``user_cls(**kwargs)``."""
    if not is_sequence_policy(user_cls):
        raise TypeError(
            f"{getattr(user_cls, '__name__', user_cls)!r} is not a sequence-level policy: "
            f"it needs {', '.join(_METHODS)}"
        )
    label = name or getattr(user_cls, "__name__", "sequence-policy")
    return type(
        f"Adapted{getattr(user_cls, '__name__', 'Policy')}",
        (SequencePolicyAdapter,),
        {
            "name": label,
            "user_factory": staticmethod(lambda: user_cls(**kwargs)),
            "__module__": __name__,
            "__doc__": f"{label} (a sequence-level policy) run through SequencePolicyAdapter.",
        },
    )


def resolve_policy_class(obj: Any, name: str = "") -> type[EvictionPolicy]:
    """What the registry should do with the object a ``module:Class`` name imports: an
    ``EvictionPolicy`` subclass as is, a sequence-level policy class wrapped by ``adapt``."""
    if isinstance(obj, type) and issubclass(obj, EvictionPolicy):
        return obj
    if isinstance(obj, type) and is_sequence_policy(obj):
        return adapt(obj, name=name or obj.__name__)
    raise ValueError(
        f"policy {name or obj!r} is neither a sim.policies.EvictionPolicy subclass nor a "
        f"sequence-level policy class (select_victims, update_access, get_metrics)"
    )
