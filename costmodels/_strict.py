"""Strict reading of this package's YAML files: every error names the key and the file.

One loader and a handful of checkers shared by the model, hardware and profile files, so the
three report mistakes the same way: unknown keys, wrong types and impossible values are errors
that name the key and the file.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``5e-6`` and ``3.35e12``.

    Why: PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so a hand-written
    ``tau_s: 5e-6`` would load as the *string* "5e-6" and fail the type check for no good reason.
    """


_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?
        |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)
# Remove the YAML 1.1 float resolver and install the wider one; ints still win (resolved first).
_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))

# libyaml's parser (about ten times faster) with the same resolvers, for this package's own files
# only: it accepts some malformed text the pure parser refuses (a tab before a colon), and its
# messages do not quote the offending line. None without libyaml.
_CLoader: type | None = (
    type(
        "_CLoader",
        (yaml.CSafeLoader,),
        {"yaml_implicit_resolvers": _Loader.yaml_implicit_resolvers},
    )
    if yaml.__with_libyaml__
    else None
)
_PACKAGE_DIR = Path(__file__).resolve().parent


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse one YAML file with the lenient-float loader; a syntax error names the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read file: {exc}") from exc
    try:
        return _parse(text, p)
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not valid YAML: {exc}") from exc


def _parse(text: str, path: Path) -> Any:
    """The document, by libyaml when ``path`` is one of this package's files (their tests check
    that both parsers read them alike); a document libyaml refuses is parsed again by the pure
    parser, so its error is the one reported (with the line quoted)."""
    if _CLoader is not None and path.resolve().is_relative_to(_PACKAGE_DIR):
        try:
            return yaml.load(text, Loader=_CLoader)  # noqa: S506 - a SafeLoader's constructor
        except yaml.YAMLError:
            pass  # the pure parser below raises, with the message users have always had
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def dump_yaml(data: Any, path: str | os.PathLike[str], header: str = "") -> None:
    """Write ``data`` as block-style YAML in insertion order, with an optional comment header."""
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    Path(path).write_text(comment + body, encoding="utf-8")


class Ctx:
    """Where a value came from: the file and the dotted key path, for error messages."""

    __slots__ = ("file", "key")

    def __init__(self, file: str, key: str = "") -> None:
        self.file = file
        self.key = key

    def child(self, key: str) -> "Ctx":
        return Ctx(self.file, f"{self.key}.{key}" if self.key else key)

    def error(self, problem: str) -> ValueError:
        where = f"key '{self.key}'" if self.key else "top level"
        return ValueError(f"{self.file}: {where}: {problem}")


def mapping(obj: Any, ctx: Ctx) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ctx.error(f"expected a mapping, got {type(obj).__name__}")
    for k in obj:
        if not isinstance(k, str):
            raise ctx.child(str(k)).error("keys must be strings")
    return obj


def check_keys(
    obj: Mapping[str, Any], ctx: Ctx, required: Iterable[str], optional: Iterable[str] = ()
) -> None:
    """Unknown keys and missing required keys are errors, each naming the key."""
    required = tuple(required)
    allowed = set(required) | set(optional)
    for k in obj:
        if k not in allowed:
            raise ctx.child(k).error(f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for k in required:
        if k not in obj:
            raise ctx.child(k).error("missing required key")


def number(obj: Any, ctx: Ctx, *, positive: bool = False) -> float:
    """A finite real >= 0 (> 0 when ``positive``); bools are not numbers here."""
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise ctx.error(f"expected a number, got {type(obj).__name__} {obj!r}")
    x = float(obj)
    if x != x or x in (float("inf"), float("-inf")):
        raise ctx.error(f"expected a finite number, got {obj!r}")
    if positive and x <= 0:
        raise ctx.error(f"must be > 0, got {obj!r}")
    if x < 0:
        raise ctx.error(f"must be >= 0, got {obj!r}")
    return x


def optional_number(obj: Any, ctx: Ctx, *, positive: bool = False) -> float | None:
    return None if obj is None else number(obj, ctx, positive=positive)


def integer(obj: Any, ctx: Ctx, *, minimum: int = 0) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise ctx.error(f"expected an integer, got {type(obj).__name__} {obj!r}")
    if obj < minimum:
        raise ctx.error(f"must be >= {minimum}, got {obj!r}")
    return obj


def boolean(obj: Any, ctx: Ctx) -> bool:
    if not isinstance(obj, bool):
        raise ctx.error(f"expected true or false, got {type(obj).__name__} {obj!r}")
    return obj


def string(obj: Any, ctx: Ctx) -> str:
    if not isinstance(obj, str) or not obj.strip():
        raise ctx.error(f"expected a non-empty string, got {type(obj).__name__} {obj!r}")
    return obj


def optional_string(obj: Any, ctx: Ctx) -> str | None:
    """A string or null; YAML dates (``2025-06-01``) are accepted and kept as ISO text."""
    if obj is None:
        return None
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return str(obj)  # a version written as 2.5 or 550 without quotes
    return string(obj, ctx)


def string_list(obj: Any, ctx: Ctx) -> tuple[str, ...]:
    if not isinstance(obj, list):
        raise ctx.error(f"expected a list of strings, got {type(obj).__name__}")
    return tuple(string(v, ctx.child(str(i))) for i, v in enumerate(obj))


def is_yaml_path(text: str) -> bool:
    """Whether a name-or-path argument should be read as a file (checked after the registry)."""
    return text.lower().endswith((".yaml", ".yml")) or Path(text).is_file()


def lookup(
    text: str, registry: tuple[Mapping[str, Any], Mapping[str, str]], load_file, kind: str, unknown
) -> Any:
    """A registered spec by name or alias (case-insensitive), else a spec YAML by path.

    ``registry`` is (name -> spec, lower-case alias -> name); ``unknown()`` builds the message for a
    name that is neither (the file-not-found message names ``kind``).
    """
    specs, index = registry
    key = text.strip().lower()
    if key in index:
        return specs[index[key]]
    if is_yaml_path(text):
        if not Path(text).is_file():
            raise ValueError(f"{text}: {kind} spec file not found")
        return load_file(text)
    raise ValueError(unknown())


def aliases_of(canonical: str, index: Mapping[str, str]) -> list[str]:
    """Every lower-case key of ``index`` that resolves to ``canonical``."""
    return sorted(k for k, v in index.items() if v == canonical)
