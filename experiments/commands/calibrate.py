"""`kvsim calibrate`: measure a device and fit a profile, fit the public GPU tables, or replay
simulated batch shapes as real forwards.

    kvsim calibrate --device cuda --model llama-3-8b --out costmodels/profiles/my-h100.yaml
    kvsim calibrate --device cpu --model llama-3-8b --out /tmp/cpu.yaml --quick
    kvsim calibrate fit                                    # table of held-out MAPE per term and source
    kvsim calibrate fit --write-profiles costmodels/profiles --force
    kvsim calibrate forward --device cuda --profile my-h100.yaml --model llama-3-8b
    kvsim calibrate gpu-run          # on a GPU: measure 8B and 70B TP shards, forward, pytest -m gpu
"""

from __future__ import annotations

import argparse
from pathlib import Path

ACTIONS = ("measure", "fit", "forward", "gpu-run")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate",
        help="measure a GPU (or CPU) and fit a cost-model profile; fit the public tables",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Actions:\n"
        "  measure (default)  time one layer of --model on --device over a grid of shapes,\n"
        "                     fit the cost model, validate on held-out shapes, write --out\n"
        "  fit                fit the same model to the public GPU tables in ../shared/data\n"
        "                     and print the held-out MAPE per term and source, then every\n"
        "                     term of every committed profile against its threshold\n"
        "  forward            simulate a synthetic trace, replay 50+ of its batch shapes as\n"
        "                     real one-layer forwards and compare with --profile\n"
        "  gpu-run            measure (Llama-3-8B; Llama-3-70B per-GPU shards at TP 4 and 8),\n"
        "                     forward against each profile, pytest -m gpu: every file and a\n"
        "                     README into --out DIR (calibration/measured/<gpu>-<date>)\n"
        "torch is needed for measure, forward and gpu-run (pip install torch==2.13.0 first).",
    )
    p.add_argument("action", nargs="?", default="measure", choices=ACTIONS, help="default: measure")
    m = p.add_argument_group("measure / forward")
    m.add_argument("--device", help="cpu, cuda or cuda:N")
    m.add_argument(
        "--model", default="llama-3-8b", help="model name or spec YAML (default llama-3-8b)"
    )
    m.add_argument(
        "--out",
        metavar="PATH",
        help="measure: the profile YAML to write; gpu-run: the output folder "
        "(default calibration/measured/<gpu>-<date>)",
    )
    m.add_argument(
        "--tp",
        type=int,
        default=1,
        help="one layer of the model's per-GPU shard at this tensor parallelism (default 1)",
    )
    m.add_argument(
        "--quick", action="store_true", help="small grid and short timing (seconds on a CPU)"
    )
    m.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        help="element type (default: bf16 on CUDA, fp32 on a CPU, where bf16 GEMMs are slow)",
    )
    m.add_argument("--name", help="profile name (default: the file stem of --out)")
    m.add_argument(
        "--raw",
        metavar="CSV",
        help="append every measured shape to this CSV as it finishes; when the file exists, "
        "resume: skip the shapes already in it",
    )
    m.add_argument(
        "--fresh", action="store_true", help="start --raw over instead of resuming from it"
    )
    m.add_argument(
        "--budget-s",
        type=float,
        metavar="S",
        help="thin the grid, in a fixed order, until its estimated duration fits S seconds "
        "(calibration/README.md); gpu-run: the budget of each TP-sharded sweep (default 400, "
        "0 = none)",
    )
    m.add_argument(
        "--validation",
        metavar="CSV",
        help="measure: write the held-out table to this CSV and beside it as Markdown (.md)",
    )
    m.add_argument(
        "--attention",
        default="auto",
        choices=("auto", "sdpa", "flashinfer"),
        help="attention backend (auto: FlashInfer when installed on CUDA, else torch SDPA)",
    )
    m.add_argument(
        "--decode-impl",
        default="sdpa",
        choices=("sdpa", "gather"),
        help="torch decode: SDPA over per-sequence KV, or a gather from a paged cache",
    )
    m.add_argument(
        "--kv-layout", default="NHD", choices=("NHD", "HND"), help="FlashInfer paged layout"
    )
    m.add_argument("--page-size", type=int, default=16, help="KV page size in tokens (default 16)")
    m.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="GPU: time eager launches instead of CUDA-graph replays (see calibration/timing.py)",
    )
    m.add_argument(
        "--threads", type=int, default=1, help="CPU: torch threads (default 1, see README)"
    )
    m.add_argument(
        "--cpu-flush-mb",
        type=int,
        default=64,
        metavar="MB",
        help="CPU: rewrite an MB-sized buffer before every repetition, the stand-in for the GPU's "
        "L2 flush (default 64: 2x a 32 MB L3; 0 = off)",
    )
    m.add_argument("--profile", help="forward: the profile to check")
    m.add_argument("--shapes", type=int, default=60, help="forward: shapes to replay (default 60)")
    m.add_argument(
        "--sessions", type=int, default=40, help="forward: synthetic sessions to simulate"
    )
    m.add_argument("--gpu-kv-gb", type=float, default=2.0, help="forward: simulated GPU KV GiB")
    m.add_argument("--max-tokens", type=int, default=8192, help="forward: largest batch replayed")
    m.add_argument(
        "--report", metavar="MD", help="forward: also write the error table (Markdown) here"
    )
    m.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL[@tpK]",
        help="gpu-run: what to calibrate (default llama-3-8b llama-3-70b@tp4 llama-3-70b@tp8)",
    )
    m.add_argument(
        "--points",
        metavar="CSV",
        help="forward: also write every replayed shape (measured, "
        "predicted and its terms) to this CSV",
    )
    f = p.add_argument_group("fit")
    f.add_argument("--data", metavar="DIR", help="public data folder (default ../shared/data)")
    f.add_argument(
        "--source", action="append", metavar="NAME", help="only this public source (repeatable)"
    )
    f.add_argument(
        "--write-profiles", metavar="DIR", help="write the fitted public profiles into DIR"
    )
    f.add_argument(
        "--no-profiles",
        dest="profiles",
        action="store_false",
        help="fit: skip the table of every committed profile's terms (held-out MAPE per split, "
        "max APE, threshold, PASS or over), recomputed from the public tables and the measured "
        "samples",
    )
    f.add_argument(
        "--plots",
        metavar="DIR",
        help="draw predicted against measured for every held-out split that misses its target",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the shape order and the random split"
    )
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ValueError(
            "this action needs torch: pip install torch==2.13.0 (CPU build), then "
            "pip install -e '.[calibration]'"
        ) from None


