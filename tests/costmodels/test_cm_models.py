"""Model specs: registry values, derived bytes/params worked by hand, strict spec files."""

from __future__ import annotations

import dataclasses

import pytest

from costmodels import ModelSpec, available_models, get_model
from costmodels.models import model_aliases

# Published configs (sources in costmodels/data/models.yaml), transcribed:
# (L, h, Hq, K, d, I, vocab, params_b, kv_bytes_bf16, gated)
NOTES_S6 = {
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, 8.03, 131072, True),
    "Llama-3-70B": (80, 8192, 64, 8, 128, 28672, 128256, 70.55, 327680, True),
    "Qwen2.5-7B": (28, 3584, 28, 4, 128, 18944, 152064, 7.62, 57344, True),
    "Mistral-7B": (32, 4096, 32, 8, 128, 14336, 32000, 7.24, 131072, True),
    "Llama-2-13B": (40, 5120, 40, 40, 128, 13824, 32000, 13.02, 819200, True),
    "Llama-2-70B": (80, 8192, 64, 8, 128, 28672, 32000, 68.98, 327680, True),
    "OPT-13B": (40, 5120, 40, 40, 128, 20480, 50272, 12.85, 819200, False),
    "OPT-66B": (64, 9216, 72, 72, 128, 36864, 50272, 65.72, 2359296, False),
    # HF meta-llama/Llama-2-7b-hf config.json; 6.74 B is Meta's published size.
    "Llama-2-7B": (32, 4096, 32, 32, 128, 11008, 32000, 6.74, 524288, True),
}


@pytest.mark.parametrize("name", sorted(NOTES_S6))
def test_registry_matches_notes_table(name: str) -> None:
    m = get_model(name)
    L, h, hq, k, d, i, vocab, _, kv, gated = NOTES_S6[name]
    assert (
        m.num_layers,
        m.hidden_size,
        m.num_heads,
        m.num_kv_heads,
        m.head_dim,
        m.intermediate_size,
        m.vocab_size,
        m.gated_mlp,
        m.dtype_bytes,
    ) == (L, h, hq, k, d, i, vocab, gated, 2)
    assert m.kv_bytes_per_token == kv
    assert m.source.strip()


@pytest.mark.parametrize("name", sorted(NOTES_S6))
def test_params_reproduce_published_model_size(name: str) -> None:
    # Independent check of the per-layer formula: layers + embeddings ~ the published size.
    m = get_model(name)
    params_b = NOTES_S6[name][7]
    tied = not m.gated_mlp  # OPT ties embedding and LM head
    total = (
        m.num_layers * m.linear_params_per_layer + (1 if tied else 2) * m.hidden_size * m.vocab_size
    )
    assert total / 1e9 == pytest.approx(params_b, rel=0.01)


def test_kv_bytes_by_hand() -> None:
    assert get_model("Llama-3-8B").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert get_model("Llama-2-13B").kv_bytes_per_token == 2 * 40 * 40 * 128 * 2 == 819200
    assert get_model("Qwen2.5-7B").kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57344
    assert get_model("Llama-3-8B").kv_bytes_per_token_layer == 4096  # 4 KiB
    assert get_model("Qwen2.5-7B").kv_bytes_per_token_layer == 2048
    assert get_model("OPT-66B").kv_bytes_per_token_layer == 36 * 1024


def test_params_per_layer_by_hand() -> None:
    # Llama-3-8B: q 4096x4096, k and v 4096x1024, o 4096x4096, gate/up/down 3 x 4096x14336
    assert (
        get_model("Llama-3-8B").linear_params_per_layer
        == (16_777_216 + 2 * 4_194_304 + 16_777_216 + 3 * 58_720_256)
        == 218_103_808
    )
    # OPT-13B: 4 x 5120^2 attention, 2 x 5120x20480 plain FFN
    assert get_model("OPT-13B").linear_params_per_layer == 104_857_600 + 209_715_200
    assert get_model("Llama-3-8B").linear_weight_bytes_per_layer == 2 * 218_103_808
    assert get_model("Llama-3-8B").lm_head_params == 4096 * 128256


