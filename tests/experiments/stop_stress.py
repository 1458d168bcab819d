"""Stop sweeps at random moments, many times, and check that every stop ends cleanly.

Each try runs a 12-point sweep on two local workers in a fresh process (its own session, so its
children can be found), stops it after a random delay, and checks:

* **exit**: the stopped process exits within ``EXIT_BOUND_S`` (an interrupted sweep once printed its
  message and then waited for ever on a process pool's manager thread);
* **leak**: within ``LEAK_BOUND_S`` after that, nothing of its session is alive (no worker, no
  Manager, no resource tracker), and the process itself reported no thread or pool left behind;
* **resume**: a rerun of the same config resumes from the checkpoints and writes the summary an
  uninterrupted run writes;
* **heard**: a SIGINT or SIGTERM that reached a running sweep stopped it (one was once recorded
  during the last wait on the workers and then forgotten: the sweep ran on to the end).

The ways to stop it:

========================  ====================================================================
``cli-sigint``            ``kvsim run``, SIGINT to its main process (``kill -INT``)
``cli-sigterm``           ``kvsim run``, SIGTERM to its main process
``cli-worker-kill``       ``kvsim run``, SIGKILL to one of its worker processes
``cli-crash``             ``kvsim run``, SIGKILL to its main process: the workers must follow
``api-sigint``            ``run_experiment`` called from Python, SIGINT
``api-sigterm``           ``run_experiment`` under the command's SIGTERM handler, SIGTERM
``api-worker-kill``       ``run_experiment``, SIGKILL to one of its worker processes
``api-error``             ``run_experiment``, a grid point raises inside a worker
``ray-sigint``            ``kvsim run`` with ``executor: {kind: ray}``, SIGINT to its main process
``ray-sigterm``           the same, SIGTERM
``ray-crash``             the same, SIGKILL to its main process: Ray's processes must follow
========================  ====================================================================

The Ray ways start a Ray on this machine for each try (tens of seconds); they are not in the
default set: name them with ``--ways``.

Run as a script it prints a table of tries, hangs, leaks and resume mismatches per way:
``python tests/experiments/stop_stress.py --tries 10`` (``--repo`` points at another checkout,
to measure an older version). ``tests/experiments/test_stop_stress.py`` runs a few of each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: proc_table
import proc_table  # noqa: E402

EXIT_BOUND_S = 30.0  # from the stop to the process's exit
LEAK_BOUND_S = 10.0  # from its exit to the last process of its session gone
MAX_DELAY_S = 3.5  # a stop comes after U(0, MAX_DELAY_S): an unstopped run takes about 3-4 s
CLI_WAYS = ("cli-sigint", "cli-sigterm", "cli-worker-kill", "cli-crash")
API_WAYS = ("api-sigint", "api-sigterm", "api-worker-kill", "api-error")
RAY_WAYS = ("ray-sigint", "ray-sigterm", "ray-crash")
WAYS = CLI_WAYS + API_WAYS  # the default set
RAY_MAX_DELAY_S = 12.0  # a Ray run takes about 12 s here, most of it starting Ray

CONFIG = """\
name: stress
trace: {kind: synthetic, sessions: 30, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.5, 1, 2, 4], cpu_kv_gb: 0}
policies: [lru, fifo, 'stress_policy:FlaggedLRU']
seeds: [1]
executor: {kind: local, workers: 2}
"""

# LRU under another name that fails, inside the worker, while the flag file exists: the error way.
POLICY = """
import os

from sim.policies import policy_class


class FlaggedLRU(policy_class("lru")):
    def __init__(self, ctx):
        if os.path.exists(os.environ["STRESS_FAIL_FLAG"]):
            raise RuntimeError("stress: this grid point fails while the flag file exists")
        super().__init__(ctx)
