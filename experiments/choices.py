"""Every choice an experiment YAML offers, read from the code that accepts it (``kvsim list``).

The names come from where validation looks them up: the cost model's registries (models, GPUs,
profiles), the policy registry, the sparse scorers of ``sim.sparse``, and the experiment schema's
JSON schema, whose every closed set of values (a ``Literal`` field) becomes a section of its own
(``closed_choices``), so a new value or a new closed field shows up here by itself. The help of a
value is its docstring where it has one (policies, trace kinds, sparse scorers), else its line in
``experiments.choice_help``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Choice:
    """One value a YAML key accepts (or, for an options section, one key)."""

    name: str
    description: str
    values: tuple[Any, ...] = ()  # an option's accepted values, where they are a closed set
    accepts: str = ""  # an option's accepted values in words, where they are not
    default: Any = None  # an option's default (None: no default worth showing)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.values:
            out["values"] = list(self.values)
        if self.accepts:
            out["accepts"] = self.accepts
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True, slots=True)
class Section:
    """A kind of choice: the YAML key it fills and the values it offers."""

    name: str  # what `kvsim list NAME` takes
    key: str  # the YAML key, e.g. budgets.kind (budgets is a list: each entry's kind)
    choices: tuple[Choice, ...]

    @property
    def title(self) -> str:
        return self.name.replace("-", " ")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "choices": [c.to_dict() for c in self.choices]}


# Section names of the schema's closed choices; a closed key missing here is listed under its key.
CLOSED_SECTION_NAMES = {
    "trace.kind": "trace-kinds",
    "memory.evict_unit": "evict-units",
    "engine.kind": "engine-kinds",
    "engine.replay": "replay-modes",
    "engine.prefetch": "prefetch-modes",
    "engine.swap_copies": "swap-copies",
    "engine.offload_eviction_policy": "offload-eviction-policies",
    "budgets.kind": "budget-kinds",
    "budgets.scorer": "budget-scorers",
    "sparse.kind": "sparse-kinds",
    "sparse.phases": "sparse-phases",
    "executor.kind": "executors",
}


def closed_choices() -> dict[str, tuple[Any, ...]]:
    """Every YAML key of the experiment schema that accepts a closed set of values, with them."""
    from experiments.schema import Experiment

    schema = Experiment.model_json_schema()
    return dict(_closed_keys(schema["properties"], schema.get("$defs", {}), ""))


def _closed_keys(
    properties: dict[str, Any], defs: dict[str, Any], prefix: str
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    for field, prop in properties.items():
        key = f"{prefix}{field}"
        values = _enum(prop)
        if values:
            yield key, values
        for sub in _nested_models(prop, defs):
            yield from _closed_keys(sub["properties"], defs, f"{key}.")


def _branches(prop: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema itself, its list items and its alternatives (``X | None``)."""
    out = [prop]
    if isinstance(prop.get("items"), dict):
        out += _branches(prop["items"])
    for alt in prop.get("anyOf", []) + prop.get("oneOf", []):
        out += _branches(alt)
    return out


def _enum(prop: dict[str, Any]) -> tuple[Any, ...]:
    for b in _branches(prop):
        if "enum" in b:
            return tuple(b["enum"])
        if "const" in b:
            return (b["const"],)
    return ()


