"""The Ray executor on a new local Ray (2 CPUs, no dashboard) started here: the same results as the
local executor, checkpointed points as they complete (a resumed sweep), a failing point named, and
the clear error when ray is not installed or no cluster can be reached (no real Ray needed).

The tests on a real Ray are `slow` (starting Ray and its workers takes 10-20 s on 2 cores): run them
with `python -m pytest tests/experiments/test_exp_ray.py -m ""`."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments import ray_head
from experiments.checkpoint import Checkpoints, partial_dir
from experiments.executor import PointError, run_points
from experiments.results import SESSIONS_FILE, SUMMARY_FILE, TURNS_FILE
from experiments.runner import run_experiment
from experiments.schema import ConfigError, ExecutorSpec, load_experiment, parse_experiment
from sim.metrics import WALL_CLOCK_COLUMNS

REPO = Path(__file__).resolve().parents[2]
# 2 policies x 3 GPU capacities = 6 points on a tiny synthetic trace (a second or so each)
GRID = {
    "name": "ray-sweep",
    "trace": {"kind": "synthetic", "sessions": 8, "seed": 3},
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "memory": {"gpu_kv_gb": [0.5, 1.0, 2.0], "cpu_kv_gb": 0},
    "policies": ["lru", "fifo"],
}
RAY = {
    "kind": "ray",
    "address": "local",
}  # unused while the fixture's Ray runs (the executor joins it)
# the wall-clock columns, and the target judged on one of them, differ between identical runs
SKIP = (*WALL_CLOCK_COLUMNS, "pass_evict_us")


@pytest.fixture(scope="module")
def local_ray():
    """A new Ray instance on this machine for this module's tests: address="local" never joins a
    cluster that is already running (RAY_ADDRESS, `ray start`)."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)  # Ray's workers import kvsim from the driver's working directory
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=256 * 2**20,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        mp.undo()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The grid run by the local executor (in this process): the results folder."""
    out = tmp_path_factory.mktemp("reference") / "local"
    run_experiment(parse_experiment(GRID), out, show_progress=False)
    return out


def _same_summary(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [c for c in a.columns if c not in SKIP]
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


def _same_folder(a: Path, b: Path) -> None:
    _same_summary(pd.read_csv(a / SUMMARY_FILE), pd.read_csv(b / SUMMARY_FILE))
    for name in (TURNS_FILE, SESSIONS_FILE):
        pd.testing.assert_frame_equal(pd.read_parquet(a / name), pd.read_parquet(b / name))


@pytest.mark.slow
def test_ray_gives_the_local_executors_results(local_ray, reference, tmp_path):
    remote = run_experiment(
        parse_experiment({**GRID, "executor": RAY}), tmp_path / "ray", show_progress=False
    )
    assert len(remote.summary) == 6 and remote.resumed == 0
    local = pd.read_csv(reference / SUMMARY_FILE)
    assert local["policy"].tolist() == remote.summary["policy"].tolist()  # grid order
    assert local["gpu_kv_gb"].tolist() == remote.summary["gpu_kv_gb"].tolist()
    _same_folder(reference, tmp_path / "ray")
    assert not partial_dir(tmp_path / "ray").exists()


@pytest.mark.slow
def test_an_interrupted_ray_sweep_resumes(local_ray, reference, tmp_path, monkeypatch):
    exp = parse_experiment({**GRID, "executor": RAY})
    real_save, saved, stop_at = Checkpoints.save, [], [2]

    def save_then_stop(self, result):
        real_save(self, result)  # _run_ray's on_result: each point as it completes
        saved.append(result.point)
        if len(saved) == stop_at[0]:
            raise KeyboardInterrupt  # Ctrl-C after the second finished point

    monkeypatch.setattr(Checkpoints, "save", save_then_stop)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, out, show_progress=False)
    assert not out.exists()
    assert len(list(partial_dir(out).glob("*.pkl"))) == 2
    first = list(saved)
    saved.clear()
    stop_at[0] = None
    outcome = run_experiment(exp, out, show_progress=False)
    assert outcome.resumed == 2 and len(saved) == 4  # only the rest ran, on Ray
    assert not set(first) & set(saved)
    _same_summary(outcome.summary, pd.read_csv(reference / SUMMARY_FILE))
    _same_folder(reference, out)
    assert not partial_dir(out).exists()


@pytest.mark.slow
def test_a_failing_point_on_ray_is_named(local_ray):
    grid = parse_experiment(GRID).grid()
    bad = dataclasses.replace(grid[1], policy="no-such-policy")
    with pytest.raises(PointError, match=r"^grid point 1 \(policy=no-such-policy ") as info:
        run_points([grid[0], bad], ExecutorSpec(**RAY), show_progress=False)
    assert type(info.value) is PointError  # the worker's error itself, not Ray's wrapper


# --- without a real Ray ----------------------------------------------------------------------


def test_ray_not_installed_is_a_clear_config_error(fake_backend, tiny_yaml, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    exp = load_experiment(tiny_yaml)
    with pytest.raises(
        ConfigError, match=r"x\.yaml: executor\.kind: ray requires `pip install ray`"
    ) as info:
        run_points(exp.grid(), ExecutorSpec(kind="ray"), show_progress=False, source="x.yaml")
    assert info.value.key == "executor.kind"


class _FakeRay:
    """Just enough of ray's API to run the executor in this process."""

    def __init__(self, fail_init: Exception | None = None, log: list | None = None) -> None:
        self.inits: list[dict] = []
        self.fail_init = fail_init
        self.connected = False
        self.log = [] if log is None else log

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, **kw) -> None:
        if self.fail_init:
            raise self.fail_init
        self.inits.append(kw)
        self.connected = True
        self.log.append(f"init {kw['address']}")

    def shutdown(self) -> None:
        self.connected = False
        self.log.append("shutdown")

    def remote(self, fn):
        class Ref:  # hashable, like an ObjectRef
            def __init__(self, value):
                self.value = value

        class Task:
            @staticmethod
            def remote(*args):
                return Ref(fn(*args))

        return Task

    @staticmethod
    def wait(pending, num_returns=1):
        return pending[:num_returns], pending[num_returns:]

    @staticmethod
    def get(ref):
        return ref.value

    def cancel(self, ref, force=False):
        self.log.append("cancel")