def test_gemm_shapes_by_hand() -> None:
    # (K, NO): QKV 4096 -> (32 + 2*8)*128, O 4096 -> 4096, gate+up fused 4096 -> 2*14336, down.
    l3 = get_model("Llama-3-8B")
    assert l3.gemm_shapes == ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096))
    # OPT-13B: plain FFN, up alone 5120 -> 20480; MHA QKV 5120 -> 3*5120.
    assert get_model("OPT-13B").gemm_shapes == (
        (5120, 15360),
        (5120, 5120),
        (5120, 20480),
        (20480, 5120),
    )
    # The TP shard splits heads and MLP width, not the hidden size.
    assert l3.shard(4).gemm_shapes == ((4096, 1536), (1024, 4096), (4096, 7168), (3584, 4096))
    for m in (l3, get_model("OPT-13B"), l3.shard(4)):
        assert sum(k * n for k, n in m.gemm_shapes) == m.linear_params_per_layer


def test_elementwise_bytes_by_hand() -> None:
    # 2 norms (4h) + 2 adds (6h) + rope on q,k (2*(32+8)*128) + SwiGLU act (3I) + KV write (4*8*128)
    elems = 10 * 4096 + 2 * 40 * 128 + 3 * 14336 + 4 * 8 * 128
    assert get_model("Llama-3-8B").elementwise_bytes_per_token_layer == 2 * elems == 196_608
    # Plain FFN activation reads and writes I once each.
    opt = get_model("OPT-13B")
    assert opt.elementwise_bytes_per_token_layer == 2 * (
        10 * 5120 + 2 * 80 * 128 + 2 * 20480 + 4 * 40 * 128
    )


@pytest.mark.parametrize(
    "alias",
    [
        "llama-3-8b",
        "Llama-3-8B",
        "LLAMA-3-8B",
        " llama-3-8b ",
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/meta-llama-3-8b-instruct",
    ],
)
def test_aliases_case_insensitive(alias: str) -> None:
    assert get_model(alias).name == "Llama-3-8B"


def test_other_aliases() -> None:
    assert get_model("meta-llama/Llama-2-7b-hf").name == "Llama-2-7B"
    assert get_model("facebook/opt-66b").name == "OPT-66B"
    assert get_model("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B"
    assert get_model("mistralai/Mistral-7B-v0.1").name == "Mistral-7B"
    assert "meta-llama/meta-llama-3-8b" in model_aliases("llama3-8b")


def test_available_models_lists_required() -> None:
    assert set(NOTES_S6) <= set(available_models())


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown model 'gpt-5'.*Llama-3-8B"):
        get_model("gpt-5")
    with pytest.raises(ValueError, match="not found"):
        get_model("/nonexistent/model.yaml")


def test_spec_is_frozen_and_checked() -> None:
    m = get_model("Llama-3-8B")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.num_layers = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        dataclasses.replace(m, num_kv_heads=5)
    with pytest.raises(ValueError, match="head_dim"):
        dataclasses.replace(m, head_dim=0)


SPEC = """\
name: Tiny-1B
num_layers: 16
hidden_size: 2048
num_heads: 32
num_kv_heads: 8
head_dim: 64
intermediate_size: 8192
vocab_size: 128256
dtype_bytes: 2
gated_mlp: true
source: "Llama-3.2-1B config.json"
"""


def test_spec_file_loads(tmp_path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC)
    m = get_model(str(path))
    assert m.name == "Tiny-1B"
    assert m.kv_bytes_per_token == 2 * 16 * 8 * 64 * 2
    assert get_model(path) == m  # os.PathLike too


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda s: s + "num_experts: 8\n", "num_experts"),  # unknown key
        (lambda s: s.replace("vocab_size: 128256\n", ""), "vocab_size"),  # missing field
        (lambda s: s.replace("num_layers: 16", "num_layers: '16'"), "num_layers"),  # wrong type
        (lambda s: s.replace("gated_mlp: true", "gated_mlp: 1"), "gated_mlp"),  # int is not bool
        (lambda s: s.replace("head_dim: 64", "head_dim: -64"), "head_dim"),  # impossible value
        (lambda s: s.replace('source: "Llama-3.2-1B config.json"\n', ""), "source"),
    ],
)
def test_spec_file_errors_name_key_and_file(tmp_path, edit, key) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(edit(SPEC))
    with pytest.raises(ValueError) as exc:
        get_model(str(path))
    assert str(path) in str(exc.value)
    assert f"'{key}'" in str(exc.value)


def test_spec_file_cross_field_error_names_file(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("num_kv_heads: 8", "num_kv_heads: 5"))
    with pytest.raises(ValueError, match="bad.yaml.*multiple of num_kv_heads"):
        get_model(str(path))


def test_model_spec_is_a_plain_value() -> None:
    m = get_model("Llama-3-8B")
    assert isinstance(m, ModelSpec) and get_model(m) is m
    assert hash(m) == hash(dataclasses.replace(m))
