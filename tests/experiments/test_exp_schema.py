"""Experiment YAML validation: every error names the file and the key path."""

from __future__ import annotations

import dataclasses
import re

import pydantic
import pytest
from exp_fakes import BASE, error_of

from experiments.schema import VLLM_ONLY, load_experiment
from sim.config import EngineConfig


def test_valid_config_fills_defaults(write_yaml):
    exp = load_experiment(write_yaml(BASE))
    assert exp.name == "t" and exp.policies == ["lru", "fifo"]
    assert exp.memory.cpu_kv_gb == [0.0] and exp.memory.gpu_kv_gb == [1.0, 2.0]
    eng = exp.grid()[0].engine
    assert eng == EngineConfig()  # defaults come from the one definition in sim.config
    assert exp.executor.kind == "local" and exp.executor.workers == 1
    assert exp.baseline_infinite is False and exp.debug is False
    with pytest.raises(pydantic.ValidationError):
        exp.name = "other"  # frozen


def test_brief_example_message_exactly(write_yaml):
    path = write_yaml(BASE.replace("gpu_kv_gb: [1, 2]", "gpu_kv_gb: [1, 2, -1]"), "bad.yaml")
    assert error_of(path) == f"{path}: memory.gpu_kv_gb[2]: must be > 0, got -1"