"""


@dataclass
class Try:
    way: str
    delay_s: float
    exit_s: float | None = None  # None: it did not exit within EXIT_BOUND_S (a hang)
    status: int | None = None
    leaked: list[str] = field(default_factory=list)  # processes, threads or pools left behind
    resumed_equal: bool | None = None  # None: not checked (it hung)
    lost_signal: bool = False  # a signal reached the running sweep, which then ran to the end
    wrong_status: bool = False  # `kvsim run` stopped by a signal exited with another status
    note: str = ""

    @property
    def hung(self) -> bool:
        return self.exit_s is None

    @property
    def ok(self) -> bool:
        return (
            not self.hung
            and not self.leaked
            and self.resumed_equal is True
            and not self.lost_signal
            and not self.wrong_status
        )


# ---------------------------------------------------------------------------------------------
# Processes, from /proc


def worker_children(pid: int) -> list[int]:
    """Spawned multiprocessing children of ``pid`` other than its resource tracker."""
    return [p.pid for p in proc_table.children(pid) if "spawn_main" in p.cmdline]


def describe(pids: list[int]) -> list[str]:
    return [
        f"pid {pid}: {p.cmdline[:120] if (p := proc_table.read(pid)) else '(gone)'}" for pid in pids
    ]


def _default_sigint() -> None:
    """In a child about to start: SIGINT back to its default. A shell starts background jobs with
    SIGINT ignored, children inherit that, and Python installs its KeyboardInterrupt handler only
    where SIGINT is at its default: a stress run started with `&` would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# ---------------------------------------------------------------------------------------------
# One try


