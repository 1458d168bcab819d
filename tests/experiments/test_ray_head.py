"""experiments.ray_head: a local Ray head that ends with the process that started it, however that
process ends (done with Ray, stopped while Ray starts, SIGKILLed). Each test starts a real Ray in a
child process of its own session, so that everything it leaves can be found: `slow` (5-20 s each)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import proc_table
import pytest

pytest.importorskip("ray")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]
REPO = Path(__file__).resolve().parents[2]

HOLD = """
import time
from experiments.ray_head import local_ray_head
print("starting", flush=True)
with local_ray_head() as address:
    print(address, flush=True)
    time.sleep(600)
"""

USE = """
import ray
from experiments.ray_head import local_ray_head
with local_ray_head() as address:
    ray.init(address=address, log_to_driver=False)
    print(ray.get(ray.remote(lambda: 6 * 7).remote()), flush=True)
    ray.shutdown()
"""


def _start(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its session: everything it starts can be found
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _left_after(sid: int, bound_s: float) -> list[str]:
    """What of session ``sid`` is still alive ``bound_s`` seconds from now (sooner if nothing)."""
    return [p.cmdline[:100] for p in proc_table.left_in_session(sid, bound_s)]


def _cleanup(proc: subprocess.Popen) -> None:
    """Whatever a failed test left: killed, so that it does not outlive the test."""
    proc_table.kill_session(proc.pid)
    proc.wait()


def test_ray_runs_and_nothing_of_it_outlives_the_block():
    proc = _start(USE)
    try:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0 and out.strip().splitlines()[-1] == "42"
        assert _left_after(proc.pid, 1.0) == []  # the block's end waits for Ray's processes
    finally:
        _cleanup(proc)


def test_ray_ends_when_the_process_that_started_it_is_killed():
    proc = _start(HOLD)
    try:
        assert proc.stdout.readline().strip() == "starting"
        address = proc.stdout.readline().strip()
        assert address.startswith("127.0.0.1:")
        members = [p.cmdline for p in proc_table.session_members(proc.pid)]
        assert any("gcs_server" in c for c in members) and any("raylet" in c for c in members)
        proc.kill()  # a crash: no cleanup code runs in it
        proc.wait()
        assert _left_after(proc.pid, 15.0) == []  # GRACE_S of SIGTERM, then SIGKILL
    finally:
        _cleanup(proc)


def test_stopped_while_ray_starts_it_leaves_nothing():
    proc = _start(HOLD)
    try:
        assert proc.stdout.readline().strip() == "starting"
        time.sleep(1.0)  # `ray start` is under way (it takes several seconds)
        members = [p.cmdline for p in proc_table.session_members(proc.pid)]
        assert any("experiments.ray_head" in c for c in members)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == -signal.SIGINT  # no wait for Ray to finish starting
        assert _left_after(proc.pid, 5.0) == []
    finally:
        _cleanup(proc)