@pytest.mark.parametrize(
    "old,new,key,words",
    [
        (
            "seeds: [1]",
            "seeds: [1]\npolicy: lru",
            "policy",
            "unknown key (did you mean 'policies'?)",
        ),
        ("evict_unit: block}", "evict_unit: block, gpu_kb: 3}", "memory.gpu_kb", "unknown key"),
        (
            "seeds: [1]",
            "seeds: [1]\nengine: {max_batch_token: 10}",
            "engine.max_batch_token",
            "did you mean 'max_batch_tokens'",
        ),
        (
            "block_tokens: 16",
            "block_tokens: '16'",
            "memory.block_tokens",
            "expected an integer, got str",
        ),
        (
            "block_tokens: 16",
            "block_tokens: [16, 1.5]",
            "memory.block_tokens[1]",
            "expected an integer",
        ),
        ("cpu_kv_gb: 0", "cpu_kv_gb: yes", "memory.cpu_kv_gb", "expected a number, got bool"),
        ("seeds: [1]", "seeds: [1, one]", "seeds[1]", "expected an integer"),
        ("seeds: [1]", "seeds: [1]\ndebug: 'true'", "debug", "expected true or false"),
        ("seeds: [1]", "seeds: [1]\nengine: {pipelining: 1}", "engine.pipelining", "true or false"),
        ("gpu_kv_gb: [1, 2]", "gpu_kv_gb: 0", "memory.gpu_kv_gb", "must be > 0, got 0"),
        ("cpu_kv_gb: 0", "cpu_kv_gb: -4", "memory.cpu_kv_gb", "must be >= 0"),
        ("block_tokens: 16", "block_tokens: 0", "memory.block_tokens", "must be >= 1"),
        (
            "seeds: [1]",
            "seeds: [1]\nengine: {max_running: 0}",
            "engine.max_running",
            "must be >= 1",
        ),
        (
            "evict_unit: block",
            "evict_unit: [block, page]",
            "memory.evict_unit[1]",
            "must be one of 'session', 'block', 'layer_block'; got 'page'",
        ),
        (
            "evict_unit: block",
            "evict_unit: layer",
            "memory.evict_unit",
            "must be one of 'session', 'block', 'layer_block'; got 'layer'",
        ),
        ("seeds: [1]", "seeds: [1]\ntp: 0", "tp", "must be >= 1, got 0"),
        ("seeds: [1]", "seeds: [1]\ntp: [1, 1.5]", "tp[1]", "expected an integer"),
        ("seeds: [1]", "seeds: [1]\ntps: 2", "tps", "unknown key (did you mean 'tp'?)"),
        ("seeds: [1]", "seeds: [1]\ntp: 3", "tp", "Llama-3-8B cannot be split over tp=3"),
        (
            "gpu_kv_gb: [1, 2]",
            "gpu_kv_gb: [1, 0.001]",
            "memory.gpu_kv_gb[1]",
            "0.001 GiB holds no page: one page of 16 tokens of llama-3-8b takes 2 MiB",
        ),
        (
            "block_tokens: 16",
            "block_tokens: [16, 10000]",
            "memory.gpu_kv_gb[0]",
            "1 GiB holds no page: one page of 10000 tokens of llama-3-8b takes 1.22 GiB",
        ),
        ("cpu_kv_gb: 0", "cpu_kv_gb: 0.001", "memory.cpu_kv_gb", "use 0 for no CPU tier"),
        (
            "seeds: [1]",
            "seeds: [1]\nengine: {max_batch_tokens: 100}",
            "engine.max_batch_tokens",
            "must be >= engine.max_running (256), got 100",
        ),
        (
            "seeds: [1]",
            "seeds: [1]\nengine: {max_batch_tokens: 0}",
            "engine.max_batch_tokens",
            "must be >= 1",
        ),
        ("seeds: [1]", "seeds: [1]\nengine: {replay: open}", "engine.replay", "closed-loop"),
        (
            "policies: [lru, fifo]",
            "policies: [lru, nosuch]",
            "policies[1]",
            "unknown policy 'nosuch'",
        ),
        ("policies: [lru, fifo]", "policies: [lru, 'os:path']", "policies[1]", "EvictionPolicy"),
        (
            "policies: [lru, fifo]",
            "policies: ['nosuchmodule:Policy']",
            "policies[0]",
            "cannot import Policy from nosuchmodule",
        ),
        (
            "policies: [lru, fifo]",
            "policies: ['experiments.schema:NoSuchClass']",
            "policies[0]",
            "cannot import NoSuchClass from experiments.schema",
        ),
        ("policies: [lru, fifo]", "policies: []", "policies", "must not be empty"),
        ("policies: [lru, fifo]", "policies: [lru, lru]", "policies", "duplicate value 'lru'"),
        ("model: llama-3-8b", "model: llama-9-zz", "model", "unknown model 'llama-9-zz'"),
        (
            "hardware: h100-sxm",
            "hardware: [h100-sxm, tpu-v9]",
            "hardware[1]",
            "unknown profile 'tpu-v9'",
        ),
        (
            "model: llama-3-8b",
            "model: specs/none.yaml",
            "model",
            "file not found: 'specs/none.yaml'",
        ),
        (
            "hardware: h100-sxm",
            "hardware: profiles/none.yaml",
            "hardware",
            "file not found: 'profiles/none.yaml'",
        ),
        (
            "trace: {kind: synthetic, sessions: 5, seed: 1}",
            "trace: {kind: jsonl}",
            "trace.path",
            "required for kind 'jsonl'",
        ),
        (
            "trace: {kind: synthetic, sessions: 5, seed: 1}",
            "trace: [{kind: synthetic}, {kind: sharegpt, path: nope.json}]",
            "trace[1].path",
            "file not found: 'nope.json'",
        ),
        (
            "trace: {kind: synthetic, sessions: 5, seed: 1}",
            "trace: {kind: csv, path: x}",
            "trace.kind",
            "must be one of",
        ),
        (
            "trace: {kind: synthetic, sessions: 5, seed: 1}",
            "trace: synthetic",
            "trace",
            "expected a mapping, got str",
        ),
        ("name: t", "name: my run", "name", "letters, digits"),
        ("name: t", "", "name", "required key is missing"),
        ("seeds: [1]", "seeds: [1]\nexecutor: {kind: slurm}", "executor.kind", "'local', 'ray'"),
        ("seeds: [1]", "seeds: [1]\nexecutor: {workers: 0}", "executor.workers", "must be >= 1"),
    ],
)
def test_errors_name_file_and_key(write_yaml, old, new, key, words):
    assert old in BASE
    path = write_yaml(BASE.replace(old, new), "bad.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: {key}: "), msg
    assert words in msg, msg


