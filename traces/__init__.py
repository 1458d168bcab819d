"""Trace loaders and generators; everything yields the canonical Session/Turn records.

``load_trace({"kind": ..., **options})`` is the one entry point experiments use:

    {kind: synthetic, sessions: 200, seed: 7}            # SyntheticConfig fields
    {kind: sharegpt, path: ..., tokenizer: chars, max_sessions: 500, seed: 0, arrival_rate: 1.0,
     think: {median_s: 30, sigma: 1.0}}
    {kind: mooncake, path: ..., seed: 0, jitter: true, chain: true}
    {kind: azure, path: ...}
    {kind: burstgpt, path: ..., log_type: all}           # all | conversation | api
    {kind: jsonl, path: ...}

Every kind also takes ``time_scale`` (default 1.0): arrival and think times are multiplied by it,
so ``time_scale: 20`` replays a cluster trace at 1/20 of its request rate on one simulated GPU; and
``until_s``: only the sessions that start before that time (after scaling), a trace's first part.

This package imports nothing else of the project. The file loaders and the tokenizers are imported
when first used: those that need pandas (azure, burstgpt), so that reading a synthetic, ShareGPT,
Mooncake or JSONL trace does not pay for pandas, and the others, so that a synthetic trace (what
most experiments replay) imports only its generator.
"""

from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from traces.dists import LogNormalMix, ThinkTime
from traces.records import Session, TraceError, TraceLoad, Turn, scale_time, validate_session
from traces.synthetic import SyntheticConfig, generate_synthetic

__all__ = [
    "Turn",
    "Session",
    "TraceError",
    "TraceLoad",
    "validate_session",
    "iter_jsonl",
    "read_jsonl",
    "write_jsonl",
    "load_sharegpt",
    "load_mooncake",
    "load_azure",
    "load_burstgpt",
    "SyntheticConfig",
    "generate_synthetic",
    "LogNormalMix",
    "ThinkTime",
    "Tokenizer",
    "CharEstimate",
    "HFTokenizer",
    "make_tokenizer",
    "load_trace",
    "timed",
    "check_timing",
    "TIMING_KEYS",
    "TRACE_KINDS",
]

_FILE_LOADERS: dict[str, str] = {  # kind -> its loader's name in this package
    "sharegpt": "load_sharegpt",
    "mooncake": "load_mooncake",
    "azure": "load_azure",
    "burstgpt": "load_burstgpt",
    "jsonl": "read_jsonl",
}
TRACE_KINDS = ("synthetic", *_FILE_LOADERS)
_ON_USE = {
    "load_azure": "traces.azure",
    "load_burstgpt": "traces.burstgpt",
    "load_mooncake": "traces.mooncake",
    "load_sharegpt": "traces.sharegpt",
    "iter_jsonl": "traces.jsonl",
    "read_jsonl": "traces.jsonl",
    "write_jsonl": "traces.jsonl",
    "CharEstimate": "traces.tokenize",
    "HFTokenizer": "traces.tokenize",
    "Tokenizer": "traces.tokenize",
    "make_tokenizer": "traces.tokenize",
}


def __getattr__(name: str) -> Any:
    """The loaders imported on first use (PEP 562)."""
    if name in _ON_USE:
        return getattr(importlib.import_module(_ON_USE[name]), name)
    raise AttributeError(f"module 'traces' has no attribute {name!r}")


def _loader(kind: str) -> Callable[..., TraceLoad]:
    name = _FILE_LOADERS[kind]
    return globals()[name] if name in globals() else __getattr__(name)


def load_trace(spec: Mapping[str, Any]) -> TraceLoad:
    """Dispatch on spec["kind"]; the other keys are that loader's options (see module docstring)."""
    if not isinstance(spec, Mapping):
        raise TraceError(f"trace spec must be a mapping, got {type(spec).__name__}")
    if "kind" not in spec:
        raise TraceError(f"trace spec needs 'kind' (one of {', '.join(TRACE_KINDS)})")
    timing = {k: spec[k] for k in TIMING_KEYS if k in spec}
    check_timing(timing)  # before a long read
    kind, opts = spec["kind"], {k: v for k, v in spec.items() if k not in ("kind", *TIMING_KEYS)}
    return _apply_timing(_load(kind, opts), timing)


TIMING_KEYS = ("time_scale", "until_s")  # options every kind takes, applied after the load


def timed(load: TraceLoad, timing: Mapping[str, Any]) -> TraceLoad:
    """``load`` (read with no timing options) with ``time_scale`` and ``until_s`` applied: what
    ``load_trace`` gives for the spec with these options. A caller can read a trace once and
    replay it at several time scales."""
    check_timing(timing)
    return _apply_timing(load, timing)


def _apply_timing(load: TraceLoad, timing: Mapping[str, Any]) -> TraceLoad:
    load = scale_time(load, float(timing.get("time_scale", 1.0)))
    until = timing.get("until_s")
    if until is None:
        return load
    kept = tuple(s for s in load.sessions if s.start_s < until)
    return replace(load, sessions=kept, info={**load.info, "until_s": until})


def check_timing(timing: Mapping[str, Any]) -> None:
    """TraceError unless ``time_scale`` and ``until_s`` (where given) are numbers > 0."""
    factor = timing.get("time_scale", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise TraceError(f"trace.time_scale: must be a number > 0, got {factor!r}")
    until = timing.get("until_s")
    if until is not None and (
        isinstance(until, bool) or not isinstance(until, (int, float)) or not until > 0
    ):
        raise TraceError(f"trace.until_s: must be a number > 0, got {until!r}")


def _load(kind: Any, opts: dict[str, Any]) -> TraceLoad:
    if kind == "synthetic":
        return generate_synthetic(SyntheticConfig.from_dict(opts, where="trace"))
    if kind not in _FILE_LOADERS:
        raise TraceError(f"trace: unknown kind {kind!r}; expected one of {', '.join(TRACE_KINDS)}")
    loader = _loader(kind)
    allowed = list(inspect.signature(loader).parameters)
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise TraceError(
            f"trace (kind {kind}): unknown option(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(allowed)}"
        )
    if "path" not in opts:
        raise TraceError(f"trace (kind {kind}): missing 'path'")
    if kind == "sharegpt" and isinstance(opts.get("think"), Mapping):
        opts["think"] = ThinkTime.from_dict(opts["think"], where="trace.think")
    try:
        return loader(**opts)
    except TypeError as e:  # e.g. a string where a number belongs: report it as a trace error
        raise TraceError(f"trace (kind {kind}): bad option value: {e}") from e
    except TraceError as e:  # a file of another kind fails to parse: name the likely kind first
        from traces.sniff import sniff_kind

        likely = sniff_kind(opts["path"]) if isinstance(opts["path"], (str, os.PathLike)) else None
        if likely is None or likely == kind:
            raise
        raise TraceError(
            f"{Path(opts['path']).name} looks like a {likely} trace, not {kind}: "
            f"give kind {likely} ({e})"
        ) from e
