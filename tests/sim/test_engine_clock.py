"""The engine's own clock against SimPy: ``Engine.run`` advances ``now`` by each delay its loop
yields, as one SimPy process of timeouts would. Driving the same loop with a SimPy environment (the
plain model) must give the same ledger, the same statistics and the same simulated times, bit for
bit, with and without decode spans, bounded and unbounded."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig
from sim.engine import Clock, Engine
from sim.scheduler import Scheduler
from tests.sim.trace_strategies import traces

COST = cost_model("llama-3-8b", "h100-sxm")


def _simpy_run(engine: Engine) -> None:
    """The plain model: the engine loop as one SimPy process, each yielded delay a timeout."""
    env = simpy.Environment()

    def process():
        for delay in engine._loop(env):  # SimPy's environment has the ``now`` the loop reads
            yield env.timeout(delay)

    env.process(process())
    env.run()


def _run(sessions, memory, engine_cfg, policy, decode_spans, driver):
    sched = Scheduler(list(sessions), COST, memory, engine_cfg, policy, 0)
    shell = Engine(sched, decode_spans=decode_spans)
    driver(shell)
    ledger = pd.DataFrame(sched.ledger.arrays())
    return ledger, (shell.start_s, shell.end_s, shell.gpu_byte_seconds, sched.step)


@settings(max_examples=60, deadline=None)
@given(
    sessions=traces(),
    gpu_gb=st.sampled_from([math.inf, 0.02, 0.05, 0.2]),
    policy=st.sampled_from(["lru", "fifo"]),
    decode_spans=st.booleans(),
    max_running=st.sampled_from([2, 128]),
)
def test_own_clock_equals_simpy(sessions, gpu_gb, policy, decode_spans, max_running):
    memory = MemoryConfig(gpu_kv_gb=gpu_gb, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block")
    engine_cfg = EngineConfig(max_running=max_running)
    args = (sessions, memory, engine_cfg, policy, decode_spans)
    try:
        want = _run(*args, _simpy_run)
    except Exception as exc:  # a trace the engine refuses must be refused the same way
        with pytest.raises(type(exc)):
            _run(*args, Engine.run)
        return
    got = _run(*args, Engine.run)
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1] == want[1]


def test_clock_starts_at_integer_zero_as_simpy():
    assert type(Clock().now) is type(simpy.Environment().now) is int


def test_a_negative_delay_is_refused_as_simpy_refuses_it():
    class Backwards(Engine):
        def _loop(self, clock):
            yield -1.0

    with pytest.raises(ValueError, match="Negative delay"):
        Backwards.run(Backwards.__new__(Backwards))
    with pytest.raises(ValueError, match="Negative delay"):
        _simpy_run(Backwards.__new__(Backwards))
