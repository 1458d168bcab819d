"""The experiments that ship with kvsim (``experiments/*.yaml``), with a one-line description each.

The names are those ``kvsim run NAME`` resolves (``experiments.schema.bundled_experiments``: the
file names without ``.yaml``). A description is the first sentence of the comment that opens the
file: its lines are joined up to the first line that shows a command (``#   kvsim run ...``), and
cut at the first sentence end or at a command written inline (``...GPU:  kvsim run vllm``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_COMMAND_LINE = re.compile(r"^\s{2,}(kvsim|python|\$)\s")  # an indented command line of the comment
_INLINE_COMMAND = re.compile(r":?\s{2,}kvsim\s.*$")  # "...on the same GPU:  kvsim run vllm"
_SENTENCE_END = re.compile(r"[.?!](?=\s|$)")


@dataclass(frozen=True, slots=True)
class BundledExperiment:
    name: str  # what `kvsim run NAME` takes
    description: str
    path: Path
    results: str  # where `kvsim run NAME` writes by default: results/<the YAML's name:>

    @property
    def command(self) -> str:
        return f"kvsim run {self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "run": self.command,
            "results": self.results,
        }


def bundled() -> list[BundledExperiment]:
    """Every bundled experiment, by name."""
    from experiments.schema import bundled_experiments, resolve_config

    out = []
    for name in bundled_experiments():
        path = resolve_config(name)
        text = path.read_text(encoding="utf-8")
        out.append(
            BundledExperiment(
                name=name,
                description=describe(text),
                path=path,
                results=f"results/{_yaml_name(text) or name}/",
            )
        )
    return out


def describe(text: str) -> str:
    """The first sentence of the comment that opens a YAML file ('' when it opens with none)."""
    parts: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        if _COMMAND_LINE.match(body) or (parts and not body.strip()):
            break
        parts.append(body.strip())
    joined = " ".join(p for p in parts if p)
    inline = _INLINE_COMMAND.search(joined)
    if inline is not None:
        joined = joined[: inline.start()]
    end = _SENTENCE_END.search(joined)
    if end is not None:
        joined = joined[: end.end()]
    joined = joined.rstrip(" :;,")
    if joined and joined[-1] not in ".?!":
        joined += "."
    return joined


def _yaml_name(text: str) -> str | None:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    name = data.get("name") if isinstance(data, dict) else None
    return str(name) if name is not None else None
