"""kvsim's whole process side by side with Vidur 0.0.26 on the single-turn trace (a benchmark,
not a test).

Vidur (microsoft/vidur, ``pip install vidur==0.0.26``) lives in a Python of its own, given by
``--vidur-python``; kvsim never imports it. The script

1. writes the trace of ``benchmarks/single_turn_10k.yaml`` (or ``--config``) in Vidur 0.0.26's
   trace-replay CSV format, ``Date,Time,PromptTokenCount,CompletionTokenCount``: one row a
   request, its arrival (s), its prompt tokens and its reply tokens (Vidur's prefill yields the
   first reply token, as kvsim's does, so the reply's tokens are the decode tokens);
2. writes Vidur's attention profile for Llama-3-8B on an A100 from the samples transcribed in the
   shared data (``vidur/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/
   attention-sample-transcribed.csv``, see ``PROVENANCE.md``: the upstream file is in Git LFS)
   into the work directory, beside nothing else: the MLP profile is read in place;
3. runs Vidur once with an empty predictor cache (cold: it trains its scikit-learn predictors and
   caches them and their predictions), then kvsim and Vidur (warm) in turn ``--repeats`` times,
   each a whole process, timed by wall clock and by the child's user + system CPU;
4. prints min / median / max of each, the ratio Vidur / kvsim, and each simulator's mean TTFT,
   E2E and TBT, so a reader sees that both simulated the same work.

Vidur's setup, matched to the YAML: the A100 and Meta-Llama-3-8B, tensor parallel 1, one replica,
the ``sarathi`` replica scheduler with ``batch_size_cap`` = ``engine.max_running`` and
``chunk_size`` = ``engine.max_batch_tokens``. Sarathi is kvsim's rule: every iteration decodes
every running sequence (one token each) and gives the rest of its token budget to prefills, new
requests admitted first come, first served with head-of-line blocking, prefills beside decodes in
one iteration. Vidur's ``vllm`` scheduler instead runs prefill-only iterations while requests
wait (vLLM v0), which kvsim does not. One difference stays: sarathi cuts a prompt longer than the
budget left into chunks, kvsim (without ``engine.chunked_prefill``) holds it until it fits or runs
it alone; ``--kvsim-chunked`` adds one kvsim run with chunked prefill, Sarathi's rule exactly, to
the metrics table. KV memory: kvsim's ``gpu_kv_gb`` is unbounded, so Vidur gets ``num_blocks``
far above what the trace can hold at once (its default would size the KV from the A100's
memory less the weights). Nothing is fetched from a model hub: Vidur's model configuration is
built in, and Vidur 0.0.26, which downloads its profiles from the Hugging Face hub, runs under a
wrapper that hands it the local profiles instead (``VIDUR_WRAPPER``); ``HF_HUB_OFFLINE=1``,
``WANDB_MODE=disabled``. Its predictors are random forests fitted with one setting unless
``--full-grid`` (``SMALL_GRID``). Vidur writes its request metrics CSV (what the means come from)
and no plots and no Chrome trace (``--no-metrics_config_store_plots``,
``--no-metrics_config_enable_chrome_trace``); kvsim writes its usual results.

    python benchmarks/vidur_side_by_side.py --vidur-python /tmp/vidur-venv/bin/python
    python benchmarks/vidur_side_by_side.py --vidur-python VENV/bin/python --repeats 5 \\
        --work /tmp/vidur-work --kvsim-chunked
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "benchmarks" / "single_turn_10k.yaml"
VIDUR_TRACE_HEADER = ("Date", "Time", "PromptTokenCount", "CompletionTokenCount")
VIDUR_TRACE_DATE = "2023-08-21"  # any one date: Vidur replays the rows of the date it is given
# The shared data's Vidur profiles, relative to its root (``KVSIM_SHARED_DATA``).
MLP_PROFILE = "vidur/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
ATTENTION_SAMPLE = (
    "vidur/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention-sample-transcribed.csv"
)
VERIFIED_COPY = "sw5sh/cs378-assignment3"  # the copy whose size matches upstream's LFS pointer
# Llama-3-8B's attention geometry on one GPU (Vidur filters its profile on these columns).
LLAMA3_8B_ATTENTION = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 8, "block_size": 16}
KV_GRANULARITY = 256  # Vidur 0.0.26's kv_cache_prediction_granularity (its default)


class TraceRow(NamedTuple):
    """One request of Vidur's trace replay: its arrival (s), prompt tokens and reply tokens."""

    arrived_at: float
    num_prefill_tokens: int
    num_decode_tokens: int


