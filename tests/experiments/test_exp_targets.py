"""The experiment's targets: the ``targets:`` key of the YAML, the pass_* columns it yields, and
how the console table, config.resolved.yaml, the HTML report and the plots show them; offline
bounds (belady, cost-belady) are n/a, not FAIL (fake simulator)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml
from exp_fakes import TINY
from test_report_html import Page

from experiments import plots
from experiments.cli import main
from experiments.schema import ConfigError, load_experiment
from experiments.targets import DEFAULT_TARGETS, judge
from sim.metrics import JAIN_TARGET, REPREFILL_TARGET

PASSES = ["pass_evict_us", "pass_reprefill", "pass_jain", "pass_gpu_util"]


def _run(write_yaml, tmp_path, extra: str = "", policies: str = "[lru, fifo]"):
    """Run TINY (plus ``extra`` YAML) through `kvsim run`; (exit code, results folder)."""
    text = TINY.replace("policies: [lru, fifo]", f"policies: {policies}") + extra
    out = tmp_path / "out"
    rc = main(["run", str(write_yaml(text)), "--out", str(out)])
    return rc, out


def _report(out) -> Page:
    assert main(["report", str(out)]) == 0
    return Page((out / "report.html").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The YAML key


def test_a_threshold_set_in_the_yaml_is_the_one_judged(fake_backend, write_yaml, tmp_path, capsys):
    rc, out = _run(write_yaml, tmp_path, "targets: {jain: 0.975, reprefill: 0.4}\n")
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[-4:]) == PASSES  # the columns of summary.csv are kept
    assert (summary["pass_jain"] == (summary["jain_service"] >= 0.975)).all()
    assert (summary["pass_reprefill"] == (summary["reprefill_rate"] < 0.4)).all()
    # the fake's figures straddle the new thresholds and not only the defaults: the rule changed
    assert (summary["jain_service"] >= 0.975).any() and (summary["jain_service"] < 0.975).any()
    assert (
        (summary["reprefill_rate"] >= REPREFILL_TARGET) & (summary["reprefill_rate"] < 0.4)
    ).any()
    header = capsys.readouterr().out.splitlines()
    table_head = next(line for line in header if line.lstrip().startswith("policy"))
    assert "jain>=0.975" in table_head.split() and "reprefill<40%" in table_head.split()
    assert f"jain>={JAIN_TARGET:g}" not in table_head.split()
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text(encoding="utf-8"))
    assert resolved["targets"]["jain"] == 0.975 and resolved["targets"]["reprefill"] == 0.4


def test_resolved_config_names_every_target(write_yaml):
    exp = load_experiment(write_yaml(TINY + "targets: {gpu_util: null, evict_us: 250}\n"))
    targets = exp.resolved()["targets"]
    assert set(targets) == {"evict_us", "reprefill", "jain", "gpu_util", "throughput_impact"}
    assert targets["evict_us"] == 250 and targets["gpu_util"] is None
    assert targets["jain"] == JAIN_TARGET  # not written: the default, written out


@pytest.mark.slow
@pytest.mark.parametrize("off", ["none", "None", "null", "~"])
def test_targets_none_turns_judging_off(fake_backend, write_yaml, tmp_path, capsys, off):
    rc, out = _run(write_yaml, tmp_path, f"targets: {off}\n")
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    assert not [c for c in summary.columns if c.startswith("pass_")]
    printed = capsys.readouterr().out
    assert "FAIL" not in printed and " pass" not in printed
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text(encoding="utf-8"))
    assert "targets" in resolved and resolved["targets"] is None
    page = _report(out)
    assert "targets" not in page.tables  # nothing judged: no verdict table
    raw = (out / "report.html").read_text(encoding="utf-8")
    assert "Targets: none" in raw


def test_a_target_set_to_null_is_dropped(fake_backend, write_yaml, tmp_path):
    rc, out = _run(write_yaml, tmp_path, "targets: {gpu_util: null}\n")
    assert rc == 0
    cols = [c for c in pd.read_csv(out / "summary.csv").columns if c.startswith("pass_")]
    assert cols == ["pass_evict_us", "pass_reprefill", "pass_jain"]


@pytest.mark.parametrize(
    "targets, key, words",
    [
        ("{jian: 0.9}", "targets.jian", "unknown key (did you mean 'jain'?)"),
        ("{reprefill: 20}", "targets.reprefill", "must be <= 1"),
        ("{evict_us: 0}", "targets.evict_us", "must be > 0"),
        ("{jain: high}", "targets.jain", "expected a number"),
        ("maybe", "targets", "or none, got 'maybe'"),
    ],
)
def test_bad_targets_are_errors_naming_the_key(write_yaml, targets, key, words):
    path = write_yaml(TINY + f"targets: {targets}\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert f"{path}: {key}: " in str(info.value) and words in str(info.value)
    assert info.value.key == key


# ---------------------------------------------------------------------------------------------
# Offline bounds


@pytest.mark.slow
def test_an_offline_policy_is_not_judged(fake_backend, write_yaml, tmp_path, capsys):
    rc, out = _run(write_yaml, tmp_path, policies="[lru, belady, cost-belady]")
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    offline = summary["policy"].isin(["belady", "cost-belady"])
    assert offline.any() and (~offline).any()
    assert summary.loc[offline, PASSES].isna().all().all()  # empty cells: n/a
    assert summary.loc[~offline, PASSES].notna().all().all()
    assert (summary.loc[~offline, "pass_reprefill"].astype(bool) == False).any()  # noqa: E712
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.split()[:1] in (["belady"], ["cost-belady"])]
    assert len(rows) == int(offline.sum())
    assert all(r[-4:] == ["n/a"] * 4 for r in rows)
    lru = [line.split() for line in lines if line.split()[:1] == ["lru"]]
    assert lru and "FAIL" in {c for r in lru for c in r[-4:]}

    page = _report(out)
    header, *table = page.tables["targets"]
    by_policy = {r[0]: r for r in table}
    assert by_policy["belady"][2:] == ["n/a"] * (len(PASSES) + 1)
    assert by_policy["cost-belady"][-1] == "n/a"
    assert by_policy["lru"][-1] == "FAIL"
    s_header, *s_rows = page.tables["summary"]
    col, pol = s_header.index("pass_jain"), s_header.index("policy")
    assert {r[col] for r in s_rows if r[pol] == "belady"} == {"n/a"}


# ---------------------------------------------------------------------------------------------
# The report and the plots


def test_the_report_shows_the_experiments_thresholds(fake_backend, write_yaml, tmp_path):
    rc, out = _run(write_yaml, tmp_path, "targets: {jain: 0.99, evict_us: 250}\n")
    assert rc == 0
    page = _report(out)
    header = page.tables["targets"][0]
    assert "jain_service \u2265 0.99" in header and "evict_us_p50 < 250 us" in header
    assert f"jain_service \u2265 {JAIN_TARGET:g}" not in header
    raw = (out / "report.html").read_text(encoding="utf-8")
    rules = raw[raw.index('id="target-rules"') :].split("</p>")[0]
    assert "jain_service \u2265 0.99" in rules and "gpu_util \u2265 0.9" in rules


@pytest.mark.slow
def test_plots_draw_the_experiments_thresholds(fake_backend, write_yaml, tmp_path, monkeypatch):
    drawn: dict[str, object] = {}
    real = plots._line_plot

    def spy(df, facets, policies, metric, *args, **kwargs):
        drawn[metric] = kwargs.get("target")
        return real(df, facets, policies, metric, *args, **kwargs)

    monkeypatch.setattr(plots, "_line_plot", spy)
    rc, out = _run(write_yaml, tmp_path, "targets: {reprefill: 0.35, jain: null}\n")
    assert rc == 0
    target = drawn["reprefill_rate"]
    assert isinstance(target, tuple) and math.isclose(target[0], 0.35)
    assert drawn["jain_service"] is None
    # `kvsim plot` draws them again from the folder: the same thresholds, read from its config
    drawn.clear()
    assert main(["plot", str(out)]) == 0
    target = drawn["reprefill_rate"]
    assert isinstance(target, tuple) and math.isclose(target[0], 0.35)
    assert drawn["jain_service"] is None


def test_default_targets_at_their_boundaries():
    good = dict(
        evict_calls=5, evict_us_p50=99.0, reprefill_rate=0.19, jain_service=0.8, gpu_util=0.9
    )
    assert judge(good, DEFAULT_TARGETS) == dict(
        evict_us=True, reprefill=True, jain=True, gpu_util=True
    )
    bad = dict(
        evict_calls=5,
        evict_us_p50=100.0,
        reprefill_rate=0.2,
        jain_service=0.79,
        gpu_util=0.89,
        throughput_impact=0.05,
    )
    assert judge(bad, DEFAULT_TARGETS) == dict(
        evict_us=False, reprefill=False, jain=False, gpu_util=False, throughput_impact=False
    )
    assert judge(dict(good, throughput_impact=0.049), DEFAULT_TARGETS)["throughput_impact"] is True
    # No eviction call at all: nothing slow was decided. NaN metrics fail.
    assert (
        judge(dict(good, evict_calls=0, evict_us_p50=math.nan), DEFAULT_TARGETS)["evict_us"] is True
    )
    assert judge(dict(good, jain_service=math.nan), DEFAULT_TARGETS)["jain"] is False