def test_registry_names_and_aliases_are_accepted(write_yaml):
    """The cost-model registry resolves names and aliases; the config keeps what the user wrote."""
    text = BASE.replace("model: llama-3-8b", "model: [llama-3-8b, Llama-3-70B]").replace(
        "hardware: h100-sxm", "hardware: [h100-sxm, a100-sxm]"
    )
    text += "tp: 4\n"  # Llama-3-70B's 141 GB of weights need more than one 80 GB GPU
    exp = load_experiment(write_yaml(text))
    assert exp.model == ["llama-3-8b", "Llama-3-70B"] and exp.hardware == ["h100-sxm", "a100-sxm"]


def test_several_errors_one_line_each(write_yaml):
    path = write_yaml(
        BASE.replace("gpu_kv_gb: [1, 2]", "gpu_kv_gb: [-1, 2]").replace(
            "seeds: [1]", "seeds: [1]\nbogus: 1"
        ),
        "bad.yaml",
    )
    lines = error_of(path).splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert {line.split(": ")[1] for line in lines} == {"memory.gpu_kv_gb[0]", "bogus"}


def test_yaml_syntax_error_names_line(write_yaml):
    path = write_yaml("name: t\nmemory: {gpu_kv_gb: [1, 2}\npolicies: [lru]\n", "broken.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: line 2, column ")
    assert "YAML syntax error" in msg


def test_yaml_bad_indentation_line(write_yaml):
    path = write_yaml("name: t\nmodel: x\n  hardware: y\n", "broken.yaml")
    assert re.match(
        rf"{re.escape(str(path))}: line 3, column \d+: YAML syntax error", error_of(path)
    )


def test_duplicate_key_is_an_error_with_line(write_yaml):
    path = write_yaml(BASE + "policies: [lru]\n", "dup.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: line 8, column 1: ") and "duplicate key 'policies'" in msg


@pytest.mark.parametrize("text,words", [("", "got an empty file"), ("- 1\n- 2\n", "got a list")])
def test_top_level_must_be_mapping(write_yaml, text, words):
    path = write_yaml(text or "# nothing\n", "top.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: ") and words in msg


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    assert error_of(path).startswith(f"{path}: no such file, and not a bundled experiment (")
    assert "quickstart" in error_of(path)


def test_relative_trace_path_resolves_against_yaml_folder_then_cwd(
    tmp_path, write_yaml, monkeypatch
):
    (tmp_path / "cfg" / "data").mkdir(parents=True)
    (tmp_path / "cfg" / "data" / "t.jsonl").write_text("{}\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.jsonl").write_text("{}\n")
    text = BASE.replace(
        "{kind: synthetic, sessions: 5, seed: 1}",
        "[{kind: jsonl, path: data/t.jsonl}, {kind: jsonl, path: c.jsonl}]",
    )
    monkeypatch.chdir(tmp_path / "elsewhere")
    exp = load_experiment(write_yaml(text, "cfg/exp.yaml"))
    assert exp.trace[0].path == str((tmp_path / "cfg" / "data" / "t.jsonl").resolve())
    assert exp.trace[1].path == str((tmp_path / "elsewhere" / "c.jsonl").resolve())
    monkeypatch.chdir(tmp_path)  # c.jsonl is no longer reachable
    msg = error_of(tmp_path / "cfg" / "exp.yaml")
    assert "trace[1].path: file not found: 'c.jsonl'" in msg


def test_model_and_hardware_files_resolve(tmp_path, write_yaml):
    import yaml

    import costmodels

    (tmp_path / "specs").mkdir()
    spec = {
        "name": "tiny-model",
        "num_layers": 2,
        "hidden_size": 256,
        "num_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "dtype_bytes": 2,
        "gated_mlp": True,
        "source": "test",
    }
    (tmp_path / "specs" / "tiny-model.yaml").write_text(yaml.safe_dump(spec))
    costmodels.save_profile(costmodels.load_profile("h100-sxm"), tmp_path / "specs" / "my-gpu.yaml")
    text = BASE.replace("model: llama-3-8b", "model: [llama-3-8b, specs/tiny-model.yaml]").replace(
        "hardware: h100-sxm", "hardware: specs/my-gpu.yaml"
    )
    exp = load_experiment(write_yaml(text))
    assert exp.model[1] == str(tmp_path / "specs" / "tiny-model.yaml")
    labels = exp.grid()[-1].labels()
    assert labels["model"] == "tiny-model" and labels["hardware"] == "my-gpu"