def trace_rows(config: dict[str, Any]) -> list[TraceRow]:
    """The requests of ``config["trace"]`` as Vidur rows, in the trace's order (by arrival).

    Only a single-turn trace maps onto Vidur's requests: a later turn arrives a think time after
    its previous reply ends, which a replay of fixed arrival times cannot express, so a session
    of more than one turn is refused."""
    from traces import load_trace

    rows = []
    for session in load_trace(config["trace"]).sessions:
        if len(session.turns) != 1:
            raise ValueError(
                f"session {session.session_id} has {len(session.turns)} turns: Vidur replays "
                "independent requests, so only a single-turn trace can be exported"
            )
        turn = session.turns[0]
        rows.append(TraceRow(session.start_s, turn.prompt_tokens, turn.output_tokens))
    return rows


def write_vidur_trace(rows: Iterable[TraceRow], path: Path) -> None:
    """Vidur 0.0.26's trace-replay CSV (``TraceReplayRequestGenerator``): ``Date, Time,
    PromptTokenCount, CompletionTokenCount``, one row a request; it keeps the rows of one date
    (``VIDUR_TRACE_DATE``, given to it on the command line) and reads ``Time`` as the arrival in
    seconds. Arrivals are written with repr, so they read back to the same floats."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(VIDUR_TRACE_HEADER)
        for r in rows:
            w.writerow(
                (VIDUR_TRACE_DATE, repr(float(r.arrived_at)), r.num_prefill_tokens,
                 r.num_decode_tokens)
            )  # fmt: skip


def read_vidur_trace(path: Path) -> list[TraceRow]:
    """The rows ``write_vidur_trace`` wrote (the header and the date checked)."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        if tuple(header) != VIDUR_TRACE_HEADER:
            raise ValueError(f"{path}: header {header}, expected {list(VIDUR_TRACE_HEADER)}")
        rows = []
        for date, t, p, d in r:
            if date != VIDUR_TRACE_DATE:
                raise ValueError(f"{path}: date {date!r}, expected {VIDUR_TRACE_DATE!r}")
            rows.append(TraceRow(float(t), int(p), int(d)))
        return rows


