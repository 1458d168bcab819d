"""`kvsim search --axis cpu_kv_gb | rate`: the smallest CPU tier and the highest request rate
meeting an SLO attainment target, each on a trace whose answer is known by construction.

CPU tier. Every session holds 64 pages of KV (Llama-3-8B, 16-token pages of 2 MiB: 1012 + 4 tokens
after its first turn, 1024 after its second), and the GPU holds 64 pages: one session. The trace is
six phases, each a target session's first turn, then d fresh one-turn filler sessions, then the
target's second turn (d = 3, 1, 5, 2, 6, 4; everything 100 s apart, so nothing overlaps). Each new
turn pushes the GPU's session to the CPU tier (LRU, whole sessions), so when the target returns the
CPU has received the target and d - 1 fillers after it: it still holds the target iff it holds d
sessions, floor(C / 64) >= d for a tier of C pages. The TTFT bound (20 ms) is met by a second turn
served from the CPU tier (about 14 ms: 1016 tokens copied in, 8 prefilled) and missed by every
first turn and every recomputed second turn (about 27 ms: 1016 tokens prefilled). So of the 33
turns, min(floor(C / 64), 6) meet the SLO: the smallest tier for h of them is 64 h pages.

Rate. Ten one-turn sessions of 8 pages (64 + 64 tokens) and a GPU of 8 pages: a turn waits until
the one before completes. E is one turn's end-to-end time alone (measured: the cost model's), and
the gaps between arrivals are (m + 1/3) E for m = 9, 8, ..., 1: shrinking, so a turn made to wait
delays only turns that wait anyway. At time_scale s the gap (m + 1/3) E s is shorter than E (the
next turn waits, and misses a TTFT bound 1 % above the turn's TTFT alone) iff (m + 1/3) s < 1, so
attainment = 1 - #{m in 1..9: (m + 1/3) s < 1} / 10. For 0.7: three gaps may be short, those of
m = 1, 2, 3, and not m = 4: 1/s < 4 1/3, the highest multiplier of three digits 4.33.
"""

from __future__ import annotations

import json

import pytest

from experiments.cli import main
from experiments.executor import run_points
from experiments.schema import ConfigError, ExecutorSpec, load_experiment
from experiments.search import rate_of, rate_step, search, search_point, time_scale_of

SESSION_PAGES = 64
PHASES = (3, 1, 5, 2, 6, 4)  # fillers between a target's two turns
TURNS = 2 * len(PHASES) + sum(PHASES)  # 33

CPU_YAML = """
name: cpu
trace: {kind: jsonl, path: phases.jsonl}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.125, cpu_kv_gb: 1, block_tokens: 16, evict_unit: session}
policies: [lru]
slo: {ttft_s: 0.02, tpot_s: null}
"""


def _write(path, lines) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def cpu_file(tmp_path):
    lines, t, n = [], 0.0, 0
    for j, d in enumerate(PHASES):
        t += 100
        lines.append(dict(session_id=f"t{j}", turn=0, arrival_s=t, prompt_tokens=1012))
        for _ in range(d):
            t, n = t + 100, n + 1
            lines.append(dict(session_id=f"f{n:02d}", turn=0, arrival_s=t, prompt_tokens=1012))
        t += 100
        lines.append(dict(session_id=f"t{j}", turn=1, arrival_s=t, prompt_tokens=4))
    lines.sort(key=lambda x: (x["session_id"], x["turn"]))
    _write(tmp_path / "phases.jsonl", [{**x, "output_tokens": 4} for x in lines])
    path = tmp_path / "cpu.yaml"
    path.write_text(CPU_YAML.lstrip())
    return path