class Bench:
    """The scratch folder, config and reference summary that every try shares."""

    def __init__(self, repo: Path, work: Path) -> None:
        self.repo, self.work = repo, work
        (work / "stress_policy.py").write_text(POLICY)
        self.config = work / "stress.yaml"
        self.config.write_text(CONFIG)
        self.ray_config = work / "stress-ray.yaml"
        self.ray_config.write_text(
            CONFIG.replace("{kind: local, workers: 2}", "{kind: ray, address: local}")
        )
        self.flag = work / "fail.flag"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(repo), str(work)]),
            "STRESS_FAIL_FLAG": str(self.flag),
            "PYTHONUNBUFFERED": "1",
        }
        self.count = 0
        ref = self.run_cli(work / "reference")
        if ref.wait(timeout=300) != 0:
            raise RuntimeError(f"the reference run failed: {self.log(ref).read_text()}")
        self.reference = self.summary(work / "reference")

    def log(self, proc: subprocess.Popen) -> Path:
        return self.work / f"log-{proc.pid}.txt"

    def _start(self, argv: list[str]) -> subprocess.Popen:
        log = self.work / f"log-{time.monotonic_ns()}.txt"
        with log.open("w") as f:
            proc = subprocess.Popen(
                argv,
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: its children can be found after it
                preexec_fn=_default_sigint,
            )
        log.rename(self.log(proc))
        return proc

    def run_cli(self, out: Path, ray: bool = False) -> subprocess.Popen:
        config = self.ray_config if ray else self.config
        cmd = [sys.executable, "-m", "experiments", "run", str(config), "--out", str(out)]
        return self._start([*cmd, "--quiet"])

    def run_api(self, out: Path, way: str, delay: float) -> subprocess.Popen:
        args = ["--api", way, "--delay", str(delay), "--out", str(out), "--config"]
        return self._start([sys.executable, __file__, *args, str(self.config)])

    def summary(self, out: Path):
        import pandas as pd

        if str(self.repo) not in sys.path:
            sys.path.insert(0, str(self.repo))
        from sim.metrics import WALL_CLOCK_COLUMNS

        df = pd.read_csv(out / "summary.csv")
        return df[[c for c in df.columns if c not in (*WALL_CLOCK_COLUMNS, "pass_evict_us")]]

    def one(self, way: str, delay: float) -> Try:
        self.count += 1
        out = self.work / f"out{self.count}"
        t = Try(way, round(delay, 3))
        if way == "api-error":
            self.flag.touch()
        ray = way.startswith("ray")
        proc = self.run_api(out, way, delay) if way.startswith("api") else self.run_cli(out, ray)
        try:
            if not way.startswith("api"):
                time.sleep(delay)
                self._stop_cli(proc, way, t)
            stopped = time.monotonic()
            try:
                t.status = proc.wait(timeout=EXIT_BOUND_S + (MAX_DELAY_S if "api" in way else 0))
                t.exit_s = round(time.monotonic() - stopped, 3)
            except subprocess.TimeoutExpired:
                t.note += self._dump(proc.pid)
            self._wait_for_leaks(proc.pid, t)
        finally:
            proc_table.kill_session(proc.pid)
            if proc.poll() is None:
                proc.wait()
            self.flag.unlink(missing_ok=True)
        text = self.log(proc).read_text()
        t.leaked += [ln for ln in text.splitlines() if ln.startswith("LEAKED ")]
        signalled = way.endswith(("-sigint", "-sigterm")) and not way.startswith("api")
        signalled = signalled and "finished before" not in t.note
        t.lost_signal = "LOST " in text or (signalled and t.status == 0)
        # Stopped before its results were whole, it exits 130 or 143; a signal that came once they
        # were (during the interpreter's exit) may end it with the signal itself: that is fine.
        expected = {"-sigint": 130, "-sigterm": 143}
        stopped = not (out / "summary.csv").exists()
        for suffix, status in expected.items():
            if signalled and stopped and way.endswith(suffix) and t.status != status:
                t.note += f"exit status {t.status}, not {status}; "
                t.note += "its output ended: " + " | ".join(text.splitlines()[-6:]) + "; "
                t.wrong_status = True
        if not t.hung:
            self._resume(out, t, ray)
        return t

    def _stop_cli(self, proc: subprocess.Popen, way: str, t: Try) -> None:
        if proc.poll() is not None:
            t.note += "finished before the stop; "
        elif way.endswith("-sigint"):
            proc.send_signal(signal.SIGINT)
        elif way.endswith("-sigterm"):
            proc.send_signal(signal.SIGTERM)
        elif way.endswith("-crash"):
            proc.send_signal(signal.SIGKILL)
        elif way == "cli-worker-kill":
            t.note += kill_a_worker(proc.pid)

    def _wait_for_leaks(self, sid: int, t: Try) -> None:
        t.leaked += describe([p.pid for p in proc_table.left_in_session(sid, LEAK_BOUND_S)])

    def _dump(self, pid: int) -> str:
        """Where a hung process stands, if py-spy is installed."""
        try:
            got = subprocess.run(
                ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return "hung; "
        return "hung: " + " | ".join(got.stdout.split("\n")[:40]) + "; "

    def _resume(self, out: Path, t: Try, ray: bool = False) -> None:
        if (out / "summary.csv").exists():  # the stop came too late: the results must be whole
            t.note += "the run had finished; "
            self._compare(out, t)
            return
        proc = self.run_cli(out, ray)
        try:
            status = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            t.resumed_equal, t.note = False, t.note + "the rerun hung; "
            return
        if status != 0:
            t.resumed_equal = False
            t.note += f"the rerun failed ({status}): {self.log(proc).read_text()[-300:]}; "
            return
        self._compare(out, t)

    def _compare(self, out: Path, t: Try) -> None:
        import pandas as pd

        got = self.summary(out)
        try:
            pd.testing.assert_frame_equal(got, self.reference)
            t.resumed_equal = True
        except AssertionError as exc:
            t.resumed_equal, t.note = False, t.note + f"rerun differs: {exc}; "


def kill_a_worker(parent: int) -> str:
    """SIGKILL one spawned child of ``parent`` (random); what happened, for the note."""
    workers = worker_children(parent)
    if not workers:
        return "no worker to kill; "
    victim = random.choice(workers)
    os.kill(victim, signal.SIGKILL)
    return f"killed {victim} of {len(workers)}; "


# ---------------------------------------------------------------------------------------------
# The API side: runs in its own process, reports what it left behind, then exits


def api_main(way: str, delay: float, config: str, out: str) -> int:
    import concurrent.futures.process as cfp
    import multiprocessing

    from experiments.cli import sigterm_raises
    from experiments.runner import run_experiment
    from experiments.schema import load_experiment

    exp = load_experiment(config)
    before = set(threading.enumerate())
    running = threading.Event()
    sent_at: list[float] = []

    def stop_later() -> None:
        if way == "api-error" or not running.wait(5):
            return
        time.sleep(delay)
        if not running.is_set():
            return
        if way == "api-worker-kill":
            print(kill_a_worker(os.getpid()), flush=True)
        else:
            sent_at.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT if way == "api-sigint" else signal.SIGTERM)

    stopper = threading.Thread(target=stop_later, daemon=True)
    stopper.start()
    # Past the run, a late signal only records itself: it must not be taken for a leak.
    late: list[int] = []
    try:
        with sigterm_raises():
            running.set()
            try:
                run_experiment(exp, out, show_progress=False)
                if sent_at and time.monotonic() - sent_at[0] > 0.05:
                    print("LOST the signal: the run went on to its end", flush=True)
                else:
                    print("finished before the stop", flush=True)
            finally:
                running.clear()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, lambda s, f: late.append(s))
    except (KeyboardInterrupt, Exception) as exc:
        print(f"stopped: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    deadline = time.monotonic() + LEAK_BOUND_S
    while time.monotonic() < deadline:
        threads = [
            t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon
        ]
        children = worker_children(os.getpid())
        pools = list(getattr(cfp, "_threads_wakeups", {}).keys())
        if not (threads or children or pools or multiprocessing.active_children()):
            break
        time.sleep(0.1)
    for t in threads:
        print(f"LEAKED thread {t.name} ({type(t).__name__})", flush=True)
    for p in describe(children):
        print(f"LEAKED process {p}", flush=True)
    for _ in pools:
        print("LEAKED process pool manager thread", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------


def stress(repo: Path, ways: list[str], tries: int, seed: int, echo=print) -> list[Try]:
    """``tries`` of each way, in a shuffled order, with random delays (seeded)."""
    rng = random.Random(seed)
    plan = [w for w in ways for _ in range(tries)]
    rng.shuffle(plan)
    with tempfile.TemporaryDirectory(prefix="kvsim-stop-stress-") as tmp:
        bench = Bench(repo, Path(tmp))
        results = []
        for i, way in enumerate(plan, 1):
            t = bench.one(way, rng.uniform(0, RAY_MAX_DELAY_S if way in RAY_WAYS else MAX_DELAY_S))
            results.append(t)
            mark = "ok" if t.ok else "FAIL"
            echo(
                f"[{i}/{len(plan)}] {way} after {t.delay_s:.2f} s: {mark} "
                f"(exit {t.exit_s} s, status {t.status}) {t.note}{'; '.join(t.leaked)}"
            )
    return results


def table(results: list[Try]) -> str:
    rows = [
        "| way | tries | hung | leaked | resume differs | signal lost | wrong status "
        "| exit s (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = Counter(t.way for t in results)
    for way in WAYS + RAY_WAYS:
        if way not in by:
            continue
        ts = [t for t in results if t.way == way]
        exits = [t.exit_s for t in ts if t.exit_s is not None]
        rows.append(
            f"| {way} | {len(ts)} | {sum(t.hung for t in ts)} | {sum(bool(t.leaked) for t in ts)} "
            f"| {sum(t.resumed_equal is False for t in ts)} | {sum(t.lost_signal for t in ts)} "
            f"| {sum(t.wrong_status for t in ts)} | {max(exits, default=float('nan')):.2f} |"
        )
    total = len(results)
    rows.append(
        f"| all | {total} | {sum(t.hung for t in results)} | "
        f"{sum(bool(t.leaked) for t in results)} | "
        f"{sum(t.resumed_equal is False for t in results)} | "
        f"{sum(t.lost_signal for t in results)} | {sum(t.wrong_status for t in results)} | |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tries", type=int, default=5, help="tries of each way")
    p.add_argument("--ways", nargs="+", choices=WAYS + RAY_WAYS, default=list(WAYS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    p.add_argument("--json", type=Path, help="write every try here")
    p.add_argument("--api", choices=API_WAYS, help=argparse.SUPPRESS)  # one API-side try
    p.add_argument("--delay", type=float, help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.api:
        return api_main(args.api, args.delay, args.config, args.out)
    results = stress(args.repo.resolve(), args.ways, args.tries, args.seed)
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in results], indent=1))
    print(table(results))
    return 0 if all(t.ok for t in results) else 1


if __name__ == "__main__":
    sys.exit(main())
