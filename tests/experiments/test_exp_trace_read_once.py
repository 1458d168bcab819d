"""A trace is read once per process, whatever time scales the grid replays it at; the timed copy
is the one ``traces.load_trace`` gives for that spec, and only the latest is kept."""

from __future__ import annotations

import json

import traces
from experiments import executor
from experiments.schema import TraceSpec

SPEC = {"kind": "synthetic", "sessions": 30, "seed": 4}


def _spec(**timing) -> TraceSpec:
    opts = {k: v for k, v in {**SPEC, **timing}.items() if k != "kind"}
    return TraceSpec("synthetic", json.dumps(opts, sort_keys=True), "syn")


def test_a_rate_sweep_reads_its_trace_once_and_keeps_one_timed_copy(monkeypatch):
    monkeypatch.setattr(executor, "_TRACES", {})
    monkeypatch.setattr(executor, "_TIMED", {})
    reads: list[dict] = []
    real = traces.load_trace

    def counting(spec):
        reads.append(dict(spec))
        return real(spec)

    monkeypatch.setattr(traces, "load_trace", counting)
    for timing in ({"time_scale": 2.0}, {"time_scale": 0.5, "until_s": 3.0}, {}):
        got = executor.load_sessions(_spec(**timing))
        assert got == tuple(real({**SPEC, **timing}).sessions)
        if timing:  # only the latest timed copy is kept
            assert list(executor._TIMED) == [_spec(**timing).key]
    assert reads == [SPEC]  # read once, without its timing options
    assert [s.start_s for s in executor.load_sessions(_spec(time_scale=2.0))] == [
        2 * s.start_s for s in executor.load_sessions(_spec())
    ]
    assert reads == [SPEC]