def test_bad_model_file_is_reported_under_its_key(tmp_path, write_yaml):
    (tmp_path / "broken-model.yaml").write_text("num_layers: 2\n")
    msg = error_of(write_yaml(BASE.replace("model: llama-3-8b", "model: broken-model.yaml")))
    assert msg.startswith(f"{tmp_path / 'exp.yaml'}: model: ") and "broken-model.yaml" in msg


def test_resolved_config_round_trips(write_yaml, tmp_path):
    import yaml

    exp = load_experiment(write_yaml(BASE))
    resolved = exp.resolved()
    # kind and pipelining are grid axes: one-value lists, like every memory axis; the keys of
    # vllm-v1 alone are left out of a kvsim run's config
    kvsim_only = {k: v for k, v in dataclasses.asdict(EngineConfig()).items() if k not in VLLM_ONLY}
    assert resolved["engine"] == {**kvsim_only, "kind": ["kvsim"], "pipelining": [True]}
    assert resolved["memory"]["evict_unit"] == ["block"]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(resolved))
    assert load_experiment(again).grid() == exp.grid()


def test_pipelining_list_is_a_grid_axis(write_yaml):
    exp = load_experiment(write_yaml(BASE + "\nengine: {pipelining: [true, false]}\n"))
    grid = exp.grid()
    base = load_experiment(write_yaml(BASE, "base.yaml")).grid()
    assert len(grid) == 2 * len(base)
    # after evict_unit, before block_tokens: policy x gpu_kv_gb (4 points) with it on, then off
    assert [p.labels()["pipelining"] for p in grid] == [True] * 4 + [False] * 4


def test_tp_is_a_grid_axis_a_label_and_part_of_each_run(write_yaml):
    base = load_experiment(write_yaml(BASE, "base.yaml"))
    assert base.resolved()["tp"] == [1] and {p.tp for p in base.grid()} == {1}
    exp = load_experiment(write_yaml(BASE + "tp: [1, 2]\n"))
    assert exp.resolved()["tp"] == [1, 2]
    grid = exp.grid()
    assert len(grid) == 2 * len(base.grid())
    # after hardware, before evict_unit: policy x gpu_kv_gb (4 points) at tp 1, then at tp 2
    assert [p.labels()["tp"] for p in grid] == [1] * 4 + [2] * 4
    assert list(grid[0].labels())[:5] == ["name", "policy", "engine", "model", "hardware"]
    assert list(grid[0].labels())[5] == "tp"
    assert grid[0] != grid[4] and dataclasses.replace(grid[0], tp=2) == grid[4]


TWO_MODELS = BASE.replace("model: llama-3-8b", "model: [llama-3-8b, llama-3-70b]")


def test_tp_per_model_runs_each_model_at_its_own_degrees(write_yaml):
    exp = load_experiment(write_yaml(TWO_MODELS + "tp: {llama-3-8b: 1, llama-3-70b: [2, 4]}\n"))
    assert exp.resolved()["tp"] == {"llama-3-8b": [1], "llama-3-70b": [2, 4]}
    # model, then that model's degrees, then policy x gpu_kv_gb (4 points each)
    runs = [(p.model, p.tp) for p in exp.grid()]
    assert runs == [("llama-3-8b", 1)] * 4 + [("llama-3-70b", 2)] * 4 + [("llama-3-70b", 4)] * 4


@pytest.mark.parametrize(
    "tp, key, words",
    [
        ("{llama-3-70b: 2}", "tp", "gives no tensor-parallel degree for model 'llama-3-8b'"),
        (
            "{llama-3-8b: 1, llama-3-70b: 2, llama-2-7b: 1}",
            "tp.llama-2-7b",
            "'llama-2-7b' is not one of this experiment's models",
        ),
        ("{llama-3-8b: 1, llama-3-70b: 1}", "tp.llama-3-70b", "needs 141.1 GB of weights"),
        ("{llama-3-8b: [1, 3], llama-3-70b: 2}", "tp.llama-3-8b[1]", "cannot be split over tp=3"),
        ("{llama-3-8b: 1, llama-3-70b: [2, 2]}", "tp.llama-3-70b", "duplicate value 2"),
    ],
)
def test_tp_per_model_errors_name_the_file_and_the_entry(write_yaml, tp, key, words):
    path = write_yaml(TWO_MODELS + f"tp: {tp}\n", "tp.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: {key}: ") and words in msg, msg


