"""The engines' figure: where history came from in each engine, side by side."""

from __future__ import annotations

import pandas as pd

from experiments.design_plots import engine_figure


def _summary(engines: list[str]) -> pd.DataFrame:
    rows = []
    for engine in engines:
        for cpu in (0.0, 8.0):
            for gpu in (1.0, 4.0, float("inf")):
                c = 0.5 if cpu else 0.0
                rows.append(
                    dict(
                        engine=engine,
                        policy="lru",
                        cpu_kv_gb=cpu,
                        gpu_kv_gb=gpu,
                        gpu_hit_rate=0.2,
                        cpu_hit_rate=c,
                        reprefill_rate=0.8 - c,
                    )
                )
    return pd.DataFrame(rows)


def test_two_engines_get_one_panel_per_cpu_tier(tmp_path):
    path = engine_figure(_summary(["kvsim", "vllm-v1"]), tmp_path / "tiers.png")
    assert path is not None and path.stat().st_size > 10_000


def test_one_engine_draws_nothing(tmp_path):
    assert engine_figure(_summary(["kvsim"]), tmp_path / "tiers.png") is None
    assert not (tmp_path / "tiers.png").exists()