def vidur_max_tokens(rows: Sequence[TraceRow], budget: int) -> int:
    """Vidur's ``max_tokens`` (its trace reader cuts every prompt to fit prompt + reply under it)
    and ``prediction_max_tokens_per_request`` (the longest KV its predictors price): the longest
    request rounded up to the predictors' KV granularity, at least the step budget."""
    longest = max((r.num_prefill_tokens + r.num_decode_tokens for r in rows), default=0)
    return max(budget, -(-longest // KV_GRANULARITY) * KV_GRANULARITY)


def write_attention_profile(shared: Path, path: Path) -> int:
    """Vidur's attention.csv for Llama-3-8B, TP 1, from the transcribed median timings (ms per
    layer) of the verified copy; returns its row count. Vidur trains on the medians only."""
    cols = [
        *LLAMA3_8B_ATTENTION,
        "num_tensor_parallel_workers",
        "batch_size",
        "prefill_chunk_size",
        "kv_cache_size",
        "is_prefill",
        "time_stats.attn_prefill.median",
        "time_stats.attn_decode.median",
        "time_stats.attn_kv_cache_save.median",
    ]
    n = 0
    with open(shared / ATTENTION_SAMPLE, newline="") as src, open(path, "w", newline="") as dst:
        w = csv.writer(dst, lineterminator="\n")
        w.writerow(cols)
        for row in csv.DictReader(src):
            if row["copy_repo"] != VERIFIED_COPY:
                continue
            w.writerow(
                [
                    *LLAMA3_8B_ATTENTION.values(),
                    row["num_tensor_parallel_workers"],
                    row["batch_size"],
                    row["prefill_chunk_size"],
                    row["kv_cache_size"],
                    row["is_prefill"],
                    row["attn_prefill_median_ms"],
                    row["attn_decode_median_ms"],
                    row["attn_kv_cache_save_median_ms"],
                ]
            )
            n += 1
    return n


# Vidur's random forests are chosen by a grid search: by default 27 settings x 10 folds for each
# of its 13 predictors, an hour of one core on the 2-core machine. The small grid fits one
# setting (the middle of the default grid) with 2 folds; ``--full-grid`` runs Vidur's default.
# Either way a warm run loads the cached forests and their predictions and trains nothing.
SMALL_GRID = (
    "--random_forrest_execution_time_predictor_config_num_estimators", "500",
    "--random_forrest_execution_time_predictor_config_max_depth", "16",
    "--random_forrest_execution_time_predictor_config_min_samples_split", "5",
    "--random_forrest_execution_time_predictor_config_k_fold_cv_splits", "2",
)  # fmt: skip
# Run by Vidur's Python: Vidur 0.0.26 downloads its profiles (and tries precomputed predictions)
# from the Hugging Face hub; these two methods are replaced so that it trains on the local
# profiles given in argv[1:5] and fetches nothing. The rest of argv is Vidur's command line.
VIDUR_WRAPPER = """
import sys
from vidur.execution_time_predictor import sklearn_execution_time_predictor as m

files = tuple(sys.argv[1:5])
del sys.argv[1:5]


def local_profiles(self):
    return files


def no_hub(self):
    raise LookupError("side by side: predictions are trained from local profiles, not fetched")


m.SklearnExecutionTimePredictor._get_input_files = local_profiles
m.SklearnExecutionTimePredictor._load_predictions_from_hf = no_hub
from vidur.main import main

main()
"""


def vidur_args(
    trace: Path,
    profiles: Sequence[Path],
    out: Path,
    cache: Path,
    engine: dict,
    max_tokens: int,
    grid_args: Sequence[str] | None = None,
) -> list[str]:
    """The arguments of Vidur's Python for the YAML's engine (see the module's docstring):
    the wrapper, the four profiles (MLP, attention, all-reduce, send-receive; only the first two
    are read with one GPU) and Vidur's command line."""
    rf = "--random_forrest_execution_time_predictor_config_"
    tg = "--trace_request_generator_config_"
    # far above the most KV any moment of the trace holds: kvsim's GPU KV is unbounded
    num_blocks = 1 << 30
    return [
        "-c", VIDUR_WRAPPER, *map(str, profiles),
        "--replica_config_device", "a100",
        "--replica_config_network_device", "a100_pairwise_nvlink",
        "--replica_config_model_name", "meta-llama/Llama-3-8B",
        "--replica_config_tensor_parallel_size", "1",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--cache_config_block_size", "16",
        "--cache_config_num_blocks", str(num_blocks),
        "--request_generator_config_type", "trace_replay",
        f"{tg}trace_file", str(trace),
        f"{tg}date", VIDUR_TRACE_DATE,
        f"{tg}max_tokens", str(max_tokens),
        f"{tg}prefill_scale_factor", "1",
        f"{tg}decode_scale_factor", "1",
        f"{tg}time_scale_factor", "1",
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_batch_size_cap", str(engine["max_running"]),
        "--sarathi_scheduler_config_chunk_size", str(engine["max_batch_tokens"]),
        "--execution_time_predictor_config_type", "random_forrest",
        f"{rf}prediction_max_prefill_chunk_size", str(engine["max_batch_tokens"]),
        f"{rf}prediction_max_batch_size", str(engine["max_running"]),
        f"{rf}prediction_max_tokens_per_request", str(max_tokens),
        f"{rf}cache_dir", str(cache),
        f"{rf}num_training_job_threads", "1",
        *(grid_args if grid_args is not None else SMALL_GRID),
        "--metrics_config_output_dir", str(out),
        "--no-metrics_config_store_plots",
        "--no-metrics_config_enable_chrome_trace",
    ]  # fmt: skip


class Timed(NamedTuple):
    wall_s: float
    cpu_s: float  # the child's user + system


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> Timed:
    """Run ``cmd`` to the end, its output to ``log``; its wall time and its own CPU time."""
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}); see {log}")
    return Timed(wall, usage.ru_utime + usage.ru_stime)


