"""`kvsim list` and the choices it lists: every listed value passes the experiment validation,
every value the validation accepts is listed, and each has one line of help."""

from __future__ import annotations

import copy
import json
import typing
from typing import Any

import pydantic
import pytest

import costmodels
from experiments.choice_help import VALUE_HELP
from experiments.choices import CLOSED_SECTION_NAMES, SECTION_ORDER, all_sections, closed_choices
from experiments.cli import main
from experiments.commands.list import render
from experiments.schema import VLLM_ONLY, ConfigError, EngineSpec, Experiment, parse_experiment
from sim.policies import available_policies

BASE: dict[str, Any] = {
    "name": "t",
    "trace": {"kind": "synthetic", "sessions": 2, "seed": 1},
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "memory": {"gpu_kv_gb": 1, "cpu_kv_gb": 1},
    "policies": ["lru"],
}

# What a value of a closed key needs beside it to make a valid experiment.
NEEDS: dict[tuple[str, str], dict[str, Any]] = {
    ("budgets.kind", "streamingllm"): {"window": 8},
    ("budgets.kind", "smartkv"): {"budget": 8},
    ("sparse.kind", "quest"): {"k": 4},
}
SECTION_NEEDS: dict[str, dict[str, Any]] = {
    "budgets.scorer": {"kind": "smartkv", "budget": 8},
    "sparse.scorer": {"kind": "quest", "k": 4},
    "sparse.phases": {"kind": "full"},  # quest selects in decode only
}
LIST_KEYS = ("trace", "budgets", "sparse")  # lists of mappings: the value goes in their one entry
LIST_VALUED = ("sparse.phases",)  # takes a list, never a scalar


@pytest.fixture(scope="module")
def sections():
    return {s.name: s for s in all_sections()}


def parse(data: dict[str, Any], tmp_path) -> Experiment:
    return parse_experiment(data, source="t.yaml", base_dir=tmp_path)


def with_value(key: str, value: Any) -> dict[str, Any]:
    """BASE with the YAML key ``key`` (``engine.replay``, ``budgets.kind``) set to ``value``."""
    data = copy.deepcopy(BASE)
    head, _, field = key.partition(".")
    if not field:
        data[head] = [value] if head == "policies" else value
        return data
    entry = {**SECTION_NEEDS.get(key, {}), **NEEDS.get((key, value), {})}
    if head == "trace":
        entry = {"path": "trace.file"} if value != "synthetic" else {"sessions": 2}
    if head == "engine" and (field in VLLM_ONLY or value == "vllm-v1"):
        entry["kind"] = "vllm-v1"
    entry[field] = [value] if key in LIST_VALUED else value
    if head in LIST_KEYS:
        data[head] = [entry]
    else:
        data[head] = {**data.get(head, {}), **entry}
    return data


def test_every_section_has_values_with_one_line_of_help(sections):
    assert list(sections) == list(SECTION_ORDER)  # no closed key without a section name
    for section in sections.values():
        assert section.choices, section.name
        for choice in section.choices:
            assert choice.description, f"{section.name}: {choice.name} has no description"
            assert "\n" not in choice.description


def test_every_listed_value_of_a_closed_key_is_accepted(sections, tmp_path):
    (tmp_path / "trace.file").write_text("")
    for key, name in CLOSED_SECTION_NAMES.items():
        for choice in sections[name].choices:
            parse(with_value(key, choice.name), tmp_path)


def test_every_value_the_schema_accepts_is_listed(sections):
    """The schema's closed sets, read from its type annotations (not its JSON schema, which
    ``closed_choices`` reads), are exactly the listed ones."""
    expected = dict(_literal_keys(Experiment, ""))
    assert closed_choices() == expected
    for key, values in expected.items():
        listed = sections[CLOSED_SECTION_NAMES[key]]
        assert listed.key == key and tuple(c.name for c in listed.choices) == values
        assert set(VALUE_HELP.get(key, values)) == set(values), f"help of {key} is stale"


@pytest.mark.parametrize("key", sorted(CLOSED_SECTION_NAMES))
def test_a_value_not_listed_is_rejected(key, tmp_path):
    with pytest.raises(ConfigError):
        parse(with_value(key, "no-such-value"), tmp_path)


