"""The differential harness: the real vLLM v1 scheduler and kvsim's ``vllm-v1`` engine, step by step.

Both schedulers are driven by the same loop (``sim.vllm_v1.loop.replay``): the same trace, the
same token ids (a session's history repeats; shared prefixes share), the same arrivals and the same
clock, advanced by kvsim's cost model from each step's batch. The real scheduler runs in a Python
environment of its own that has vLLM (``experiments/vllm_driver.py`` as a subprocess); the two step
logs are compared field by field, and the first mismatch is reported with the steps around it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from costmodels import BatchShape
from sim.vllm_v1.loop import KvsimSide, Replay, StepView, replay
from sim.vllm_v1.offload import OffloadConfig
from sim.vllm_v1.run import make_scheduler
from sim.vllm_v1.scheduler import VllmConfig
from sim.vllm_v1.tokens import SessionTokens
from traces.records import Session

DRIVER = Path(__file__).with_name("vllm_driver.py")
FIELDS = (
    "sched",
    "hit",
    "preempted",
    "free_blocks",
    "running",
    "waiting",
    "done",
    "t",
    "dur",
    "jobs",
    "flush",
)


class RealSide:
    """The real vLLM scheduler in a subprocess, behind the loop's ``Side`` interface."""

    def __init__(self, python: str, cfg: VllmConfig, offload: OffloadConfig | None = None) -> None:
        # vLLM's warnings go to a file: a pipe nobody reads would block the driver once full
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [python, str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            bufsize=1,
        )
        self.tokens: dict[str, tuple[SessionTokens, int]] = {}  # id -> (tokens, length so far)
        self.count = 0
        init = {"op": "init", **asdict(cfg), "max_model_len": cfg.model_len}
        init["offload"] = asdict(offload) if offload is not None else None
        self._send(init)
        self._reply()

    def _send(self, cmd: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")

    def _reply(self) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            self.stderr.seek(0)
            raise RuntimeError(f"the vLLM driver exited: {self.stderr.read()[-3000:]}")
        return json.loads(line)

    def add(self, rid: str, tokens: SessionTokens, prompt_len: int, max_tokens: int) -> None:
        self.tokens[rid] = (tokens, prompt_len)
        self.count += 1
        self._send(
            {
                "op": "add",
                "id": rid,
                "tokens": tokens.token_ids(0, prompt_len),
                "max_tokens": max_tokens,
            }
        )

    def schedule(self, now: float) -> StepView:
        self._send({"op": "schedule"})
        r = self._reply()
        return StepView(
            [tuple(e) for e in r["sched"]],
            r["new"],
            r["preempted"],
            r["free_blocks"],
            r["running"],
            r["waiting"],
            [tuple(j) for j in r.get("jobs", ())],
            r.get("flush", []),
        )

    def update(self, sampled: list[str], now: float, jobs_done: Sequence[int] = ()) -> list[str]:
        ids = {}
        for rid in sampled:
            tokens, length = self.tokens[rid]
            ids[rid] = tokens.token_id(length)
            self.tokens[rid] = (tokens, length + 1)
        self._send({"op": "update", "sampled": ids, "finished_jobs": list(jobs_done)})
        done = self._reply()["done"]
        for rid in done:
            self.count -= 1
            del self.tokens[rid]
        return done

    def has_requests(self) -> bool:
        return self.count > 0

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.stderr.close()


def run_both(
    trace: Sequence[Session],
    cfg: VllmConfig,
    python: str,
    price: Callable[[BatchShape], float],
    replay_mode: str = "closed-loop",
    offload: OffloadConfig | None = None,
    transfer_s: Callable[[str, int], float] | None = None,
) -> dict[str, tuple[Replay, float]]:
    """The trace through kvsim's scheduler and the real one: each side's replay (with its step
    log) and its wall-clock seconds, keyed "kvsim" and "vllm". With ``offload``, both run vLLM's
    CPU offloading connector, its copies priced by ``transfer_s``."""
    out = {}
    for name in ("kvsim", "vllm"):
        side: KvsimSide | RealSide = (
            KvsimSide(make_scheduler(cfg, "lru", offload=offload))
            if name == "kvsim"
            else RealSide(python, cfg, offload)
        )
        t0 = time.perf_counter()
        try:
            run = replay(
                trace,
                side,
                price,
                cfg.block_size,
                cfg.model_len,
                replay_mode,
                log_steps=True,
                async_scheduling=cfg.async_scheduling,
                transfer_s=transfer_s,
            )
        finally:
            if isinstance(side, RealSide):
                side.close()
        out[name] = (run, time.perf_counter() - t0)
    return out


def first_mismatch(a: list[dict], b: list[dict]) -> tuple[int, str] | None:
    """(step, field) of the first difference between two step logs, or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for f in FIELDS:
            if x.get(f) != y.get(f):
                return i, f
    if len(a) != len(b):
        return min(len(a), len(b)), "length"
    return None


def describe_mismatch(kvsim: list[dict], vllm: list[dict], at: tuple[int, str], around: int = 2):
    step, f = at
    lines = [f"first mismatch at step {step}, field {f!r}:"]
    for i in range(max(0, step - around), step + 1):
        for name, log in (("kvsim", kvsim), ("vllm ", vllm)):
            if i < len(log):
                lines.append(f"  {name} {json.dumps(log[i])[:600]}")
    return "\n".join(lines)
