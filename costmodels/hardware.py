"""GPU specifications: datasheet peaks and measured host-link figures, each with its source.

Registered GPUs live in ``data/hardware.yaml`` (each number with its public source). These are
physical limits, not achieved rates: ``costmodels.analytic`` turns them into a Level-0 profile.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import _strict as S

_REGISTRY_FILE = Path(__file__).with_name("data") / "hardware.yaml"


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """One GPU and its host link (per direction; H2D and D2H are full duplex)."""

    name: str
    hbm_bytes: float
    hbm_bw_Bps: float
    dense_bf16_flops: float
    host_link_Bps: float  # nominal per-direction link rate
    h2d_measured_Bps: float | None  # measured pinned copy-engine rate, if known
    d2h_measured_Bps: float | None
    copy_latency_s: float  # fixed cost per cudaMemcpyAsync-like copy
    # GPU-to-GPU link for tensor parallelism; None where unknown (a PCIe-only card, a user file).
    nvlink_per_direction_Bps: float | None = None  # NVLink line rate per GPU, one direction
    allreduce_latency_s: float | None = None  # fixed cost of one small all-reduce in a TP group
    sm_count: int | None = None  # streaming multiprocessors: the width of a wave of CTAs
    l2_bytes: int | None = None  # L2 cache: past about half of it an op's inputs spill to HBM
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # field -> citation

    @property
    def ridge_flop_per_byte(self) -> float:
        """Roofline ridge: dense FLOP/s over HBM bandwidth (A100 ~153, H100 ~295 FLOP/byte)."""
        return self.dense_bf16_flops / self.hbm_bw_Bps


_NUMERIC = ("hbm_bytes", "hbm_bw_Bps", "dense_bf16_flops", "host_link_Bps", "copy_latency_s")
_OPTIONAL = ("h2d_measured_Bps", "d2h_measured_Bps")
# May be left out of a file (older hardware files have no GPU-to-GPU link); a value needs a source.
_LINK = ("nvlink_per_direction_Bps", "allreduce_latency_s")
# May be left out of a file too (a count, not a rate); a value needs a source.
_COUNTS = ("sm_count", "l2_bytes")
_ALL = ("name", *_NUMERIC, *_OPTIONAL, "sources")


def _spec_from_mapping(
    obj: Any, ctx: S.Ctx, name: str | None
) -> tuple[HardwareSpec, tuple[str, ...]]:
    m = S.mapping(obj, ctx)
    required = [k for k in _ALL if not (name is not None and k == "name")]
    S.check_keys(m, ctx, required=required, optional=("aliases", "notes", *_LINK, *_COUNTS))
    values: dict[str, Any] = {
        "name": name if name is not None else S.string(m["name"], ctx.child("name"))
    }
    for k in _NUMERIC:
        # copy latency may be 0 (an idealised link); capacities and rates may not.
        values[k] = S.number(m[k], ctx.child(k), positive=k != "copy_latency_s")
    for k in _OPTIONAL:
        values[k] = S.optional_number(m[k], ctx.child(k), positive=True)
    link = [k for k in _LINK if k in m]
    for k in link:
        values[k] = S.optional_number(m[k], ctx.child(k), positive=k != "allreduce_latency_s")
    counts = [k for k in _COUNTS if k in m]
    for k in counts:
        values[k] = S.integer(m[k], ctx.child(k), minimum=1)
    link += counts
    src_ctx = ctx.child("sources")
    sources = S.mapping(m["sources"], src_ctx)
    for k, v in sources.items():
        if k not in _NUMERIC + _OPTIONAL + tuple(link):
            raise src_ctx.child(k).error("unknown key: sources name numeric fields only")
        S.string(v, src_ctx.child(k))
    for k in _NUMERIC + _OPTIONAL + tuple(link):
        if k not in sources:  # every constant's source is stated
            raise src_ctx.child(k).error("missing source for this field")
    values["sources"] = dict(sources)
    aliases = S.string_list(m.get("aliases", []), ctx.child("aliases"))
    return HardwareSpec(**values), aliases


@lru_cache(maxsize=1)
def _registry() -> tuple[dict[str, HardwareSpec], dict[str, str]]:
    ctx = S.Ctx(str(_REGISTRY_FILE))
    raw = S.mapping(S.read_yaml(_REGISTRY_FILE), ctx)
    specs: dict[str, HardwareSpec] = {}
    index: dict[str, str] = {}
    for name, entry in raw.items():
        spec, aliases = _spec_from_mapping(entry, ctx.child(name), name)
        specs[name] = spec
        for alias in (name, *aliases):
            key = alias.strip().lower()
            if index.get(key, name) != name:
                raise ctx.child(name).error(f"alias {alias!r} already names {index[key]!r}")
            index[key] = name
    return specs, index


def find_hardware(name: str) -> HardwareSpec | None:
    """The registered GPU for a name or alias (case-insensitive), or None."""
    specs, index = _registry()
    key = name.strip().lower()
    return specs[index[key]] if key in index else None


def load_hardware_file(path: str | os.PathLike[str]) -> HardwareSpec:
    """Read a hardware spec YAML: every HardwareSpec field, ``sources`` included."""
    spec, _ = _spec_from_mapping(S.read_yaml(path), S.Ctx(str(path)), None)
    return spec


def get_hardware(name_or_path: str | os.PathLike[str] | HardwareSpec) -> HardwareSpec:
    """A registered GPU by name or alias (a100, h100, h200-sxm, ...), or a hardware YAML by path."""
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    text = os.fspath(name_or_path)
    return S.lookup(
        text,
        _registry(),
        load_hardware_file,
        "hardware",
        lambda: (
            f"unknown hardware {text!r}: registered GPUs are "
            f"{', '.join(available_hardware())} (aliases accepted, case-insensitive)"
        ),
    )


def available_hardware() -> list[str]:
    """Registered GPU names (aliases not listed)."""
    return sorted(_registry()[0])


def hardware_aliases(name: str) -> list[str]:
    return S.aliases_of(get_hardware(name).name, _registry()[1])