def kvsim_means(out: Path) -> dict[str, float]:
    """kvsim's per-request means from turns.parquet, TBT as Vidur defines it (below)."""
    import pandas as pd

    cols = ["arrival_s", "first_token_s", "finish_s", "output_tokens"]
    t = pd.read_parquet(out / "turns.parquet", columns=cols)
    s = pd.read_csv(out / "summary.csv")
    return _means(
        t["first_token_s"] - t["arrival_s"],
        t["finish_s"] - t["arrival_s"],
        (t["finish_s"] - t["first_token_s"]) / t["output_tokens"],
        float(s["sim_time_s"].iloc[0]),
    )


def vidur_means(out: Path, log: Path) -> dict[str, float]:
    """Vidur's per-request means from its request_metrics.csv (in the one time-stamped folder it
    made under ``out``): TTFT = prefill_e2e_time (arrival to the end of the prefill, which yields
    the first token), E2E = request_e2e_time, TBT =
    decode_time_execution_plus_preemption_normalized (end minus first token, over all the
    request's decode tokens, the first one included); the makespan from its log."""
    import pandas as pd

    (csv_path,) = out.glob("*/request_metrics.csv")
    m = pd.read_csv(csv_path)
    ended = re.findall(r"Simulation ended at: ([0-9.e+-]+)s", log.read_text())
    return _means(
        m["prefill_e2e_time"],
        m["request_e2e_time"],
        m["decode_time_execution_plus_preemption_normalized"],
        float(ended[-1]) if ended else math.nan,
    )


def _means(ttft: Any, e2e: Any, tbt: Any, makespan: float) -> dict[str, float]:
    return {
        "requests": float(len(ttft)),
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p50_s": float(ttft.median()),
        "ttft_p99_s": float(ttft.quantile(0.99)),
        "e2e_mean_s": float(e2e.mean()),
        "e2e_p50_s": float(e2e.median()),
        "tbt_mean_s": float(tbt.mean()),
        "makespan_s": makespan,
    }