def test_registries_are_listed_whole_and_accepted(sections, tmp_path):
    from sim.sparse import SCORERS
    from traces import TRACE_KINDS

    names = {name: [c.name for c in s.choices] for name, s in sections.items()}
    assert names["models"] == costmodels.available_models()
    assert names["hardware"] == costmodels.available_hardware()
    assert names["profiles"] == costmodels.available_profiles()
    assert names["policies"] == available_policies()
    assert names["sparse-scorers"] == list(SCORERS)
    assert tuple(names["trace-kinds"]) == TRACE_KINDS  # the loaders agree with the schema
    for name in names["hardware"] + names["profiles"]:
        parse(with_value("hardware", name), tmp_path)
    for name in names["policies"]:
        parse(with_value("policies", name), tmp_path)
    for name in names["models"]:
        # a model too big for one GPU passes at the tensor-parallel degree that holds it
        for tp in (1, 2, 4, 8):
            try:
                parse({**with_value("model", name), "hardware": "h200", "tp": tp}, tmp_path)
                break
            except ConfigError:
                continue
        else:
            pytest.fail(f"model {name} is rejected at every tp")
    for key in ("model", "hardware", "policies", "sparse.scorer"):
        with pytest.raises(ConfigError):
            parse(with_value(key, "no-such-name"), tmp_path)


def test_names_the_validation_resolves_are_listed(sections):
    """Aliases are accepted too; each resolves to a listed name."""
    from costmodels.hardware import hardware_aliases
    from costmodels.models import model_aliases

    models = {c.name for c in sections["models"].choices}
    for name in models:
        assert {costmodels.get_model(a).name for a in model_aliases(name)} == {name}
    gpus = {c.name for c in sections["hardware"].choices}
    for name in gpus:
        assert {costmodels.get_hardware(a).name for a in hardware_aliases(name)} == {name}


def test_engine_options_are_the_engine_keys_and_their_values_are_accepted(sections, tmp_path):
    options = sections["engine-options"].choices
    assert [c.name for c in options] == list(EngineSpec.model_fields)
    for option in options:
        for value in option.values or (option.default,):
            parse(with_value(f"engine.{option.name}", value), tmp_path)
    by_name = {c.name: c for c in options}
    assert by_name["replay"].values == tuple(c.name for c in sections["replay-modes"].choices)
    assert by_name["pipelining"].values == (True, False)
    assert by_name["max_batch_tokens"].accepts == "an integer >= 1"
    assert "max_num_batched_tokens" in by_name["max_batch_tokens"].description


def test_list_prints_one_line_per_value(sections, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for section in sections.values():
        assert f"{section.title} ({section.key}):" in out
        assert render(section) in out
    assert main(["list", "budget-kinds"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "budget kinds (budgets.kind):"
    assert [line.split()[0] for line in lines[1:]] == ["full", "streamingllm", "smartkv"]


def test_list_json_is_one_object_of_every_section(sections, capsys):
    assert main(["list", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got) == [*sections, "experiments"]  # the bundled experiments last
    for name, section in sections.items():
        assert got[name]["key"] == section.key
        assert [c["name"] for c in got[name]["choices"]] == [c.name for c in section.choices]
    replay = next(c for c in got["engine-options"]["choices"] if c["name"] == "replay")
    assert replay["values"] == ["closed-loop", "open-loop"] and replay["default"] == "closed-loop"
    assert main(["list", "policies", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["policies"]


def test_an_unknown_section_is_an_input_error(capsys):
    assert main(["list", "nope"]) == 2
    assert "sections: models, hardware" in capsys.readouterr().err


def _literal_keys(model: type[pydantic.BaseModel], prefix: str):
    for field, info in model.model_fields.items():
        for found in _literals_and_models(info.annotation):
            if isinstance(found, tuple):
                yield f"{prefix}{field}", found
            else:
                yield from _literal_keys(found, f"{prefix}{field}.")


def _literals_and_models(annotation: Any):
    if typing.get_origin(annotation) is typing.Literal:
        yield typing.get_args(annotation)
    elif isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        yield annotation
    else:
        for arg in typing.get_args(annotation):
            yield from _literals_and_models(arg)
