"""A hand-written profile (no compute slowdown) and a 3-layer model with Llama-3-8B's layer shapes,
for `kvsim cost` tests whose layers and bars can be counted by hand."""

from __future__ import annotations

from pathlib import Path

MODEL = """\
name: tiny-3
num_layers: 3
hidden_size: 4096
num_heads: 32
num_kv_heads: 8
head_dim: 128
intermediate_size: 14336
vocab_size: 128256
dtype_bytes: 2
gated_mlp: true
source: a test
"""

PROFILE = """\
name: hand-check
linear: {tau_s: 10.0e-6, weight_bw_Bps: 2.0e12, flops: 5.0e14, elementwise_bw_Bps: 1.0e12}
prefill_attn: {tau_s: 20.0e-6, flops: 2.0e14, per_seq_s: 0.0}
decode_attn: {tau_s: 5.0e-6, per_seq_s: 1.0e-6, kv_bw_Bps: 1.0e12}
h2d: {latency_s: 10.0e-6, bw_Bps: 25.0e9}
d2h: {latency_s: 10.0e-6, bw_Bps: 25.0e9}
overlap: {compute_slowdown: 0.0, layerwise_h2d: true}
step_overhead_s: 0.5e-3
meta: {gpu: hand, backend: hand, dtype: bf16, source: "hand-written for a test"}
"""


def cost_argv(folder: Path, *extra: str, model: str | None = None) -> list[str]:
    """`kvsim cost` arguments on the hand profile and the 3-layer model (or ``model``)."""
    (folder / "tiny.yaml").write_text(MODEL)
    (folder / "hand.yaml").write_text(PROFILE)
    model = model or str(folder / "tiny.yaml")
    return ["cost", "--model", model, "--profile", str(folder / "hand.yaml"), *extra]