def _check_out(path: str | None, force: bool, what: str) -> Path:
    if not path:
        raise ValueError(f"{what} needs --out PROFILE.yaml")
    out = Path(path)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists (use --force to overwrite)")
    return out


def main(args: argparse.Namespace) -> int:
    if args.action == "fit":
        return _fit(args)
    if args.action == "gpu-run":
        _need_torch()
        from ._calibrate_gpu_run import gpu_run

        return gpu_run(args)
    if not args.device:
        raise ValueError(f"calibrate {args.action} needs --device cpu|cuda")
    _need_torch()
    return _measure(args) if args.action == "measure" else _forward(args)


def _measure(args: argparse.Namespace) -> int:
    import dataclasses

    from calibration.grids import full_grid, quick_grid
    from calibration.local import calibrate
    from calibration.measure import MeasureConfig, run_measurements
    from calibration.public_profiles import TARGETS
    from calibration.report_tables import validation_rows, write_validation_tables
    from calibration.timing import TimingConfig
    from calibration.validate import format_table
    from costmodels import get_model, save_profile

    out = _check_out(args.out, args.force, "calibrate measure")
    model = get_model(args.model)
    dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    grid = dataclasses.replace(
        quick_grid() if args.quick else full_grid(), page_size=args.page_size
    )
    cfg = MeasureConfig(
        device=args.device,
        model=model,
        dtype=dtype,
        grid=grid,
        timing=dataclasses.replace(
            TimingConfig.quick() if args.quick else TimingConfig(),
            cpu_flush_bytes=args.cpu_flush_mb << 20,
            cuda_graph=args.cuda_graphs,
        ),
        seed=args.seed,
        attention=args.attention,
        decode_impl=args.decode_impl,
        kv_layout=args.kv_layout,
        cpu_threads=args.threads,
        tp=args.tp,
        raw=Path(args.raw) if args.raw else None,
        fresh=args.fresh,
        budget_s=args.budget_s,
    )
    shard = f" TP{args.tp} shard" if args.tp > 1 else ""
    print(f"calibrating {model.name}{shard} ({dtype}) on {args.device}, {grid.name} grid")
    if not args.raw and not args.quick:
        print("  no --raw: an interrupted sweep keeps nothing and cannot be resumed")
    meas = run_measurements(cfg, log=lambda s: print("  " + s))
    print(f"measured {len(meas.samples)} samples in {meas.wall_s:.1f} s on {meas.env.device_name}")
    for s in meas.skipped:
        print(f"  skipped: {s}")
    cmd = (
        f"kvsim calibrate --device {args.device} --model {args.model} --dtype {dtype}"
        + (f" --tp {args.tp}" if args.tp > 1 else "")
        + (" --quick" if args.quick else "")
        + (f" --budget-s {args.budget_s:g}" if args.budget_s is not None else "")
        + f" --attention {args.attention} --seed {args.seed}"
    )
    resumed = f", {meas.resumed} shapes from an earlier run's raw file" if meas.resumed else ""
    res = calibrate(
        meas,
        args.name or out.stem,
        seed=args.seed,
        source=f"fit: {cmd} ({meas.grid} grid, {len(meas.samples)} samples, "
        f"{meas.wall_s:.0f} s{resumed})",
    )
    # The calibration targets are for GPU kernels; a CPU run shows its errors without verdicts.
    print(format_table(res.reports, TARGETS if args.device != "cpu" else None))
    for line in (res.profile.meta.notes or "").splitlines():
        if line.startswith("pensieve "):
            print(line)
    save_profile(res.profile, out)
    if args.raw:
        print(f"raw samples: {args.raw}")
    if args.validation:
        rows = validation_rows(res.reports, res.profile, TARGETS, verdicts=args.device != "cpu")
        for path in write_validation_tables(rows, args.validation):
            print(f"validation table: {path}")
    print(f"profile: {out}")
    return 0


