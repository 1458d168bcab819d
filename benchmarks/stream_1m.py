"""A 1,000,000-turn trace streamed from disk: wall time and peak memory (a benchmark, not a test).

1. Writes a synthetic trace of exactly ``--turns`` turns as canonical JSONL in a temporary folder,
   streaming too: the generator (``traces.synthetic``) draws a whole trace at once, so the file is
   written ``--chunk`` sessions at a time (each chunk its own seed, its start times shifted to
   follow the previous chunk's, its sessions renamed in order), and the last session is cut so the
   file holds exactly ``--turns`` turns. The writer runs in its own process: its peak RSS is the
   generator's, reported on its own line.
2. In a fresh process: ``simulate_to_file(turns.parquet, iter_jsonl(path), ...)`` (policy lru,
   block units, 16-token pages, Llama-3-8B on an H100, a GPU KV of ``--gpu-kv-gb`` far below the
   trace's demand and no CPU tier, so evictions drop KV all the time): the trace streamed from
   disk and the ledger streamed to disk (``sim.ledger_spool``), then ``summarize`` (the summary
   row, read from that file a column at a time). Reports the wall time of the run, the turns
   simulated, the peak RSS when it returned and after the summary (getrusage ru_maxrss; /proc
   VmHWM agrees).
3. In another fresh process: ``read_jsonl(path)`` alone (the whole trace loaded, nothing simulated)
   and its peak RSS; with ``--list-run``, also read_jsonl + simulate, the way a list is run.

Every process also reports its RSS right after its imports (the interpreter, numpy, pandas, simpy:
the floor of any run). What a streamed run still holds per turn or per session is listed below the
table, from the run's own counts: the ledger (on disk, at most
``sim.ledger_spool.ROWS_PER_GROUP`` turns of it in memory), the per-decode-step statistics
(EngineStats.tbt: 16 bytes a decode step up to sim.samples.EXACT_LIMIT steps, then a histogram
whose size follows the range of durations), the eviction timings (EngineStats.evict_ns, the same),
and the sessions' records: those of live sessions only (pulled from the stream and not finished,
or finished with KV still cached: a finished session's record is let go with its last cached page,
``Scheduler(free_records=...)``, a stream's default), so they follow the cache's contents, not the
trace's length. The reader itself keeps one thing per session of the trace: a 64-bit hash of each
session id it has met (``traces.jsonl.SeenIds``, 8 bytes a session, to tell a session that comes
back; a set of the ids held about 100 bytes each, 15 MiB a million turns, until 2026-11-28).

    python benchmarks/stream_1m.py                       # 1,000,000 turns (about 10-15 min here)
    python benchmarks/stream_1m.py --turns 100000        # a tenth
    python benchmarks/stream_1m.py --list-run            # also simulate the list (slower)
    python benchmarks/stream_1m.py --turns 10000000 --no-load   # ten million (about 2 h here)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def _peak_mib() -> float:
    """This process's peak RSS in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


# -- the child processes ---------------------------------------------------------------------------


def child_write(path: str, turns: int, chunk: int, rate: float, seed: int) -> dict:
    from traces.jsonl import write_jsonl
    from traces.records import Session
    from traces.synthetic import SyntheticConfig, generate_synthetic

    import_mib = _peak_mib()
    t0 = time.perf_counter()
    out, part = Path(path), Path(path).with_suffix(".part")
    written = sessions = c = 0
    offset = 0.0
    with out.open("wb") as fh:
        while written < turns:
            load = generate_synthetic(
                SyntheticConfig(sessions=chunk, seed=seed + c, arrival_rate_per_s=rate)
            )
            batch = []
            for s in load.sessions:
                keep = min(len(s.turns), turns - written)
                if keep <= 0:
                    break
                start = s.turns[0].arrival_s
                assert start is not None  # the generator times every first turn
                first = dataclasses.replace(s.turns[0], arrival_s=offset + start)
                batch.append(Session(f"syn{sessions:08d}", (first, *s.turns[1:keep])))
                sessions += 1
                written += keep
            last = batch[-1].turns[0].arrival_s
            assert last is not None
            offset = last + 1.0 / rate  # the next chunk follows
            write_jsonl(batch, part)
            with part.open("rb") as src:
                shutil.copyfileobj(src, fh)
            c += 1
    part.unlink()
    return dict(
        wall_s=time.perf_counter() - t0,
        sessions=sessions,
        turns=written,
        chunks=c,
        bytes=out.stat().st_size,
        import_mib=import_mib,
        peak_mib=_peak_mib(),
        hwm_mib=_hwm_mib(),
    )