def test_the_executor_joins_the_configured_cluster_for_the_sweep(
    fake_backend, tiny_yaml, monkeypatch
):
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    exp = load_experiment(tiny_yaml)
    spec = ExecutorSpec(kind="ray", address="10.0.0.7:6379")
    got = run_points(exp.grid(), spec, show_progress=False)
    assert [r.index for r in got] == list(range(len(exp.grid())))
    assert fake.log == ["init 10.0.0.7:6379", "shutdown"]  # joined for the sweep, then left


def _fake_head(log: list):
    @contextlib.contextmanager
    def local_ray_head():
        log.append("head starts")
        try:
            yield "127.0.0.1:4321"
        finally:
            log.append("head ends")

    return local_ray_head


@pytest.mark.parametrize(
    ("address", "env", "joined"),
    [
        ("local", None, "127.0.0.1:4321"),  # a Ray of the sweep's own
        (None, None, "127.0.0.1:4321"),  # unset, no RAY_ADDRESS: the same
        (None, "10.0.0.9:6379", "10.0.0.9:6379"),  # unset: RAY_ADDRESS first
    ],
)
def test_a_local_ray_is_the_sweeps_own_and_ends_after_it(
    fake_backend, tiny_yaml, monkeypatch, address, env, joined
):
    log: list[str] = []
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(log=log))
    monkeypatch.setattr(ray_head, "local_ray_head", _fake_head(log))
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    exp = load_experiment(tiny_yaml)
    run_points(exp.grid(), ExecutorSpec(kind="ray", address=address), show_progress=False)
    own = ["head starts", f"init {joined}", "shutdown", "head ends"]
    assert log == (own if env is None else [f"init {joined}", "shutdown"])