def _constant_text(value) -> str:
    """A profile constant for the console: numbers to 4 digits, the GEMM tiles as they are."""
    return str(value) if isinstance(value, tuple) else f"{value:.4g}"


def _fit(args: argparse.Namespace) -> int:
    from calibration.public_profiles import TARGETS, fit_public
    from calibration.public_tables import available, default_data_dir
    from calibration.validate import format_table
    from costmodels import save_profile

    data = Path(args.data) if args.data else default_data_dir()
    if not data.is_dir():
        raise ValueError(
            f"{data}: public data folder not found (expected ../shared/data beside the checkout)"
        )
    if not args.source and not available(data):
        raise ValueError(
            f"{data}: some public tables are missing; name the ones present with --source"
        )
    res = fit_public(data, seed=args.seed, sources=args.source)
    print(format_table(res.reports(), TARGETS))
    if args.plots:
        from calibration.miss_plots import write_miss_plots

        # The transfer checks of a profile's LM head and whole layer are held to 5 % as well.
        targets = {**TARGETS, "lm_head": 0.05, "layer": 0.05}
        drawn = write_miss_plots(res.reports(), targets, args.plots)
        print(f"\n{len(drawn)} plots of the misses (predicted against measured) in {args.plots}")
    if args.profiles:
        from calibration.profile_check import check_profiles, format_checks

        print(
            "\nevery fitted term of every committed profile, recomputed (public tables; "
            "calibration/measured/ samples):"
        )
        print(format_checks(check_profiles(res)))
    for p in res.profiles:
        print(f"\nprofile {p.name} ({p.meta.gpu}):")
        for term in ("linear", "prefill_attn", "decode_attn"):
            obj = getattr(p, term)
            print(
                f"  {term}: "
                + ", ".join(
                    f"{k}={_constant_text(getattr(obj, k))}" for k in obj.__dataclass_fields__
                )
            )
        for line in (p.meta.notes or "").splitlines():
            if line.startswith("pensieve "):
                print("  " + line)
    if args.write_profiles:
        d = Path(args.write_profiles)
        d.mkdir(parents=True, exist_ok=True)
        for p in res.profiles:
            path = d / f"{p.name}.yaml"
            if path.exists() and not args.force:
                raise FileExistsError(f"{path} exists (use --force to overwrite)")
            save_profile(p, path)
            print(f"wrote {path}")
    return 0