def cpu_attainment(pages: int) -> float:
    return min(pages // SESSION_PAGES, len(PHASES)) / TURNS


@pytest.mark.parametrize(
    "hits,walk",
    [
        # hi (512 pages: the experiment's 1 GiB) first, then lo (0: no CPU tier), then midpoints
        (4, [512, 0, 256, 128, 192, 224, 240, 248, 252, 254, 255]),
        (6, [512, 0, 256, 384, 320, 352, 368, 376, 380, 382, 383]),
        (1, [512, 0, 256, 128, 64, 32, 48, 56, 60, 62, 63]),
    ],
)
def test_cpu_bisection_finds_the_hand_answer(cpu_file, hits, walk):
    exp = load_experiment(cpu_file)
    result = search(exp, target=(hits - 0.5) / TURNS, axis="cpu_kv_gb")
    assert [p.pages for p in result.probes] == walk
    for p in result.probes:  # every probe as computed by hand
        assert p.slo_attainment == pytest.approx(cpu_attainment(p.pages))
        assert p.turns == TURNS and p.rejected_turns == 0
        assert p.value == p.pages / 512 and p.axis == "cpu_kv_gb"
    assert result.answer is not None and result.answer.pages == SESSION_PAGES * hits
    assert result.point.memory.gpu_kv_gb == 0.125  # the GPU KV stays the experiment's


def test_the_cpu_command_prints_the_curve_and_the_answer(cpu_file, capsys):
    target = f"{3.5 / TURNS:.6f}"
    argv = ["search", str(cpu_file), "--axis", "cpu_kv_gb", "--target", target, "--hi", "0.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "probe: cpu_kv_gb 0.5 GiB (256 pages): slo_attainment 0.1212 meets" in out
    assert "bisecting memory.cpu_kv_gb in pages of 2 MiB (memory.gpu_kv_gb 0.125):" in out
    assert (
        "smallest memory.cpu_kv_gb meeting it: 0.5 GiB (256 pages; 255 pages miss), "
        "slo_attainment 0.1212" in out
    )
    rows = [r for r in (line.split() for line in out.splitlines()) if r and r[0].isdigit()]
    assert [int(r[2]) for r in rows] == sorted(int(r[2]) for r in rows)  # by capacity


def test_no_cpu_tier_needed_and_a_tier_too_small(cpu_file, capsys):
    exp = load_experiment(cpu_file)
    loose = exp.model_copy(update={"slo": exp.slo.model_copy(update={"ttft_s": None})})
    result = search(loose, target=1.0, axis="cpu_kv_gb")
    assert [p.pages for p in result.probes] == [512, 0]
    assert result.answer is not None and result.answer.pages == 0
    from experiments.search import describe

    assert "0 GiB (0 pages: no CPU tier needed)" in describe(result)
    argv = ["search", str(cpu_file), "--axis", "cpu_kv_gb", "--target", "0.5"]
    assert main(argv) == 1  # 6 of 33 at most
    assert "not met: 0.1818 at the largest CPU tier, 1 GiB" in capsys.readouterr().out


RATE_YAML = """
name: rate
trace: {kind: jsonl, path: %s}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.015625, cpu_kv_gb: 0, block_tokens: 16}
policies: [lru]
slo: {ttft_s: %r, tpot_s: null}
"""


def _one_turn(tmp_path, name, arrivals, ttft_s=None):
    lines = [
        dict(session_id=f"s{i}", turn=0, arrival_s=a, prompt_tokens=64, output_tokens=64)
        for i, a in enumerate(arrivals)
    ]
    _write(tmp_path / f"{name}.jsonl", lines)
    path = tmp_path / f"{name}.yaml"
    path.write_text((RATE_YAML % (f"{name}.jsonl", ttft_s)).lstrip().replace("None", "null"))
    return path


@pytest.fixture
def rate_file(tmp_path):
    """The rate trace, its arrival gaps in units of one turn's time alone (measured here)."""
    solo = load_experiment(_one_turn(tmp_path, "solo", [1.0]))
    (alone,) = run_points([search_point(solo)], ExecutorSpec(), show_progress=False)
    turn = alone.turns.iloc[0]
    e2e, ttft = float(turn.finish_s - turn.arrival_s), float(turn.ttft_s)
    arrivals = [1.0]
    for m in range(9, 0, -1):
        arrivals.append(arrivals[-1] + (m + 1 / 3) * e2e)
    return _one_turn(tmp_path, "rate", arrivals, ttft_s=ttft * 1.01)


def rate_attainment(time_scale: float) -> float:
    return 1 - sum((m + 1 / 3) * time_scale < 1 for m in range(1, 10)) / 10


def test_the_rate_grid():
    assert [rate_of(s) for s in (-901, -900, -1, 0, 1, 333, 899, 900, 1801)] == [
        0.0999,
        0.1,
        0.999,
        1.0,
        1.01,
        4.33,
        9.99,
        10.0,
        101.0,
    ]
    for x in (0.1, 0.999, 1.0, 4.33, 10.0, 123.0):  # on the grid: both ways give it
        assert rate_of(rate_step(x, up=True)) == x == rate_of(rate_step(x, up=False))
    assert rate_of(rate_step(13 / 3, up=False)) == 4.33
    assert rate_of(rate_step(13 / 3, up=True)) == 4.34
    assert rate_of(rate_step(9.9999, up=True)) == 10.0
    assert time_scale_of(4.33) == 0.230947 and time_scale_of(0.1) == 10.0


@pytest.mark.parametrize(
    "target,answer",
    [
        (0.7, 4.33),  # m = 1, 2, 3 short: 1/s < 4 1/3
        (0.95, 1.33),  # none short
        (0.35, 7.33),  # m = 1..6 short, 7 not
    ],
)
def test_rate_bisection_finds_the_hand_answer(rate_file, target, answer):
    exp = load_experiment(rate_file)
    result = search(exp, target=target, axis="rate")
    assert result.probes[0].value == 0.1 and result.probes[1].value == 10  # a tenth, ten times
    for p in result.probes:  # every probe as computed by hand
        assert p.time_scale == time_scale_of(p.value)
        assert p.slo_attainment == pytest.approx(rate_attainment(p.time_scale))
        assert p.turns == 10 and p.rejected_turns == 0
    assert result.answer is not None and result.answer.value == answer
    probed = {p.value: p.meets for p in result.probes}
    assert probed[answer] and not probed[round(answer + 0.01, 2)]  # exact to the grid's step
    again = search(exp, target=target, axis="rate")  # a rerun makes the same probes
    assert again.probes == result.probes


def test_the_rate_command_prints_the_answer_as_a_multiplier_and_a_time_scale(rate_file, capsys):
    assert main(["search", str(rate_file), "--axis", "rate", "--target", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "probe: 4.33x the trace's rate (time_scale 0.230947): slo_attainment 0.7000 meets" in out
    assert "on multipliers of 3 significant digits" in out
    assert (
        "highest request rate meeting it: 4.33x the trace's rate (4.34x misses), "
        "slo_attainment 0.7000; in the YAML: trace.time_scale: 0.230947" in out
    )


def test_rate_limits_the_range_and_its_ends(rate_file, capsys):
    exp = load_experiment(rate_file)
    result = search(exp, target=0.7, axis="rate", lo=1, hi=3)  # 3x still meets
    assert [p.value for p in result.probes] == [1, 3]
    assert result.answer is not None and result.answer.value == 3
    rc = main(["search", str(rate_file), "--axis", "rate", "--target", "0.7", "--lo", "6"])
    assert rc == 1  # 6x: five short gaps
    assert "not met: 0.5000 at the lowest rate, 6x the trace's" in capsys.readouterr().out
    text = rate_file.read_text().replace("path: rate.jsonl", "path: rate.jsonl, time_scale: [2, 4]")
    rate_file.write_text(text)  # a rate sweep: its rates are the default ends
    result = search(load_experiment(rate_file), target=0.7, axis="rate")
    assert [p.value for p in result.probes][:2] == [0.25, 0.5]


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--axis", "rate", "--lo", "0"], "argument --lo: a request-rate multiplier > 0"),
        (["--axis", "rate", "--hi", "-2"], "argument --hi: a request-rate multiplier > 0"),
        (["--axis", "rate", "--hi", "fast"], "expected a request-rate multiplier"),
        (["--axis", "cpu_kv_gb", "--lo", "-1"], "argument --lo: a CPU KV size >= 0 in GiB"),
        (["--axis", "cpu_kv_gb", "--hi", "0"], "argument --hi: a CPU KV size > 0 in GiB"),
        (["--axis", "memory"], "argument --axis: invalid choice: 'memory'"),
    ],
)
def test_bad_bounds_are_input_errors(cpu_file, capsys, argv, words):
    with pytest.raises(SystemExit) as info:
        main(["search", str(cpu_file), "--target", "0.5", *argv])
    assert info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--axis", "rate", "--lo", "5", "--hi", "2"], "--lo (5x the trace's rate) is above --hi"),
        (["--axis", "rate", "--lo", "1.001", "--hi", "1.009"], "hold no multiplier of 3"),
        (["--axis", "cpu_kv_gb", "--lo", "0.5", "--hi", "0.25"], "--lo (0.5 GiB) is above --hi"),
    ],
)
def test_empty_ranges_are_input_errors(cpu_file, capsys, argv, words):
    assert main(["search", str(cpu_file), "--target", "0.5", *argv]) == 2
    assert words in capsys.readouterr().err


def test_a_tier_of_0_needs_hi_and_other_axes_must_have_one_value(cpu_file, capsys):
    cpu_file.write_text(cpu_file.read_text().replace("cpu_kv_gb: 1", "cpu_kv_gb: 0"))
    assert main(["search", str(cpu_file), "--axis", "cpu_kv_gb"]) == 2
    assert "memory.cpu_kv_gb is 0 (no CPU tier): give --hi in GiB" in capsys.readouterr().err
    cpu_file.write_text(cpu_file.read_text().replace("gpu_kv_gb: 0.125", "gpu_kv_gb: [0.125, 1]"))
    exp = load_experiment(cpu_file)
    with pytest.raises(ConfigError, match=r"varies memory.cpu_kv_gb alone, but gpu_kv_gb has"):
        search(exp, target=0.5, axis="cpu_kv_gb", hi=1)
    with pytest.raises(ConfigError, match=r"varies trace.time_scale alone, but gpu_kv_gb has"):
        search(exp, target=0.5, axis="rate")
    assert main(["search", str(cpu_file), "--axis", "rate"]) == 2
    assert "but gpu_kv_gb has several values" in capsys.readouterr().err
