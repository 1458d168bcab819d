"""The per-op elementwise form (costmodels.elementwise): its kernels cover the layer's bytes, the
cost model prices it as written by hand, the defaults keep the layer form, profiles round-trip."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from costmodels import (
    CostModel,
    analytic_profile,
    get_hardware,
    get_model,
    load_profile,
    save_profile,
)
from costmodels.elementwise import ELEMENTWISE_KINDS, ElementwiseOp

H100 = get_hardware("h100")
OPS = tuple(
    ElementwiseOp(
        k, floor_s=2e-6, tau_s=1e-6, bw_Bps=2.5e12, spill_bw_Bps=8e12, row_bw_Bps=1e10, knee_p=p
    )
    for k, p in zip(ELEMENTWISE_KINDS, (2.0, 3.0, 4.0, 1.5), strict=True)
)


def _per_op_profile(ops=OPS):
    p = analytic_profile(H100)
    lin = dataclasses.replace(
        p.linear, elementwise_ops=ops, elementwise_sm_count=132, elementwise_l2_bytes=50_000_000
    )
    return dataclasses.replace(p, linear=lin)


@pytest.mark.parametrize("name", ["llama-3-8b", "llama-2-7b", "opt-13b", "llama-3-70b"])
def test_the_kernels_move_the_layers_elementwise_bytes(name) -> None:
    for tp in (1, 2, 8):
        m = get_model(name).shard(tp)
        ops = m.elementwise_ops
        assert sum(op.row_bytes for op in ops) == m.elementwise_bytes_per_token_layer
        assert {op.kind for op in ops} == set(ELEMENTWISE_KINDS)


def _by_hand(op: ElementwiseOp, n: int, row: int, threads: int) -> float:
    waves = math.ceil(n / (132 * (2048 // threads))) if threads else 1
    floor = waves * (op.floor_s + row / op.row_bw_Bps)
    moved = n * row
    stream = op.tau_s + moved / op.bw_Bps + max(moved - 25_000_000, 0) / op.spill_bw_Bps
    return (floor**op.knee_p + stream**op.knee_p) ** (1 / op.knee_p)


@pytest.mark.parametrize("n", [1, 264, 265, 3000, 20000])
def test_cost_model_prices_each_kernel_as_written(n) -> None:
    cm = CostModel(get_model("llama-3-8b"), _per_op_profile())
    kinds = {op.kind: op for op in OPS}
    h, kv, i = 4096, 8 * 128, 14336
    want = (
        2 * _by_hand(kinds["norm"], n, 4 * h, 1024)
        + _by_hand(kinds["rope"], n, 4 * (4096 + kv), 512)
        + _by_hand(kinds["act"], n, 6 * i, 1024)
        + 2 * _by_hand(kinds["add"], n, 6 * h, 0)
        + _by_hand(kinds["add"], n, 8 * kv, 0)
    )
    assert cm.elementwise_s(n) == pytest.approx(want, rel=1e-12)
    assert cm.elementwise_s(n) == cm.elementwise_s(n)  # the cached price is the first one
    assert cm.elementwise_s(0) == 0.0


def test_a_new_wave_of_ctas_costs_another_floor() -> None:
    # 264 one-CTA-per-token norms of 1024 threads fill the 132 SMs once; the 265th starts a wave.
    slow = tuple(dataclasses.replace(op, bw_Bps=3e12, tau_s=0.0, floor_s=50e-6) for op in OPS)
    cm = CostModel(get_model("llama-3-8b"), _per_op_profile(slow))
    step = cm.elementwise_s(265) - cm.elementwise_s(264)
    assert step > 100e-6 > cm.elementwise_s(264) - cm.elementwise_s(263)


def test_defaults_keep_the_layer_form_bit_for_bit() -> None:
    p = analytic_profile(H100)
    m = get_model("llama-3-8b")
    cm = CostModel(m, p)
    for n in (1, 7, 4096):
        assert cm.elementwise_s(n) == n * (
            m.elementwise_bytes_per_token_layer / p.linear.elementwise_bw_Bps
        )


def test_decode_paths_and_token_scoring_see_the_per_op_price() -> None:
    from costmodels import BatchShape

    cm = CostModel(get_model("llama-3-8b"), _per_op_profile())
    assert cm.decode_step_s(40, 40_000) == cm.iteration(BatchShape.decode(40, 40_000)).total_s
    assert cm.decode_pricer(40)(40_000) == cm.decode_step_s(40, 40_000)
    scored = cm.with_token_scoring(s_per_token_layer=1e-9, launch_s=0.0)
    assert scored.elementwise_s(40) == pytest.approx(cm.elementwise_s(40) + 40e-9, rel=1e-12)


def test_per_op_fields_round_trip_and_old_files_keep_their_layout(tmp_path) -> None:
    p = _per_op_profile()
    q = load_profile(str(save_profile(p, tmp_path / "e.yaml")))
    assert q == p and q.linear.elementwise_ops == OPS
    written = yaml.safe_load((tmp_path / "e.yaml").read_text())["linear"]
    assert written["elementwise_ops"][0]["kind"] == "norm"
    old = analytic_profile(H100).to_dict()["linear"]
    assert not {"elementwise_ops", "elementwise_sm_count", "elementwise_l2_bytes"} & set(old)


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda d: d["elementwise_ops"].pop(), "each kind once"),
        (lambda d: d["elementwise_ops"][0].update(knee_p=0.5), "knee_p must be >= 1"),
        (lambda d: d["elementwise_ops"][1].update(bw_Bps=0), "must be > 0"),
        (lambda d: d.update(elementwise_l2_bytes=0), "elementwise_l2_bytes >= 1"),
        (lambda d: d["elementwise_ops"][2].pop("row_bw_Bps"), "missing required key"),
    ],
)
def test_broken_per_op_fields_are_refused_naming_the_file(tmp_path, change, problem) -> None:
    d = _per_op_profile().to_dict()
    change(d["linear"])
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(ValueError) as exc:
        load_profile(str(path))
    assert str(path) in str(exc.value) and problem in str(exc.value), str(exc.value)


def test_readme_per_op_example_loads(tmp_path) -> None:
    import re

    from costmodels import profile as profile_mod

    readme = (profile_mod.PROFILES_DIR / "README.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme, re.S)]
    linear = next(b["linear"] for b in blocks if "elementwise_ops" in b.get("linear", {}))
    d = analytic_profile(H100).to_dict()
    d["linear"] = linear
    path = tmp_path / "per_op.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    lin = load_profile(str(path)).linear
    assert [op.kind for op in lin.elementwise_ops] == list(ELEMENTWISE_KINDS)
    assert lin.elementwise_sm_count == 132