def test_a_model_too_big_for_one_gpu_names_file_key_numbers_and_fixes(write_yaml):
    path = write_yaml(BASE.replace("model: llama-3-8b", "model: llama-3-70b"), "big.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: tp: Llama-3-70B at tp=1 needs 141.1 GB of weights"), msg
    for words in ("2.1 GB of KV (2 GiB / tp 1)", "80.0 GB of HBM", "h100-sxm", "(tp=2 fits)"):
        assert words in msg, msg
    assert "raise tp" in msg and "hardware" in msg and "memory.gpu_kv_gb" in msg
    load_experiment(write_yaml(BASE.replace("model: llama-3-8b", "model: llama-3-70b") + "tp: 2\n"))
    # the group's KV pool counts 1/tp on each GPU: 2 x 70.6 GB of weights leave room for 2 x ~9 GB
    too_much = BASE.replace("model: llama-3-8b", "model: llama-3-70b").replace("[1, 2]", "[1, 20]")
    assert "tp=2 needs 70.6 GB" in error_of(write_yaml(too_much + "tp: 2\n", "full.yaml"))


def test_a_tp_run_end_to_end(tmp_path, write_yaml):
    import csv

    from experiments.cli import main

    cfg = write_yaml(
        BASE.replace("model: llama-3-8b", "model: llama-3-70b")
        .replace("sessions: 5", "sessions: 3")
        .replace("[lru, fifo]", "[lru]")
        .replace("[1, 2]", "2")
        + "tp: [2, 4]\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["tp"] for r in rows] == ["2", "4"]
    assert rows[0]["ttft_p50_s"] != rows[1]["ttft_p50_s"]  # four GPUs share each layer


def test_engine_kind_is_a_grid_axis_and_takes_vllms_names(write_yaml):
    exp = load_experiment(
        write_yaml(
            BASE
            + "engine: {kind: [kvsim, vllm-v1], max_num_seqs: 32, max_num_batched_tokens: 2048,"
            " long_prefill_token_threshold: 512}\n"
        )
    )
    grid = exp.grid()
    assert [p.engine.kind for p in grid] == ["kvsim"] * 4 + ["vllm-v1"] * 4
    assert {p.labels()["engine"] for p in grid} == {"kvsim", "vllm-v1"}
    e = grid[-1].engine
    assert (e.max_running, e.max_batch_tokens, e.long_prefill_token_threshold) == (32, 2048, 512)
    assert e.scheduler_reserve_full_isl is True  # vLLM's default
    assert e.async_scheduling is True  # as vLLM runs on a GPU
    sync = load_experiment(write_yaml(BASE + "engine: {kind: vllm-v1, async_scheduling: false}\n"))
    assert sync.grid()[0].engine.async_scheduling is False


def test_a_vllm_run_with_a_cpu_tier_runs_vllms_offloading_connector(write_yaml):
    from costmodels import cost_model
    from sim.vllm_v1.run import offload_config

    text = BASE.replace("cpu_kv_gb: 0", "cpu_kv_gb: 4")
    text += "engine: {kind: vllm-v1, offload_eviction_policy: arc, offload_blocks_per_chunk: 2}\n"
    (point, *_) = load_experiment(write_yaml(text)).grid()
    cost = cost_model(point.model, point.hardware)
    off = offload_config(cost, point.memory, point.engine)
    chunk = 2 * point.memory.block_tokens * cost.kv_bytes_per_token  # a multiple of 4 KiB here
    assert (off.cpu_chunks, off.blocks_per_chunk, off.eviction_policy) == (
        4 * 2**30 // chunk,
        2,
        "arc",
    )


@pytest.mark.parametrize(
    "engine,extra,key,words",
    [
        ("{max_num_seqs: 8, max_running: 8}", "", "engine", "not both"),
        ("{block_size: 16}", "", "engine", "memory.block_tokens"),
        ("{long_prefill_token_threshold: 64}", "", "engine.long_prefill_token_threshold", "only"),
        ("{async_scheduling: false}", "", "engine.async_scheduling", "only"),
        ("{offload_eviction_policy: arc}", "", "engine.offload_eviction_policy", "only"),
        ("{kind: vllm-v1, offload_eviction_policy: fifo}", "", "engine", "lru"),
        (
            "{kind: vllm-v1, offload_blocks_per_chunk: 0}",
            "",
            "engine.offload_blocks_per_chunk",
            ">= 1",
        ),
        ("{kind: vllm-v1}", "policies: [lru, belady]", "policies[1]", "future"),
        ("{kind: vllm-v1}", "evict_unit: block", "memory.evict_unit", "use block"),
    ],
)
def test_what_a_vllm_run_cannot_take_is_named(write_yaml, engine, extra, key, words):
    text = BASE + f"engine: {engine}\n"
    if extra.startswith("policies"):
        text = text.replace("policies: [lru, fifo]", extra)
    elif extra.startswith("evict_unit"):
        text = text.replace("evict_unit: block}", "evict_unit: session}")
    msg = error_of(write_yaml(text))
    assert f": {key}" in msg and words in msg, msg


@pytest.mark.parametrize(
    "engine,unit,words",
    [
        ("{kind: vllm-v1, chunked_prefill: true}", "block", "applies to engine.kind kvsim"),
        ("{chunked_prefill: true}", "layer_block", "layer_block"),
        ("{chunked_prefill: true, fused_recompute: false}", "block", "fused_recompute"),
    ],
)
def test_chunked_prefill_combinations_it_does_not_model_are_named(write_yaml, engine, unit, words):
    text = BASE.replace("evict_unit: block", f"evict_unit: {unit}") + f"engine: {engine}\n"
    msg = error_of(write_yaml(text))
    assert ": engine.chunked_prefill" in msg and words in msg, msg


def test_chunked_prefill_reaches_the_engine(write_yaml):
    exp = load_experiment(write_yaml(BASE + "engine: {chunked_prefill: true}\n"))
    assert all(p.engine.chunked_prefill for p in exp.grid())


@pytest.mark.parametrize(
    "memory,extra,words",
    [
        ("cpu_kv_gb: 4, evict_unit: session", "sparse: [{kind: quest, k: 4}]", "evict_unit"),
        ("cpu_kv_gb: 0, evict_unit: block", "sparse: [{kind: full}]", "cpu_kv_gb must be > 0"),
        (
            "cpu_kv_gb: 4, evict_unit: block",
            "sparse: [{kind: quest, k: 4}]\nbudgets: [{kind: streamingllm, sink: 4, window: 64}]",
            "token budgets and sparse offload",
        ),
        (
            "cpu_kv_gb: 4, evict_unit: block",
            "sparse: [{kind: quest, k: 4}]\nengine: {chunked_prefill: true}",
            "chunked prefill and sparse offload",
        ),
    ],
)
def test_sparse_combinations_it_does_not_model_are_named(write_yaml, memory, extra, words):
    """The rules of sim.config.combination_problems, reported at load with the sparse entry."""
    text = BASE.replace("cpu_kv_gb: 0, block_tokens: 16, evict_unit: block", memory)
    msg = error_of(write_yaml(text.replace("block_tokens: 16, ", "") + extra + "\n"))
    assert ": sparse[0]: " in msg and words in msg, msg


def test_a_cpu_tier_on_one_capacity_is_enough_for_sparse(write_yaml):
    """cpu_kv_gb [0, 4] with sparse offload: the grid runs it at 4 only, so it is no error."""
    text = BASE.replace("cpu_kv_gb: 0", "cpu_kv_gb: [0, 4]") + "sparse: [{kind: quest, k: 4}]\n"
    exp = load_experiment(write_yaml(text))
    assert {p.memory.cpu_kv_gb for p in exp.grid() if p.sparse.enabled} == {4}