def _mmm(xs: Sequence[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur-python", required=True, help="a Python with vidur==0.0.26")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--repeats", type=int, default=3, help="warm runs of each (default 3)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/vidur_side_by_side"))
    ap.add_argument(
        "--full-grid",
        action="store_true",
        help="Vidur's default grid search for its predictors (the cold run takes far longer)",
    )
    ap.add_argument(
        "--kvsim-chunked",
        action="store_true",
        help="one more kvsim run with engine.chunked_prefill, for the metrics table",
    )
    args = ap.parse_args(argv)
    from experiments.shared_data import shared_data_dir

    shared = shared_data_dir()
    config = yaml.safe_load(args.config.read_text())
    engine = config["engine"]
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    rows = trace_rows(config)
    trace = work / "trace.csv"
    write_vidur_trace(rows, trace)
    max_tokens = vidur_max_tokens(rows, engine["max_batch_tokens"])
    attention = work / "attention.csv"
    n_att = write_attention_profile(shared, attention)
    print(
        f"trace: {len(rows)} requests, {sum(r.num_prefill_tokens for r in rows)} prompt and "
        f"{sum(r.num_decode_tokens for r in rows)} reply tokens, arrivals over "
        f"{rows[-1].arrived_at:.0f} s; Vidur max_tokens {max_tokens}; attention profile "
        f"{n_att} transcribed rows"
    )

    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    cache = work / "vidur_cache"
    grid = () if args.full_grid else None
    profiles = (
        shared / MLP_PROFILE,
        attention,
        shared / "vidur/profiling/network/a100_dgx/all_reduce.csv",
        shared / "vidur/profiling/network/a100_pairwise_nvlink/send_recv.csv",
    )
    if cache.exists():
        shutil.rmtree(cache)  # the cold run starts with no predictors

    def vidur(tag: str) -> tuple[Timed, Path]:
        out = work / f"vidur_out_{tag}"
        out.mkdir(exist_ok=True)
        for old in out.glob("*/request_metrics.csv"):  # one run's folder only
            old.unlink()
        cmd = [
            args.vidur_python,
            *vidur_args(trace, profiles, out, cache, engine, max_tokens, grid),
        ]
        return run_timed(cmd, work, env, work / f"vidur_{tag}.log"), out

    def kvsim(tag: str, cfg: Path) -> tuple[Timed, Path]:
        out = work / f"kvsim_out_{tag}"
        cmd = [sys.executable, "-m", "experiments.cli", "run", str(cfg), "--force"]
        cmd += ["--out", str(out), "--quiet"]
        return run_timed(cmd, ROOT, env, work / f"kvsim_{tag}.log"), out

    cold, vidur_out = vidur("cold")
    print(f"Vidur cold (trains and caches its predictors): wall {cold.wall_s:.2f} s, "
          f"CPU {cold.cpu_s:.2f} s", flush=True)  # fmt: skip
    k_runs: list[Timed] = []
    v_runs: list[Timed] = []
    for i in range(args.repeats):
        k, kvsim_out = kvsim("warm", args.config.resolve())
        v, vidur_out = vidur("warm")
        k_runs.append(k)
        v_runs.append(v)
        print(
            f"pair {i + 1}: kvsim wall {k.wall_s:.2f} s CPU {k.cpu_s:.2f} s; "
            f"Vidur wall {v.wall_s:.2f} s CPU {v.cpu_s:.2f} s",
            flush=True,
        )
    print(f"\nwhole process, {args.repeats} runs each, min / median / max:")
    print(
        f"  kvsim wall s {_mmm([r.wall_s for r in k_runs])}, CPU s {_mmm([r.cpu_s for r in k_runs])}"
    )
    print(
        f"  Vidur wall s {_mmm([r.wall_s for r in v_runs])}, CPU s {_mmm([r.cpu_s for r in v_runs])}"
    )
    print(
        f"  Vidur / kvsim pair by pair: wall "
        f"{_mmm([v.wall_s / k.wall_s for k, v in zip(k_runs, v_runs)])}, CPU "
        f"{_mmm([v.cpu_s / k.cpu_s for k, v in zip(k_runs, v_runs)])}"
    )  # fmt: skip
    print(f"  Vidur cold run: wall {cold.wall_s:.2f} s, CPU {cold.cpu_s:.2f} s")

    columns = {"kvsim": kvsim_means(kvsim_out)}
    if args.kvsim_chunked:
        chunked = {**config, "engine": {**engine, "chunked_prefill": True}}
        cfg = work / "single_turn_chunked.yaml"
        cfg.write_text(yaml.safe_dump(chunked, sort_keys=False))
        _, out = kvsim("chunked", cfg)
        columns["kvsim chunked"] = kvsim_means(out)
    columns["Vidur"] = vidur_means(vidur_out, work / "vidur_warm.log")
    names = list(columns)
    print("\nsimulated, per request:")
    print(f"  {'':14s}" + "".join(f"{n:>15s}" for n in names))
    for key in columns["kvsim"]:
        print(f"  {key:14s}" + "".join(f"{columns[n][key]:15.4f}" for n in names))


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