def _memory(gpu_kv_gb: float):
    from sim import MemoryConfig

    return MemoryConfig(gpu_kv_gb=gpu_kv_gb, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block")


def _rss_mib() -> float:
    """This process's resident set now, in MiB (VmRSS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


# (turns done, seconds, RSS MiB) at each tenth of a run: what grows with the run, and how fast
RSS_MARKS: list[tuple[int, float, float]] = []


def _progress(total: int):
    t0, done, mark = time.perf_counter(), [0], [0]

    def report(n: int) -> None:
        done[0] += n
        if done[0] - mark[0] >= total // 10:
            mark[0] = done[0]
            el = time.perf_counter() - t0
            rss = _rss_mib()
            RSS_MARKS.append((done[0], el, rss))
            print(
                f"    {done[0]:>10,} turns  {el:7.0f} s  {done[0] / el:7.0f} turns/s"
                f"  RSS {rss:,.0f} MiB",
                file=sys.stderr,
                flush=True,
            )

    return report


def _growth(marks: list) -> float:
    """RSS growth in MiB per million turns from the run's second tenth to its last (the first
    holds the start's one-off allocations), by least squares; NaN with under three marks."""
    pts = marks[1:]
    if len(pts) < 3:
        return math.nan
    xs = [t / 1e6 for t, _, _ in pts]
    ys = [r for _, _, r in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else math.nan


def _run_figures(res, wall: float) -> dict:
    """A SimResult's figures, or a SpooledResult's (its ledger on disk: no frame, ``ledger_mib``
    NaN)."""
    st = res.stats
    turns = len(res.turns) if hasattr(res, "turns") else len(res.ledger)
    return dict(
        wall_s=wall,
        turns=turns,
        rejected_turns=st.rejected_turns,
        sim_time_s=st.sim_time_s,
        steps=st.steps,
        decode_steps=len(st.tbt),
        tbt_exact=st.tbt.exact,
        tbt_p99_s=st.tbt.percentile(99),
        step_record_mib=st.tbt.nbytes / MIB,
        evict_calls=len(st.evict_ns),
        dropped_gib=st.dropped_bytes / 2**30,
        preemptions=st.preemptions,
        gpu_util=st.gpu_util,
        ledger_mib=(
            res.turns.memory_usage(deep=False).sum() / MIB if hasattr(res, "turns") else math.nan
        ),
    )


def _summary_figures(res) -> dict:
    """The run's peak so far, then the summary row's time and the peak with it."""
    from sim.metrics import summarize

    run_peak = _peak_mib()
    t0 = time.perf_counter()
    summarize(res)
    return dict(run_peak_mib=run_peak, summary_s=time.perf_counter() - t0)


def child_stream(path: str, gpu_kv_gb: float, total: int) -> dict:
    from costmodels import cost_model
    from sim.ledger_spool import ROWS_PER_GROUP
    from sim.run import simulate_to_file
    from traces.jsonl import iter_jsonl

    cost = cost_model("llama-3-8b", "h100-sxm")
    import_mib = _peak_mib()
    t0 = time.perf_counter()
    stream = iter_jsonl(path)
    ledger = Path(path).with_name("turns.parquet")
    res = simulate_to_file(
        ledger, stream, cost, _memory(gpu_kv_gb), policy="lru", progress=_progress(total)
    )
    wall = time.perf_counter() - t0
    return dict(
        _run_figures(res, wall),
        ledger_file_mib=ledger.stat().st_size / MIB,
        rows_per_group=ROWS_PER_GROUP,
        **_summary_figures(res),
        rss_marks=RSS_MARKS,
        growth_mib_per_mturn=_growth(RSS_MARKS),
        sessions=stream.sessions,
        import_mib=import_mib,
        peak_mib=_peak_mib(),
        hwm_mib=_hwm_mib(),
    )


def child_load(path: str) -> dict:
    from traces.jsonl import read_jsonl

    import_mib = _peak_mib()
    t0 = time.perf_counter()
    load = read_jsonl(path)
    wall = time.perf_counter() - t0
    return dict(
        wall_s=wall,
        sessions=len(load.sessions),
        turns=load.n_turns,
        import_mib=import_mib,
        peak_mib=_peak_mib(),
        hwm_mib=_hwm_mib(),
    )


def child_list(path: str, gpu_kv_gb: float, total: int) -> dict:
    from costmodels import cost_model
    from sim import simulate
    from traces.jsonl import read_jsonl

    cost = cost_model("llama-3-8b", "h100-sxm")
    import_mib = _peak_mib()
    t0 = time.perf_counter()
    sessions = read_jsonl(path).sessions
    res = simulate(sessions, cost, _memory(gpu_kv_gb), policy="lru", progress=_progress(total))
    wall = time.perf_counter() - t0
    return dict(
        _run_figures(res, wall),
        sessions=len(sessions),
        import_mib=import_mib,
        peak_mib=_peak_mib(),
        hwm_mib=_hwm_mib(),
    )


CHILDREN: dict[str, Callable[..., dict]] = {
    "write": child_write,
    "stream": child_stream,
    "load": child_load,
    "list": child_list,
}


def _spawn(kind: str, *args) -> dict:
    """Run one child in a fresh interpreter; its result is the last line of its stdout."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *map(str, args)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    if proc.returncode:
        raise SystemExit(f"{kind} child failed (exit {proc.returncode})")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["process_s"] = time.perf_counter() - t0
    return got


# -- the driver ------------------------------------------------------------------------------------


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=10_000, help="sessions generated at a time")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.1,
        help="session starts per simulated second (0.1: the queue stays bounded on "
        "one simulated H100 at 8 GiB of KV; at 1.0 it grows without end)",
    )
    ap.add_argument("--gpu-kv-gb", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list-run", action="store_true", help="also read_jsonl + simulate")
    ap.add_argument(
        "--no-load", action="store_true", help="skip loading the file whole (long traces)"
    )
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        fn = CHILDREN[kind]
        conv = {
            "write": (str, int, int, float, int),
            "stream": (str, float, int),
            "load": (str,),
            "list": (str, float, int),
        }[kind]
        print(json.dumps(fn(*(c(v) for c, v in zip(conv, rest, strict=True)))))
        return

    tmp = None
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        path = args.keep / f"synthetic_{args.turns}.jsonl"
    else:
        tmp = tempfile.mkdtemp(prefix="kvsim_stream_")
        path = Path(tmp) / f"synthetic_{args.turns}.jsonl"
    try:
        print(f"writing {args.turns:,} turns to {path} ...", file=sys.stderr, flush=True)
        w = _spawn("write", path, args.turns, args.chunk, args.rate, args.seed)
        print(
            f"  {w['sessions']:,} sessions, {w['bytes'] / MIB:,.0f} MiB, {w['wall_s']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        print("streamed run (simulate_to_file(iter_jsonl(path))) ...", file=sys.stderr, flush=True)
        load0 = os.getloadavg()[0]
        s = _spawn("stream", path, args.gpu_kv_gb, w["turns"])
        s["loadavg"] = (load0, os.getloadavg()[0])
        ld = None
        if not args.no_load:
            print("loading the file whole (read_jsonl) ...", file=sys.stderr, flush=True)
            ld = _spawn("load", path)
        lst = None
        if args.list_run:
            print("list run (read_jsonl + simulate) ...", file=sys.stderr, flush=True)
            lst = _spawn("list", path, args.gpu_kv_gb, w["turns"])
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report(args, w, s, ld, lst)


def report(args, w: dict, s: dict, ld: dict | None, lst: dict | None) -> None:
    print(
        f"\nTrace: {w['turns']:,} turns in {w['sessions']:,} sessions, canonical JSONL "
        f"({w['bytes'] / MIB:,.0f} MiB); synthetic, {args.rate} session starts/s, written "
        f"{args.chunk:,} sessions at a time in {w['wall_s']:.0f} s, writer peak RSS "
        f"{w['peak_mib']:,.0f} MiB."
    )
    print(
        f"Run: lru, block units of 16 tokens, GPU KV {args.gpu_kv_gb} GiB, no CPU tier, "
        f"llama-3-8b on h100-sxm.\n"
    )
    rows = [("streamed: simulate_to_file(iter_jsonl)", s)]
    if ld is not None:
        rows.append(("loaded whole: read_jsonl only", ld))
    if lst is not None:
        rows.append(("list: read_jsonl + simulate", lst))
    head = (
        f"{'':40} {'wall s':>8} {'turns':>11} {'turns/s':>8} {'peak RSS MiB':>13} "
        f"{'after imports':>14}"
    )
    print(head)
    print("-" * len(head))
    for name, r in rows:
        simulated = r.get("steps") is not None
        turns = f"{r['turns']:,}"
        rate = f"{r['turns'] / r['wall_s']:,.0f}" if simulated else "-"
        print(
            f"{name:40} {r['wall_s']:8.0f} {turns:>11} {rate:>8} {r['peak_mib']:13,.0f} "
            f"{r['import_mib']:14,.0f}"
        )
    n = s["turns"]
    print(
        f"\nThe streamed run's own sizes: ledger on disk, {s['ledger_file_mib']:,.0f} MiB of "
        f"parquet ({s['ledger_file_mib'] * MIB / max(n, 1):.0f} B/turn), at most "
        f"{s['rows_per_group']:,} turns of it in memory (232 B/turn) while it is written; "
        f"{s['decode_steps']:,} decode steps ({s['decode_steps'] / max(n, 1):.0f}/turn) -> "
        f"TBT record {s['step_record_mib']:,.1f} MiB ("
        f"{'exact' if s['tbt_exact'] else 'folded into a histogram past sim.samples.EXACT_LIMIT'}"
        f", p99 {s['tbt_p99_s'] * 1e3:.3f} ms); {s['evict_calls']:,} eviction timings (int64 "
        f"samples, compacted the same way); "
        f"{s['sessions']:,} sessions in the trace, each record let go once the session is "
        f"finished and its KV gone; the reader keeps a hash of each id (8 B/session, "
        f"{s['sessions'] * 8 / MIB:,.1f} MiB)."
    )
    print(
        f"Peak RSS when simulate returned {s['run_peak_mib']:,.0f} MiB; summarize (the summary "
        f"row) took {s['summary_s']:.1f} s and the peak became {s['peak_mib']:,.0f} MiB."
    )
    print(
        f"Simulated {s['sim_time_s']:,.0f} s; {s['rejected_turns']:,} turns rejected; "
        f"{s['dropped_gib']:,.0f} GiB of KV dropped; {s['preemptions']:,} preemptions; "
        f"GPU KV utilisation {s['gpu_util']:.3f}. VmHWM: streamed {s['hwm_mib']:,.0f} MiB"
        + ("." if ld is None else f", loaded {ld['hwm_mib']:,.0f} MiB.")
    )
    if s.get("rss_marks"):
        marks = ", ".join(f"{t / 1e6:.2f}M {r:,.0f}" for t, _, r in s["rss_marks"])
        print(
            f"RSS during the streamed run (turns, MiB): {marks}; growth from the second tenth "
            f"on {s['growth_mib_per_mturn']:,.1f} MiB per million turns."
        )
    print(
        f"Machine: {os.cpu_count()} cores, 1-min load average {s['loadavg'][0]:.1f} before the "
        f"streamed run, {s['loadavg'][1]:.1f} after it (wall times move with it)."
    )


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
