"""Readers for the public GPU timing tables in ../shared/data (described in its PROVENANCE.md s2).

Every reader returns ``Sample`` records per decoder layer, per GPU, in seconds, on the per-GPU
model shard (``samples.shard``), so the fitter treats them like our own measurements. The raw
tables are never copied into the repository; only constants fitted from them are.

Units and caveats (PROVENANCE s2.1-2.3):
  * Vidur tables are in **ms**; LLMServingSim's layers.csv in **ns**, its attention.csv in ms.
  * Vidur decode rows: ``kv_cache_size`` is the context of *each* sequence; prefill rows:
    ``kv_cache_size`` is the tokens cached before the chunk (batch 1).
  * LLMServingSim attention.csv: ``kv_cache_size`` is the **total** over the batch; a decode
    sequence has ``kv_cache_size // batch_size``. For its prefill rows (batch 1) the total includes
    the chunk itself (rows start at kv = chunk and end at kv <= 2048; time depends on kv alone, not on
    the chunk), so n_ctx = kv - chunk. Decode rows whose per-sequence context rounds to 0 (total < batch)
    are shapes no engine runs; they are dropped and counted.
  * The transcribed A100 Llama-3-8B attention sample is hand-read medians (465 rows); 24 decode rows at
    kv=16128 come from a second, unverified copy and carry the group "unverified-copy".
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from costmodels import ModelSpec, get_model

from .samples import Sample, Shape, Timing, shard

VIDUR_SNAPSHOT = "microsoft/vidur@7d47513363ec447a741ac5e47241580b47724fbf"
LSS_SNAPSHOT = "casys-kaist/LLMServingSim@5daddb21a545658d5150b535712d0494584b5278"


def default_data_dir() -> Path:
    """../shared/data beside the checkout (the repository's sibling), or $KVSIM_SHARED_DATA."""
    env = os.environ.get("KVSIM_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


@dataclass(frozen=True, slots=True)
class TableFile:
    key: str
    gpu: str  # registered hardware name, or a plain label for GPUs we have no spec of
    path: str  # relative to the data directory
    source: str  # repository@snapshot, and the commit that last touched the file
    kernel: str  # backend as the table states it
    note: str = ""


FILES: dict[str, TableFile] = {
    f.key: f
    for f in (
        TableFile(
            "vidur-h100-llama2-7b-mlp",
            "h100-sxm",
            "vidur/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv",
            f"{VIDUR_SNAPSHOT}, file commit e26eb8f7 (PROVENANCE s2.2)",
            "vidur model ops, CUDA events",
            "TP 1/2/4/8, N=1..4096",
        ),
        TableFile(
            "vidur-a100-llama2-7b-mlp",
            "a100-sxm",
            "vidur/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
            f"{VIDUR_SNAPSHOT}, file commit bee57daf (PROVENANCE s2.2)",
            "vidur model ops, CUDA events",
            "TP 1/2/4/8, N=1..4096",
        ),
        TableFile(
            "vidur-a100-llama3-8b-mlp",
            "a100-sxm",
            "vidur/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
            f"{VIDUR_SNAPSHOT}, file commit 2bb7a086 (PROVENANCE s2.2)",
            "vidur model ops, CUDA events",
            "TP 1/2/4/8, N=1..32768",
        ),
        TableFile(
            "vidur-a100-llama3-8b-attn-transcribed",
            "a100-sxm",
            "vidur/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention-sample-transcribed.csv",
            "TRANSCRIBED from sw5sh/cs378-assignment3@7ac2fe9fb6cea9d4630659a10c5cccfc9fbdd776 (verbatim copy "
            f"of {VIDUR_SNAPSHOT} data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv, LFS); "
            "kv=16128 rows from adi-anirudh/vidur_hbf_hbm_backend (unverified)",
            "FlashInfer paged, page 16",
            "TP1, 32 q / 8 kv heads, 465 hand-read medians",
        ),
        TableFile(
            "vidur-a100-llama2-70b-tp2-attn",
            "a100-sxm",
            "vidur/profiling/a100/attention.csv",
            "microsoft/vidur history commit e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a (pre-release file)",
            "FlashAttention (vLLM paged decode), Kineto",
            "Llama-2-70B TP2: 32 q / 4 kv heads per GPU",
        ),
        TableFile(
            "lss-h100-llama31-8b-layers",
            "h100-sxm",
            "llmservingsim/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv",
            f"{LSS_SNAPSHOT}, file commit 3012eb18 (PROVENANCE s2.3)",
            "HF-style unfused ops (q/k/v apart)",
            "TP1, N=1..2048, latency in ns, attn = prefill without cache",
        ),
        TableFile(
            "lss-h100-llama31-70b-tp4-attn",
            "h100-sxm",
            "llmservingsim/perf_models/H100/meta-llama/Llama-3.1-70B/tp4/attention.csv",
            f"{LSS_SNAPSHOT}, file commit 3012eb18 (PROVENANCE s2.3)",
            "FlashAttention (no split-KV decode)",
            "TP4: 16 q / 2 kv heads per GPU; kv_cache_size is the batch total",
        ),
        TableFile(
            "lss-a6000-llama31-8b-attn",
            "a6000",
            "llmservingsim/perf_models/A6000/meta-llama/Llama-3.1-8B/tp1/attention.csv",
            f"{LSS_SNAPSHOT}, file commit 3012eb18 (PROVENANCE s2.3)",
            "FlashAttention (no split-KV decode)",
            "TP1; kv_cache_size is the batch total",
        ),
    )
}


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def _ms(v: str) -> float:
    return float(v) * 1e-3


def _path(key: str, data_dir: Path | None) -> Path:
    p = (data_dir or default_data_dir()) / FILES[key].path
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: public table {key!r} not found (is ../shared/data beside the checkout?)"
        )
    return p


# --- Vidur ----------------------------------------------------------------------------------------
VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Measured once per layer as Vidur lists them (one "add"); ModelSpec's byte count has two adds and
# the KV write, so the layer form's fitted bandwidth is an effective one for this op set. The
# samples keep each op's time under its ``ModelSpec.elementwise_ops`` name (the per-op form fits
# each kind on its own times and prices the ops the row timed).
VIDUR_ELEMENTWISE = {
    "input_layernorm": "input_norm",
    "attn_rope": "rope",
    "post_attention_layernorm": "post_attention_norm",
    "mlp_act": "act",
    "add": "attention_residual_add",  # one of the layer's two (same shape)
}


def load_vidur_mlp(
    key: str, model: str, tps: tuple[int, ...] = (1, 2, 4, 8), data_dir: Path | None = None
) -> list[Sample]:
    """gemm, elementwise and linear samples from a Vidur mlp.csv, one shard per TP degree."""
    spec = get_model(model)
    out: list[Sample] = []
    for r in _rows(_path(key, data_dir)):
        tp = int(r["num_tensor_parallel_workers"])
        if tp not in tps:
            continue
        m = shard(spec, tp)
        shape = Shape(tokens=int(r["num_tokens"]))
        g = sum(_ms(r[f"time_stats.{op}.median"]) for op in VIDUR_GEMMS)
        parts = _parts(r, VIDUR_ELEMENTWISE, lambda row, op: _ms(row[f"time_stats.{op}.median"]))
        e = sum(t for _, t in parts)
        grp = f"{spec.name}/tp{tp}"
        for term, t in (("gemm", g), ("elementwise", e), ("linear", g + e)):
            ew = parts if term != "gemm" else ()
            out.append(Sample(term, shape, Timing.published(t), m, grp, FILES[key].kernel, ew))
    return out


def _parts(row, names: dict[str, str], seconds) -> tuple[tuple[str, float], ...]:
    """Each elementwise op's time in ``row``, under its ``ModelSpec.elementwise_ops`` name."""
    return tuple((ours, seconds(row, theirs)) for theirs, ours in names.items())


def load_vidur_attention(key: str, model: ModelSpec, data_dir: Path | None = None) -> list[Sample]:
    """prefill_attn and decode_attn samples from a Vidur attention.csv (per-sequence kv for decode)."""
    kern = FILES[key].kernel
    out: list[Sample] = []
    for r in _rows(_path(key, data_dir)):
        b, chunk, kv = int(r["batch_size"]), int(r["prefill_chunk_size"]), int(r["kv_cache_size"])
        if r["is_prefill"] == "True":
            shape = Shape(n_new=chunk, n_ctx=kv, seqs=b)
            out.append(
                Sample(
                    "prefill_attn",
                    shape,
                    Timing.published(_ms(r["time_stats.attn_prefill.median"])),
                    model,
                    "append" if kv else "full",
                    kern,
                )
            )
        else:
            shape = Shape(n_ctx=kv, seqs=b)
            out.append(
                Sample(
                    "decode_attn",
                    shape,
                    Timing.published(_ms(r["time_stats.attn_decode.median"])),
                    model,
                    "",
                    kern,
                )
            )
    return out


def load_vidur_transcribed(
    key: str = "vidur-a100-llama3-8b-attn-transcribed",
    include_unverified: bool = True,
    data_dir: Path | None = None,
) -> list[Sample]:
    model = get_model("llama-3-8b")
    kern = FILES[key].kernel
    out: list[Sample] = []
    for r in _rows(_path(key, data_dir)):
        verified = r["copy_repo"] == "sw5sh/cs378-assignment3"
        if not verified and not include_unverified:
            continue
        b, chunk, kv = int(r["batch_size"]), int(r["prefill_chunk_size"]), int(r["kv_cache_size"])
        if r["is_prefill"] == "True":
            t = _ms(r["attn_prefill_median_ms"])
            out.append(
                Sample(
                    "prefill_attn",
                    Shape(n_new=chunk, n_ctx=kv, seqs=b),
                    Timing.published(t),
                    model,
                    "append" if kv else "full",
                    kern,
                )
            )
        else:
            t = _ms(r["attn_decode_median_ms"])
            out.append(
                Sample(
                    "decode_attn",
                    Shape(n_ctx=kv, seqs=b),
                    Timing.published(t),
                    model,
                    "verified" if verified else "unverified-copy",
                    kern,
                )
            )
    return out


# --- LLMServingSim ---------------------------------------------------------------------------------
LSS_GEMMS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# No residual adds and no KV write in this table: its samples name the ops they timed.
LSS_ELEMENTWISE = {
    "input_layernorm": "input_norm",
    "rope": "rope",
    "post_layernorm": "post_attention_norm",
    "act_fn": "act",
}
LSS_LAYER = LSS_GEMMS + tuple(LSS_ELEMENTWISE) + ("attn",)


def load_lss_layers(
    key: str = "lss-h100-llama31-8b-layers", data_dir: Path | None = None
) -> list[Sample]:
    """gemm, elementwise, linear, prefill_attn (no cache), lm_head and whole-layer samples (ns)."""
    model = get_model("llama-3.1-8b")
    kern = FILES[key].kernel
    by_n: dict[int, dict[str, float]] = {}
    for r in _rows(_path(key, data_dir)):
        if int(r["tp_size"]) != 1 or int(r["kv_cache"]) != 0:
            continue
        by_n.setdefault(int(r["input"]), {})[r["layer_name"]] = float(r["latency(ns)"]) * 1e-9
    out: list[Sample] = []
    for n, ops in sorted(by_n.items()):
        if not all(op in ops for op in LSS_LAYER + ("lm_head",)):
            continue
        g = sum(ops[op] for op in LSS_GEMMS)
        parts = _parts(ops, LSS_ELEMENTWISE, lambda row, op: row[op])
        e = sum(t for _, t in parts)
        tok = Shape(tokens=n)
        rows: list[tuple[str, Shape, float]] = [
            ("gemm", tok, g),
            ("elementwise", tok, e),
            ("linear", tok, g + e),
            ("lm_head", tok, ops["lm_head"]),
            ("layer", tok, sum(ops[op] for op in LSS_LAYER)),
            ("prefill_attn", Shape(n_new=n, n_ctx=0, seqs=1), ops["attn"]),
        ]
        out += [
            Sample(
                term,
                shape,
                Timing.published(t),
                model,
                "full" if term == "prefill_attn" else "",
                kern,
                parts if term in ("elementwise", "linear") else (),
            )
            for term, shape, t in rows
        ]
    return out


def load_lss_attention(
    key: str, model: ModelSpec, data_dir: Path | None = None, dropped: list[int] | None = None
) -> list[Sample]:
    """prefill_attn and decode_attn samples; kv_cache_size is the batch total (see module notes)."""
    kern = FILES[key].kernel
    out: list[Sample] = []
    n_drop = 0
    for r in _rows(_path(key, data_dir)):
        b, chunk, kv = int(r["batch_size"]), int(r["prefill_chunk_size"]), int(r["kv_cache_size"])
        if r["is_prefill"] == "True":
            shape = Shape(n_new=chunk, n_ctx=kv - chunk, seqs=b)
            out.append(
                Sample(
                    "prefill_attn",
                    shape,
                    Timing.published(_ms(r["time_stats.attn_prefill.median"])),
                    model,
                    "append" if kv > chunk else "full",
                    kern,
                )
            )
        else:
            per_seq = kv // b
            if per_seq < 1:
                n_drop += 1
                continue
            out.append(
                Sample(
                    "decode_attn",
                    Shape(n_ctx=per_seq, seqs=b),
                    Timing.published(_ms(r["time_stats.attn_decode.median"])),
                    model,
                    "",
                    kern,
                )
            )
    if dropped is not None:
        dropped.append(n_drop)
    return out


# --- named sources: which file gives which term on which GPU -----------------------------------------
@dataclass(frozen=True, slots=True)
class PublicSource:
    name: str
    gpu: str
    files: tuple[str, ...]
    terms: tuple[str, ...]  # terms fitted and validated on this source
    load: Callable[[Path | None], list[Sample]]
    description: str
    # SMs of the GPU when the attention kernels give each (query tile or sequence, head) one CTA
    # and stream the keys inside it (no split-KV): prefill and decode get the wave terms. 0: none.
    wave_sms: int = 0
    # GEMMs: fit the per-GEMM tile/wave form (costmodels.gemm) over the GPU's SMs instead of the
    # layer form; and whether c_tile (a smaller tile's extra cost) is fitted or fixed at 0.
    gemm_tile_waves: bool = False
    gemm_tile_overhead_fitted: bool = True
    # Elementwise: fit the per-op form (costmodels.elementwise), each kind on its own op times
    # (the samples must carry them), instead of the layer form's one bandwidth.
    elementwise_per_op: bool = False


def _vidur_a100_mlp(d: Path | None) -> list[Sample]:
    return load_vidur_mlp("vidur-a100-llama2-7b-mlp", "llama-2-7b", data_dir=d) + load_vidur_mlp(
        "vidur-a100-llama3-8b-mlp", "llama-3-8b", data_dir=d
    )


SOURCES: dict[str, PublicSource] = {
    s.name: s
    for s in (
        PublicSource(
            "a100-vidur-mlp",
            "a100-sxm",
            ("vidur-a100-llama2-7b-mlp", "vidur-a100-llama3-8b-mlp"),
            ("gemm", "elementwise", "linear"),
            _vidur_a100_mlp,
            "Vidur A100 Llama-2-7B + Llama-3-8B token-level ops, TP 1/2/4/8 shards fitted jointly",
            gemm_tile_waves=True,
            # c_tile fixed at 0: it gains nothing on the random split, and free it trades off
            # against flops when fitted on N <= 2048 alone (extrapolation MAPE 3.4 -> 6.8 %).
            gemm_tile_overhead_fitted=False,
            elementwise_per_op=True,
        ),
        PublicSource(
            "a100-vidur-flashinfer",
            "a100-sxm",
            ("vidur-a100-llama3-8b-attn-transcribed",),
            ("prefill_attn", "decode_attn"),
            lambda d: load_vidur_transcribed(data_dir=d),
            "Vidur A100 Llama-3-8B FlashInfer attention, transcribed sample",
        ),
        PublicSource(
            "a100-vidur-fa-70b-tp2",
            "a100-sxm",
            ("vidur-a100-llama2-70b-tp2-attn",),
            ("prefill_attn", "decode_attn"),
            lambda d: load_vidur_attention(
                "vidur-a100-llama2-70b-tp2-attn", shard(get_model("llama-2-70b"), 2), d
            ),
            "Vidur's pre-release A100 Llama-2-70B TP2 FlashAttention file",
        ),
        PublicSource(
            "h100-vidur-mlp",
            "h100-sxm",
            ("vidur-h100-llama2-7b-mlp",),
            ("gemm", "elementwise", "linear"),
            lambda d: load_vidur_mlp("vidur-h100-llama2-7b-mlp", "llama-2-7b", data_dir=d),
            "Vidur H100 Llama-2-7B token-level ops, TP 1/2/4/8 shards fitted jointly",
            gemm_tile_waves=True,
            elementwise_per_op=True,
        ),
        PublicSource(
            "h100-lss-8b-layers",
            "h100-sxm",
            ("lss-h100-llama31-8b-layers",),
            ("prefill_attn",),
            lambda d: load_lss_layers(data_dir=d),
            "LLMServingSim H100 Llama-3.1-8B per-op latencies (attn: prefill with no cache)",
        ),
        PublicSource(
            "h100-lss-70b-tp4",
            "h100-sxm",
            ("lss-h100-llama31-70b-tp4-attn",),
            ("prefill_attn", "decode_attn"),
            lambda d: load_lss_attention(
                "lss-h100-llama31-70b-tp4-attn", shard(get_model("llama-3-70b"), 4), d
            ),
            "LLMServingSim H100 Llama-3.1-70B TP4 attention (FlashAttention, no split-KV decode)",
            wave_sms=132,  # H100 SXM
        ),
        PublicSource(
            "a6000-lss-8b",
            "a6000",
            ("lss-a6000-llama31-8b-attn",),
            ("prefill_attn", "decode_attn"),
            lambda d: load_lss_attention("lss-a6000-llama31-8b-attn", get_model("llama-3-8b"), d),
            "LLMServingSim A6000 Llama-3.1-8B attention (FlashAttention, no split-KV decode)",
            wave_sms=84,  # RTX A6000
        ),
    )
}


def available(data_dir: Path | None = None) -> bool:
    """True when every public table this module reads is present."""
    base = data_dir or default_data_dir()
    return all((base / f.path).is_file() for f in FILES.values())