def _nested_models(prop: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    refs = [b["$ref"] for b in _branches(prop) if "$ref" in b]
    return [defs[ref.rsplit("/", 1)[-1]] for ref in refs]


# Sections read from a registry rather than the schema's closed sets: (name, YAML key, maker).
def _registry_sections() -> list[tuple[str, str, Callable[[], tuple[Choice, ...]]]]:
    return [
        ("models", "model", _models),
        ("hardware", "hardware", _hardware),
        ("profiles", "hardware", _profiles),
        ("policies", "policies", _policies),
        ("engine-options", "engine", _engine_options),
        ("sparse-scorers", "sparse.scorer", _sparse_scorers),
    ]


SECTION_ORDER = (
    "models",
    "hardware",
    "profiles",
    "policies",
    "trace-kinds",
    "evict-units",
    "engine-kinds",
    "engine-options",
    "replay-modes",
    "prefetch-modes",
    "swap-copies",
    "offload-eviction-policies",
    "budget-kinds",
    "budget-scorers",
    "sparse-kinds",
    "sparse-scorers",
    "sparse-phases",
    "executors",
)


def all_sections() -> list[Section]:
    """Every section: those of SECTION_ORDER in that order, then any closed key it lacks."""
    found = {name: Section(name, key, make()) for name, key, make in _registry_sections()}
    for key, values in closed_choices().items():
        name = CLOSED_SECTION_NAMES.get(key, key)
        found[name] = Section(name, key, _closed_section(key, values))
    order = [n for n in SECTION_ORDER if n in found] + sorted(set(found) - set(SECTION_ORDER))
    return [found[n] for n in order]


# ---------------------------------------------------------------------------------------------
# Where each section's values and help come from


def _closed_section(key: str, values: tuple[Any, ...]) -> tuple[Choice, ...]:
    from experiments.choice_help import VALUE_HELP

    if key == "trace.kind":
        return tuple(Choice(v, _trace_help(v)) for v in values)
    help_ = VALUE_HELP.get(key, {})
    return tuple(Choice(str(v), help_.get(str(v), "")) for v in values)


def _trace_help(kind: str) -> str:
    """A trace kind's loader module (``traces.<kind>``) says what it reads."""
    try:
        return _summary(importlib.import_module(f"traces.{kind}").__doc__)
    except ImportError:
        return ""


def _models() -> tuple[Choice, ...]:
    import costmodels

    out = []
    for name in costmodels.available_models():
        m = costmodels.get_model(name)
        context = f", context {m.max_context_tokens}" if m.max_context_tokens else ""
        out.append(
            Choice(
                name,
                f"{m.num_layers} layers, {m.num_heads} heads ({m.num_kv_heads} KV) of "
                f"{m.head_dim}, hidden {m.hidden_size}; KV {m.kv_bytes_per_token / 1024:g} KiB "
                f"per token{context}",
            )
        )
    return tuple(out)


def _hardware() -> tuple[Choice, ...]:
    import costmodels

    out = []
    for name in costmodels.available_hardware():
        h = costmodels.get_hardware(name)
        out.append(
            Choice(
                name,
                f"{h.hbm_bytes / 1e9:g} GB HBM at {h.hbm_bw_Bps / 1e12:g} TB/s, "
                f"{h.dense_bf16_flops / 1e12:g} TFLOPS BF16, host link "
                f"{h.host_link_Bps / 1e9:g} GB/s (its analytic profile)",
            )
        )
    return tuple(out)


def _profiles() -> tuple[Choice, ...]:
    import costmodels

    out = []
    for name in costmodels.available_profiles():
        meta = costmodels.load_profile(name).meta
        origin, _, how = meta.source.partition(":")
        if origin == "analytic":  # how: "datasheet x Level-0 efficiencies (where they live)"
            text = f"analytic profile of {meta.gpu}: {how.split('(')[0].strip()}"
        else:
            when = f", {meta.date}" if meta.date else ""
            text = f"fitted profile of {meta.gpu}{when}: {meta.backend.split(';')[0].strip()}"
        out.append(Choice(name, text))
    return tuple(out)


def _policies() -> tuple[Choice, ...]:
    from sim.policies import available_policies, policy_class

    return tuple(Choice(n, _policy_help(n, policy_class(n))) for n in available_policies())


def _policy_help(name: str, cls: type) -> str:
    """The first line of the class's own docstring, else of its module's, without a leading
    "NAME: ". A module of several policies gives each a line ``NAME`` followed by its own
    description, whose first clause is added."""
    own = cls.__dict__.get("__doc__")
    doc = own or sys.modules[cls.__module__].__doc__ or ""
    text = _summary(doc)
    head, sep, rest = text.partition(": ")
    if sep and (name.lower() == head.lower() or name.lower().startswith(f"{head.lower()}-")):
        text = rest
    lines = [line.strip() for line in doc.splitlines()]
    entry = f"``{name}``"
    if not own and entry in lines[:-1]:
        variant = lines[lines.index(entry) + 1]
        text += f"; {_plain(variant.split(':')[0].removesuffix(', where').rstrip('.'))}"
    return text


def _sparse_scorers() -> tuple[Choice, ...]:
    from sim.sparse import SCORERS

    return tuple(Choice(name, _summary(fn.__doc__)) for name, fn in SCORERS.items())


def _engine_options() -> tuple[Choice, ...]:
    """The engine section's keys; where a key is left out, EngineConfig's default applies."""
    from experiments.schema import VLLM_ALIASES, EngineSpec
    from sim.config import EngineConfig

    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    vllm_names = {ours: theirs for theirs, ours in VLLM_ALIASES.items()}
    out = []
    for key, prop in EngineSpec.model_json_schema()["properties"].items():
        values = _enum(prop) or (
            (True, False) if any(b.get("type") == "boolean" for b in _branches(prop)) else ()
        )
        description = prop.get("description", "")
        if prop.get("type") == "array":
            description += "; a list is a grid axis"
        if key in vllm_names:
            description += f"; vLLM's name {vllm_names[key]} is accepted too"
        out.append(
            Choice(
                key,
                description,
                values=values,
                accepts="" if values else _accepts(prop),
                default=defaults.get(key),
            )
        )
    return tuple(out)


def _accepts(prop: dict[str, Any]) -> str:
    """An open value in words, from its JSON schema: ``an integer >= 1``."""
    for b in _branches(prop):
        kind = {"integer": "an integer", "number": "a number", "string": "a string"}.get(
            b.get("type", "")
        )
        if kind is None:
            continue
        if "minimum" in b:
            return f"{kind} >= {b['minimum']}"
        if "exclusiveMinimum" in b:
            return f"{kind} > {b['exclusiveMinimum']}"
        return kind
    return ""


def _summary(doc: str | None) -> str:
    """A docstring's first line, as plain text."""
    lines = (doc or "").strip().splitlines()
    return _plain(lines[0]).rstrip(".") if lines else ""


def _plain(text: str) -> str:
    return text.replace("``", "").strip()
