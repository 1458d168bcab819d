"""Every policy that declares ``grows_in_bulk`` gives, with decode spans taken in bulk, the ledger
of strict one-event-per-iteration replay, and the bulk path does run (so the check can fail)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim.spans
from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import BudgetConfig
from sim.policies import available_policies, policy_class
from sim.units import uid_of
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = cost_model("llama-3-8b", "h100-sxm")
SESSIONS = generate_synthetic(SyntheticConfig(sessions=25, seed=5)).sessions
BULK = [p for p in available_policies() if policy_class(p).grows_in_bulk]
WINDOW = BudgetConfig(kind="streamingllm", sink=4, window=256)  # prunes pages: indices return
CONFIGS = [  # (gpu GiB, cpu GiB, unit, async_save, token budget)
    (0.3, 0.0, "block", True, None),
    (0.4, 0.5, "block", True, None),
    (0.4, 0.5, "layer_block", True, None),
    (0.1, 0.1, "block", True, WINDOW),
]


def test_the_bulk_policies():
    # the list this file covers; a policy that starts declaring it is covered automatically
    assert {
        "lru",
        "fifo",
        "lfu",
        "qos",
        "sieve",
        "belady",
        "session-aware",
        "arc",
        "twoq",
        "clock",
        "s3fifo",
        "slru",
    } <= set(BULK)


# The default run checks four of them (the two structures LRU and FIFO share with most, ARC's
# lists, an offline bound); the slow suite checks every one.
DEFAULT_RUN = ("lru", "fifo", "arc", "belady")


@pytest.mark.parametrize(
    "policy",
    [p if p in DEFAULT_RUN else pytest.param(p, marks=pytest.mark.slow) for p in BULK],
)
def test_bulk_spans_equal_strict_replay(policy, monkeypatch):
    taken = []
    bulk = sim.spans.bulk_span

    def counted(core, *args):
        done = bulk(core, *args)
        taken.append(done)
        return done

    monkeypatch.setattr(sim.spans, "bulk_span", counted)
    for gpu, cpu, unit, async_save, budget in CONFIGS:
        mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
        eng = EngineConfig(async_save=async_save)
        taken.clear()
        fast = simulate(SESSIONS, COST, mem, eng, policy=policy, seed=1, budget=budget)
        assert any(taken), (policy, gpu, cpu, unit)  # some span did run in bulk
        slow = simulate(
            SESSIONS, COST, mem, eng, policy=policy, seed=1, decode_spans=False, budget=budget
        )
        assert fast.turns.equals(slow.turns), (policy, gpu, cpu, unit)
        assert fast.stats.steps == slow.stats.steps
        assert np.array_equal(fast.stats.step_s, slow.stats.step_s)


BY_TIME = [p for p in available_policies() if policy_class(p).grows_by_time]
BY_TIME_CONFIGS = [  # (gpu GiB, cpu GiB, unit, token budget): victims dropped, then demoted
    (0.3, 0.0, "block", None),
    (0.4, 0.0, "layer_block", None),
    (0.1, 0.0, "block", WINDOW),
    (0.4, 0.5, "block", None),
]


def test_the_clock_reading_bulk_policies():
    assert {"pensieve", "pensieve-flat", "pensieve-physics", "cost-belady", "predictive"} <= set(
        BY_TIME
    )
    # its costs read the tier array, which the engine updates only after each call
    assert "pensieve-depth" not in BY_TIME


@pytest.mark.parametrize(
    "policy",
    [
        p if p in ("pensieve", "cost-belady") else pytest.param(p, marks=pytest.mark.slow)
        for p in BY_TIME
    ],
)
def test_bulk_spans_by_time_equal_strict_replay(policy, monkeypatch):
    """A policy whose order reads the clock takes a span's allocations in one batch where their
    victims are dropped, each allocation's victims chosen at its step's start: the ledger of
    strict replay. Where a CPU tier takes victims the span goes step by step."""
    from sim.memory import TieredMemory

    schedules: list[list[tuple[float, int]]] = []
    drop_at = TieredMemory.drop_at

    def recorded(mem, schedule):
        schedules.append(list(schedule))
        return drop_at(mem, schedule)

    monkeypatch.setattr(TieredMemory, "drop_at", recorded)
    for gpu, cpu, unit, budget in BY_TIME_CONFIGS:
        mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
        eng = EngineConfig()
        schedules.clear()
        fast = simulate(SESSIONS, COST, mem, eng, policy=policy, seed=1, budget=budget)
        if cpu:
            assert not schedules, (policy, gpu, cpu, unit)
        else:  # some span evicted in bulk, at more than one time
            assert any(len({t for t, _ in s}) > 1 for s in schedules), (policy, gpu, unit)
        slow = simulate(
            SESSIONS, COST, mem, eng, policy=policy, seed=1, decode_spans=False, budget=budget
        )
        assert fast.turns.equals(slow.turns), (policy, gpu, cpu, unit)
        assert fast.stats.steps == slow.stats.steps
        assert np.array_equal(fast.stats.step_s, slow.stats.step_s)


# A span whose pages all fit in the GPU's free room evicts nothing: it runs in plain Python
# (``sim.spans.fits_free_room``), pricing its first SCALAR_STEPS steps one by one and the rest in
# numpy. (gpu GiB, token budget): unbounded, room for the whole trace, and a tight GPU where only
# some spans fit.
ROOMY = [(float("inf"), None), (float("inf"), WINDOW), (40.0, None), (0.3, None)]


def _spans_by_path(monkeypatch) -> list[tuple[bool, int]]:
    """Record, for every bulk span, whether it took the roomy path and the evictions it made."""
    seen: list[tuple[bool, int]] = []
    bulk, fits = sim.spans.bulk_span, sim.spans.fits_free_room
    decided: list[bool] = []

    def fits_recorded(core, pages):
        decided.append(fits(core, pages))
        return decided[-1]

    def bulk_recorded(core, *args):
        decided.clear()
        evictions = len(core.mem.evict_samples)
        done = bulk(core, *args)
        if done:
            assert len(decided) == 1
            seen.append((decided[0], len(core.mem.evict_samples) - evictions))
        return done

    monkeypatch.setattr(sim.spans, "fits_free_room", fits_recorded)
    monkeypatch.setattr(sim.spans, "bulk_span", bulk_recorded)
    return seen


@pytest.mark.parametrize("scalar_steps", [1, 48, 10**9], ids=["numpy", "default", "python"])
@pytest.mark.parametrize("gpu,budget", ROOMY, ids=["unbounded", "unbounded-window", "40g", "0.3g"])
def test_roomy_spans_equal_strict_replay(gpu, budget, scalar_steps, monkeypatch):
    monkeypatch.setattr(sim.spans, "SCALAR_STEPS", scalar_steps)
    spans = _spans_by_path(monkeypatch)
    mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block")
    fast = simulate(SESSIONS, COST, mem, policy="lru", seed=1, budget=budget)
    roomy = [evictions for took, evictions in spans if took]
    assert roomy and not any(roomy)  # roomy spans ran, and none of them evicted
    if gpu != 0.3:
        assert len(roomy) == len(spans)  # with room for every page, every bulk span is roomy
    else:
        assert any(evictions for took, evictions in spans if not took)  # the others did evict
    slow = simulate(SESSIONS, COST, mem, policy="lru", seed=1, decode_spans=False, budget=budget)
    assert fast.turns.equals(slow.turns)
    assert fast.stats.steps == slow.stats.steps
    assert np.array_equal(fast.stats.step_s, slow.stats.step_s)
    assert fast.stats.tbt.percentiles((50, 99)) == slow.stats.tbt.percentiles((50, 99))


@pytest.mark.parametrize("gpu", [40.0, 0.3])
def test_roomy_spans_equal_the_numpy_path_to_the_bit(gpu, monkeypatch):
    # the same spans through the path that works out victims in numpy (none, here): the same
    # ledger, steps and GPU occupancy integral (gpu_util), bit for bit
    mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block")
    roomy = simulate(SESSIONS, COST, mem, policy="lru", seed=1)
    taken = []
    fits = sim.spans.fits_free_room
    monkeypatch.setattr(sim.spans, "fits_free_room", lambda c, p: taken.append(fits(c, p)) and 0)
    general = simulate(SESSIONS, COST, mem, policy="lru", seed=1)
    assert any(taken)  # some span could have been roomy: it went through numpy instead
    assert roomy.turns.equals(general.turns)
    assert np.array_equal(roomy.stats.step_s, general.stats.step_s)
    assert roomy.stats.gpu_util == general.stats.gpu_util and not np.isnan(roomy.stats.gpu_util)


# A span that evicts works out its victims and occupancy in plain Python up to SCALAR_STEPS steps,
# in numpy beyond: (gpu GiB, cpu GiB, unit, token budget), victims dropped or demoted.
EVICTING = [
    (0.3, 0.0, "block", None),
    (0.4, 0.5, "block", None),
    (0.4, 0.5, "layer_block", None),
    (0.1, 0.0, "block", WINDOW),
]


@pytest.mark.parametrize("gpu,cpu,unit,budget", EVICTING, ids=["drop", "demote", "layer", "window"])
def test_evicting_spans_python_and_numpy_agree_to_the_bit(gpu, cpu, unit, budget, monkeypatch):
    spans = _spans_by_path(monkeypatch)
    mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
    runs = {}
    for scalar_steps in (10**9, 1):  # every span in Python, then every one in numpy
        monkeypatch.setattr(sim.spans, "SCALAR_STEPS", scalar_steps)
        spans.clear()
        runs[scalar_steps] = simulate(SESSIONS, COST, mem, policy="lru", seed=1, budget=budget)
        assert any(evictions for took, evictions in spans if not took)  # some span evicted
    python, numpy_ = runs[10**9], runs[1]
    slow = simulate(SESSIONS, COST, mem, policy="lru", seed=1, decode_spans=False, budget=budget)
    for fast in (python, numpy_):
        assert fast.turns.equals(slow.turns)
        assert np.array_equal(fast.stats.step_s, slow.stats.step_s)
        assert np.array_equal(fast.stats.tbt.arrays()[1], slow.stats.tbt.arrays()[1])
    # the occupancy integral, summed in the same order on both paths
    assert python.stats.gpu_util == numpy_.stats.gpu_util and not np.isnan(python.stats.gpu_util)


class _Mem:
    def __init__(self, free: float) -> None:
        self._free = free

    def free(self, tier) -> float:
        return self._free


class _Core:
    """What ``evicted_units`` reads of a scheduler."""

    def __init__(self, upp: int, unit: int, free: float) -> None:
        self.upp, self.unit_bytes, self.mem = upp, unit, _Mem(free)


@given(
    st.integers(1, 40),  # units a page
    st.integers(1, 4096),  # bytes a unit
    st.integers(0, 200),  # allocations
    st.floats(0, 1e6, allow_nan=False),  # free GPU bytes
)
def test_evicted_units_is_what_each_allocation_lacks(upp, unit, total, free):
    # the plain model: allocation k (1-based) of upp units takes free units first
    free_units = int(free // unit)
    model = [
        max(0, k * upp - free_units) - max(0, (k - 1) * upp - free_units)
        for k in range(1, total + 1)
    ]
    assert sim.spans.evicted_units(_Core(upp, unit, free), total) == model


class _Copies:
    """A copy of n bytes takes n microseconds."""

    @staticmethod
    def copy_s(direction: str, nbytes: int) -> float:
        return nbytes * 1e-6


class _DemotingCore:
    """What ``demotions_hide`` reads of a scheduler with a CPU tier and asynchronous saves."""

    def __init__(self, step: int) -> None:
        self.step, self.unit_bytes, self.pricer = step, 100, _Copies()
        self.mem = _Mem(0.0)
        self.mem.capacity = [1e9, 1e9]
        self.cfg = EngineConfig(async_save=True)


@given(
    st.integers(0, 1000),  # the span's first step
    st.lists(st.floats(1e-5, 1e-3), min_size=1, max_size=20),  # its steps' durations
    st.data(),
)
def test_demotions_hide_when_each_steps_copy_fits_in_it(step0, durations, data):
    n = len(durations)
    due = sorted(data.draw(st.lists(st.integers(step0, step0 + n - 1), max_size=12)))
    evicted = data.draw(st.lists(st.integers(0, 4), min_size=len(due), max_size=len(due)))
    # the plain model: each step's demoted units, copied within that step
    units = [sum(e for j, e in zip(due, evicted) if j == step0 + i) for i in range(n)]
    model = all(u * 100 * 1e-6 <= d for u, d in zip(units, durations))
    assert sim.spans.demotions_hide(_DemotingCore(step0), due, evicted, durations) == model


class _Session:
    def __init__(self, index: int, units: int) -> None:
        self.index, self.tier = index, bytearray(units)


class _Run:
    def __init__(self, sess: _Session, admit_seq: int) -> None:
        self.sess, self.admit_seq = sess, admit_seq


class _PageCore:
    """What ``pinned_in_order`` reads of a scheduler."""

    def __init__(self, upp: int, bt: int) -> None:
        self.upp, self.bt = upp, bt


@given(
    st.integers(1, 5),  # units a page
    st.integers(1, 20),  # steps a page (block tokens)
    st.sampled_from([0, 1, 17]),  # first due steps within bt + this of each other (0: the engine's)
    st.lists(  # growing runs: (session, units it holds, first due step, pages, admission)
        st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(0, 60), st.integers(0, 6)),
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_pinned_in_order_is_the_step_by_step_order(upp, bt, wider, specs, rnd):
    # the plain model: every new page as (step, admission, its place in the list), sorted; a
    # session's pages follow on from what it holds and what earlier runs of the list give it
    sessions: dict[int, _Session] = {}
    growing = []
    admits = rnd.sample(range(1000), len(specs))
    for (index, units, key, count), admit in zip(specs, admits, strict=True):
        sess = sessions.setdefault(index, _Session(index, units * upp))
        key %= bt + wider  # (wider: ties between one run's page and another's)
        growing.append((_Run(sess, admit), key, count))
    pages = []
    given_to: dict[int, int] = {}
    for place, (run, key, count) in enumerate(growing):
        first = len(run.sess.tier) + given_to.get(run.sess.index, 0)
        for i in range(count):
            pages.append((key + i * bt, run.admit_seq, place, first + i * upp))
        given_to[run.sess.index] = given_to.get(run.sess.index, 0) + count * upp
    model = [
        uid_of(run_index, p + u)
        for _, _, place, p in sorted(pages)
        for run_index in [growing[place][0].sess.index]
        for u in range(upp)
    ]
    core = _PageCore(upp, bt)
    steps = sim.spans.allocation_steps(core, growing)
    assert sim.spans.pinned_in_order(core, growing, steps) == model