@pytest.mark.parametrize("address", ["local", "10.0.0.7:6379"])
def test_a_stopped_sweep_leaves_ray_and_ends_its_head(
    fake_backend, tiny_yaml, monkeypatch, address
):
    """Stopped, a sweep cancels its tasks on a cluster it joined; its own Ray it just ends (the
    head's end stops every worker, and a forced cancel can abort Ray's driver)."""
    log: list[str] = []
    fake = _FakeRay(log=log)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_head, "local_ray_head", _fake_head(log))
    monkeypatch.setattr(
        fake, "wait", lambda pending, num_returns=1: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    exp = load_experiment(tiny_yaml)
    with pytest.raises(KeyboardInterrupt):
        run_points(exp.grid(), ExecutorSpec(kind="ray", address=address), show_progress=False)
    if address == "local":
        assert log == ["head starts", "init 127.0.0.1:4321", "shutdown", "head ends"]
    else:
        tasks = len(exp.grid())
        assert log == [f"init {address}", *["cancel"] * tasks, "shutdown"]


def test_a_ctrl_c_during_the_join_still_leaves_ray_before_its_head_ends(
    fake_backend, tiny_yaml, monkeypatch
):
    """A SIGINT that lands inside ``ray.init`` is held and raised as the call returns: the driver
    must still leave Ray before the head ends (joined when its head went, it crashed on exit)."""
    log: list[str] = []
    fake = _FakeRay(log=log)
    joined = fake.init

    def init_interrupted(**kw):
        joined(**kw)
        signal.raise_signal(signal.SIGINT)  # held until the join returns

    fake.init = init_interrupted
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_head, "local_ray_head", _fake_head(log))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    exp = load_experiment(tiny_yaml)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_points(exp.grid(), ExecutorSpec(kind="ray", address="local"), show_progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert log == ["head starts", "init 127.0.0.1:4321", "shutdown", "head ends"]


def test_a_ray_joined_by_hand_is_used_and_left_joined(fake_backend, tiny_yaml, monkeypatch):
    fake = _FakeRay()
    fake.connected = True  # ray.init called before the sweep
    monkeypatch.setitem(sys.modules, "ray", fake)
    exp = load_experiment(tiny_yaml)
    run_points(exp.grid(), ExecutorSpec(kind="ray", address="local"), show_progress=False)
    assert fake.log == [] and fake.connected


def test_no_ray_cluster_to_join_is_a_config_error(fake_backend, tiny_yaml, monkeypatch):
    monkeypatch.setitem(
        sys.modules,
        "ray",
        _FakeRay(fail_init=ConnectionError("Could not find any running Ray instance.")),
    )
    exp = load_experiment(tiny_yaml)
    with pytest.raises(
        ConfigError,
        match=r"x\.yaml: executor\.address: auto: Could not find any "
        r"running Ray instance\..*address: local",
    ):
        run_points(
            exp.grid(),
            ExecutorSpec(kind="ray", address="auto"),
            show_progress=False,
            source="x.yaml",
        )


def test_a_local_ray_that_cannot_start_is_a_config_error(fake_backend, tiny_yaml, monkeypatch):
    @contextlib.contextmanager
    def failing_head():
        raise ray_head.RayStartError("could not start a local Ray head: `ray start` exited 1")
        yield

    monkeypatch.setitem(sys.modules, "ray", _FakeRay())
    monkeypatch.setattr(ray_head, "local_ray_head", failing_head)
    exp = load_experiment(tiny_yaml)
    with pytest.raises(
        ConfigError, match=r"^x\.yaml: executor\.address: local: could not start .* exited 1"
    ) as info:
        run_points(
            exp.grid(),
            ExecutorSpec(kind="ray", address="local"),
            show_progress=False,
            source="x.yaml",
        )
    assert info.value.key == "executor.address"


SIGNALS_AFTER = """
import os, signal, sys, time
from experiments.executor import run_points
from experiments.schema import ExecutorSpec, parse_experiment

def handled(signum, frame):
    print("handled", signum, flush=True)
    sys.exit(0)

signal.signal(signal.SIGINT, handled)
signal.signal(signal.SIGTERM, handled)
exp = parse_experiment({**GRID, "memory": {"gpu_kv_gb": 1.0, "cpu_kv_gb": 0}, "policies": ["lru"]})
run_points(exp.grid(), ExecutorSpec(kind="ray", address="local"), show_progress=False)
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
time.sleep(5)
print("not handled", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_the_signal_handlers_still_work_after_a_sweep_on_ray(sig):
    """ray.shutdown leaves SIGINT and SIGTERM at the system default underneath Python: a SIGTERM
    between the sweep's end and its results written ended `kvsim run` with no clean-up."""
    pytest.importorskip("ray")
    import subprocess

    code = f"GRID = {GRID!r}\n" + SIGNALS_AFTER
    got = subprocess.run(
        [sys.executable, "-c", code, sig], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip().splitlines()[-1] == f"handled {getattr(signal, sig).value}"
