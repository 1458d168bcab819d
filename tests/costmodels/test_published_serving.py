"""`kvsim cost` against published serving measurements that no profile was fitted to.

Each case rebuilds the published setting (model, GPU, batch, input/output lengths, 16-bit weights)
through the function behind `kvsim cost` and compares within 15 %. One published number lands
outside; docs/cost-model.md ("Checked against published serving numbers") says why, and its test
pins the documented gap instead. That page's table is checked against the same computation, so it
cannot drift from the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from costmodels import BatchShape, cost_model
from experiments.cli import build_parser
from experiments.commands.cost import price

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "cost-model.md"
TOLERANCE = 0.15
_PARSER = build_parser()


def kvsim_cost(profile: str, model: str, **flags: object) -> dict:
    """What `kvsim cost --profile P --model M --flag-name V ... --json` prints, as a dict."""
    argv = ["cost", "--profile", profile, "--model", model]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return price(_PARSER.parse_args(argv))


@dataclass(frozen=True)
class Published:
    value: float
    unit: str
    source: str


# --- the published numbers ---------------------------------------------------------------------
GPT_FAST = (
    "pytorch-labs/gpt-fast README.md @ c9f683edd4f89d3e81ed8f52387e866a245e3226, 'Benchmarks' "
    "table: A100-80GB power-limited to 330 W, batch 1, 5-token prompt, generate.py defaults "
    "(200 new tokens, bf16, torch.compile reduce-overhead)"
)
TRTLLM = (
    "NVIDIA/TensorRT-LLM docs/source/performance.md, revision 'All data was generated using "
    "version 0.9.0' (tag v0.9.0), A100 GPUs (FP16) tables, TP 1, gptSessionBenchmark (static batch)"
)
VLLM_BLOG = (
    "blog.vllm.ai/2026/01/08/kv-offloading-connector.html (vllm-project/vllm-project.github.io "
    "_posts/2025-12-29-offloading-connector.md @ 9059fb96bec720a829dcee9dc088391967170321), "
    "'Evaluating GPU-CPU Transfer Techniques': H100, cudaMemcpyAsync (DMA), 1000 blocks"
)
PUBLISHED = {
    # (a) decode
    "a1": Published(93.89, "tok/s", f"{GPT_FAST}; row Llama-3.1-8B Base"),
    "a2": Published(
        1484, "tok/s", f"{TRTLLM}; Peak Throughput, LLaMA 7B, batch 32, 128 in, 2048 out"
    ),
    "a3": Published(3776, "tok/s", f"{TRTLLM}; Peak Throughput, Mistral 7B, batch 120, 128/2048"),
    # (b) time to first token of a 2048-token prompt
    "b1": Published(139.6, "ms", f"{TRTLLM}; Low Latency, Mistral 7B, batch 1, input 2048"),
    "b2": Published(132.4, "ms", f"{TRTLLM}; Low Latency, LLaMA 7B, batch 1, input 2048"),
    # (c) host<->device copies
    "c1": Published(83.4, "GB/s", f"{VLLM_BLOG}; bidirectional, 2 MB blocks: 'DMA achieves 83.4'"),
    "c2": Published(50.0, "GB/s", f"{VLLM_BLOG}; Fig. 4, CPU->GPU: 'up to about 50GB/s'"),
    "c3": Published(50.0, "GB/s", f"{VLLM_BLOG}; Fig. 3, GPU->CPU: 'up to about 50GB/s'"),
}
# The GPU each case ran on, as kvsim profiles it.
PROFILE = {"a": "a100-vidur", "b": "a100-vidur", "c": "h100-public"}


# --- the same settings in kvsim ----------------------------------------------------------------
def _generate_tok_s(model: str, batch: int, n_in: int, n_out: int) -> float:
    """Output tok/s of a static batch: one prefill of every prompt, then n_out - 1 decode steps.

    Decode step k (1..n_out-1) attends to n_in + k tokens per sequence; the cost is linear in the
    context, so the steps sum to (n_out - 1) steps at the mean context, n_in + n_out/2.
    """
    assert n_out % 2 == 0  # the mean context is then a whole number
    prof = PROFILE["a"]
    prefill = kvsim_cost(prof, model, prefill=n_in, prefill_seqs=batch)["total_s"]
    step = kvsim_cost(prof, model, decode_batch=batch, decode_ctx=n_in + n_out // 2)["total_s"]
    return batch * n_out / (prefill + (n_out - 1) * step)


def _ttft_ms(model: str, n_in: int) -> float:
    return kvsim_cost(PROFILE["b"], model, prefill=n_in)["total_s"] * 1e3


BLOCK = 2**21  # "2 MB": vLLM 0.12's block of 16 tokens of Llama-3.1-8B, 16 x 128 KiB
BIG_BLOCK = 2**24  # the largest block of Figs. 3-4 (16 MB), where "up to about 50" is reached


def _one_way_GBps(direction: str, block: int) -> float:
    flags = {"swap_bytes": 1000 * block, "swap_copies": 1000, "direction": direction}
    return 1000 * block / kvsim_cost(PROFILE["c"], "llama-3.1-8b", **flags)["total_s"] / 1e9


def _both_ways_GBps(profile: str | None = None) -> float:
    # Two copy engines: kvsim runs the H2D and D2H of one iteration concurrently.
    cm = cost_model("llama-3.1-8b", profile or PROFILE["c"])
    nbytes = 1000 * BLOCK
    t = cm.iteration(
        BatchShape(), h2d_bytes=nbytes, h2d_copies=1000, d2h_bytes=nbytes, d2h_copies=1000
    ).total_s
    return 2 * nbytes / t / 1e9


SIMULATED = {
    # gpt-fast times a 5-token prefill and 199 decode steps together (200 new tokens).
    "a1": lambda: _generate_tok_s("llama-3.1-8b", 1, 5, 200),
    "a2": lambda: _generate_tok_s("llama-2-7b", 32, 128, 2048),
    "a3": lambda: _generate_tok_s("mistral-7b", 120, 128, 2048),
    "b1": lambda: _ttft_ms("mistral-7b", 2048),
    "b2": lambda: _ttft_ms("llama-2-7b", 2048),
    "c1": lambda: _both_ways_GBps(),
    "c2": lambda: _one_way_GBps("h2d", BIG_BLOCK),
    "c3": lambda: _one_way_GBps("d2h", BIG_BLOCK),
}

# The one published number outside 15 %, with the ratio docs/cost-model.md states and explains: the same
# table's MHA LLaMA 7B (a2) matches, so the gap is in that engine's GQA decode, not in the model.
DOCUMENTED_GAPS = {"a3": 1.20}


def _ratio(key: str) -> float:
    return SIMULATED[key]() / PUBLISHED[key].value


@pytest.mark.parametrize("key", sorted(k for k in PUBLISHED if k not in DOCUMENTED_GAPS))
def test_within_tolerance_of_published(key) -> None:
    ratio = _ratio(key)
    assert abs(ratio - 1.0) <= TOLERANCE, (key, PUBLISHED[key], ratio)


@pytest.mark.parametrize("key", sorted(DOCUMENTED_GAPS))
def test_documented_gap_is_what_the_guide_says(key) -> None:
    # Pinned to the stated ratio (two digits): closing or widening the gap must update docs/cost-model.md.
    ratio = _ratio(key)
    assert abs(ratio - 1.0) > TOLERANCE
    assert ratio == pytest.approx(DOCUMENTED_GAPS[key], abs=0.005), (key, ratio)


def test_every_case_has_a_source_and_a_simulation() -> None:
    assert set(PUBLISHED) == set(SIMULATED)
    assert set(DOCUMENTED_GAPS) <= set(PUBLISHED)
    for key, pub in PUBLISHED.items():
        assert pub.value > 0 and len(pub.source) > 60, key


def _guide_rows() -> dict[str, list[str]]:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## Checked against published serving numbers")
    end = text.find("\n#", start + 4)  # the next heading
    rows = {}
    for line in text[start : end if end > 0 else None].splitlines():
        m = re.match(r"\|\s*(\w\d)\s*\|", line)
        if m and m.group(1) in PUBLISHED:
            rows[m.group(1)] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


def _number(cell: str) -> float:
    return float(re.search(r"[\d.]+", cell.replace(",", "")).group())


def test_guide_table_matches_the_code() -> None:
    """Columns: id | published | kvsim | sim/published | ... (docs/cost-model.md)."""
    rows = _guide_rows()
    assert set(rows) == set(PUBLISHED)
    for key, cells in rows.items():
        published, simulated, ratio = (_number(c) for c in cells[1:4])
        assert published == PUBLISHED[key].value, key
        sim = SIMULATED[key]()
        assert simulated == pytest.approx(sim, rel=0.005, abs=0.05), (key, sim)
        assert ratio == pytest.approx(sim / PUBLISHED[key].value, abs=0.005), key


def test_duplex_figure_of_the_measured_profile_is_the_guides() -> None:
    """The measured H100 profile takes its duplex rate from c1's source (83.4 GB/s); c1's setting
    priced with it, per-copy costs added, gives the figure docs/cost-model.md quotes."""
    from costmodels import load_profile

    assert load_profile("h100-sxm-llama3-8b").overlap.duplex_Bps == pytest.approx(83.4e9)
    text = GUIDE.read_text(encoding="utf-8")
    m = re.search(r"it gives ([\d.]+) GB/s there", text)
    assert m, "docs/cost-model.md no longer quotes the measured profile's c1 figure"
    got = _both_ways_GBps("h100-sxm-llama3-8b")
    assert float(m.group(1)) == round(got, 1), got