def _forward(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from calibration.env import flashinfer_version
    from calibration.measure_attention import AttentionBackend
    from calibration.report_tables import forward_markdown, forward_rows
    from calibration.sweep_plan import tp_shard
    from calibration.timing import TimingConfig, make_timer
    from calibration.validate_forward import (
        RecordingCostModel,
        format_report,
        replay,
        write_points_csv,
    )
    from costmodels import get_model, load_profile
    from sim import EngineConfig, MemoryConfig, simulate
    from traces import SyntheticConfig, generate_synthetic

    if not args.profile:
        raise ValueError("calibrate forward needs --profile")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available")
    if args.device == "cpu":
        torch.set_num_threads(max(1, args.threads))
    model = get_model(args.model)
    profile = load_profile(args.profile)
    dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    measured_model = dataclasses.replace(
        tp_shard(model, args.tp), dtype_bytes={"fp32": 4}.get(dtype, 2)
    )
    rec = RecordingCostModel(measured_model, profile)
    trace = generate_synthetic(
        SyntheticConfig(sessions=args.sessions, seed=args.seed, max_context_tokens=args.max_tokens)
    )
    simulate(
        trace.sessions,
        rec,
        MemoryConfig(gpu_kv_gb=args.gpu_kv_gb),
        EngineConfig(max_batch_tokens=args.max_tokens),
        seed=args.seed,
    )
    print(f"simulated {trace.n_turns} turns: {len(rec.shapes)} priced batch shapes")
    use_fi = args.device != "cpu" and args.attention != "sdpa" and flashinfer_version() is not None
    be = AttentionBackend(
        "flashinfer" if use_fi else "sdpa",
        decode_impl=args.decode_impl,
        page_size=args.page_size,
        kv_layout=args.kv_layout,
    )
    timer = make_timer(
        args.device,
        dataclasses.replace(
            TimingConfig.quick() if args.quick else TimingConfig(),
            cpu_flush_bytes=args.cpu_flush_mb << 20,
            cuda_graph=args.cuda_graphs,
        ),
    )
    rep = replay(
        rec.shapes,
        measured_model,
        profile,
        args.device,
        dtype,
        timer,
        be,
        n=args.shapes,
        max_tokens=args.max_tokens,
        log=print,
    )
    print(format_report(rep))
    print(f"timing: {timer.describe()}")
    if timer.eager_fallbacks:  # GPU-only
        print(
            f"  CUDA graph capture failed for {len(timer.eager_fallbacks)} shapes, timed eagerly "
            f"(first: {timer.eager_fallbacks[0]})"
        )
    if args.points:
        write_points_csv(rep, profile, measured_model, args.points)
        print(f"replayed shapes: {args.points}")
    if args.report:
        Path(args.report).write_text(forward_markdown(forward_rows(rep.points)))
        print(f"forward table: {args.report}")
    return 0
