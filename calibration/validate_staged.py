"""Price each transfer ``calibration.measure_staged`` timed with ``sim.pricing.HostStagedLink`` and
compare: the total, the last layer's ready time and the first's, measured against predicted.

    python -m calibration.validate_staged FILE.csv PROFILE [--model NAME] [--out FILE.md]

PROFILE is a committed profile's name or a profile YAML (``costmodels.load_profile``). Each case is
priced as the simulator prices it: ``HostStagedLink(layerwise).ready_s`` through a ``Pricer`` on
the profile's ``CostModel``, with the page of all layers the CSV's page of one layer times the
layers, and ``per_layer_copies`` set for the variants that issue one call per layer. Needs no GPU.

Two diagnostic prices go beside it (``staged_ready_s``, the same recurrence on ``CostModel.copy_s``):

- ``as issued``: the copy calls the variant issued (a page of one layer a call, or one call per
  layer), priced in the same recurrence on ``CostModel.copy_s``; the link prices the same calls
  (``Pricer.layer_copy_s``), so the two agree: a check of the link's call count.
- ``duplex``: as issued, with every layer-by-layer copy moving its bytes at the profile's duplex
  share of its rate (``costmodels.cost.duplex_share``): the two directions overlap on one GPU, and
  on one PCIe link they share the duplex rate. Every copy is slowed, so it is a bound, not a fit.
  Copies of the whole transfer (``layerwise: false``) do not overlap and are priced as issued.

The error is (predicted - measured) / measured, so a negative error is an optimistic price.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodels import CostModel, ModelSpec, Profile, get_model, load_profile
from costmodels.cost import duplex_share
from sim.pricing import HostStagedLink, Pricer, staged_layers_s


@dataclass(frozen=True, slots=True)
class MeasuredCase:
    variant: str
    layerwise: bool
    per_layer_copies: bool
    threads: int
    tokens: int
    layers: int
    layer_page_bytes: int
    pages: int  # per layer
    calls_per_layer: int
    ready_median_s: np.ndarray  # per layer
    d2h_end_median_s: np.ndarray  # per layer
    total_min_s: float
    total_median_s: float
    host_issue_median_s: float
    reps: int
    model: str
    device_name: str

    @property
    def layer_bytes(self) -> int:
        return self.pages * self.layer_page_bytes


def read_staged_csv(path: str | Path) -> list[MeasuredCase]:
    """The cases of a ``measure_staged`` CSV, in file order."""
    groups: dict[tuple[str, int], list[dict[str, str]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            groups.setdefault((row["variant"], int(row["tokens"])), []).append(row)
    out = []
    for (variant, tokens), rows in groups.items():
        rows.sort(key=lambda r: int(r["layer"]))
        r0 = rows[0]
        layers = int(r0["layers"])
        if [int(r["layer"]) for r in rows] != list(range(layers)):
            raise ValueError(f"{path}: {variant} at {tokens} tokens lacks layers of {layers}")
        out.append(
            MeasuredCase(
                variant=variant,
                layerwise=bool(int(r0["layerwise"])),
                per_layer_copies=bool(int(r0["per_layer_copies"])),
                threads=int(r0["threads"]),
                tokens=tokens,
                layers=layers,
                layer_page_bytes=int(r0["layer_page_bytes"]),
                pages=int(r0["pages_per_layer"]),
                calls_per_layer=int(r0["calls_per_layer"]),
                ready_median_s=np.array([float(r["ready_median_s"]) for r in rows]),
                d2h_end_median_s=np.array([float(r["d2h_end_median_s"]) for r in rows]),
                total_min_s=float(r0["total_min_s"]),
                total_median_s=float(r0["total_median_s"]),
                host_issue_median_s=float(r0["host_issue_median_s"]),
                reps=int(r0["reps"]),
                model=r0["model"],
                device_name=r0.get("device_name", ""),
            )
        )
    return out


def link_ready_s(cost: CostModel, c: MeasuredCase) -> np.ndarray:
    """The simulator's price: ``HostStagedLink.ready_s`` through a ``Pricer``."""
    pricer = Pricer(
        cost,
        page_bytes=c.layer_page_bytes * c.layers,
        pipelining=True,
        per_layer_copies=c.per_layer_copies,
    )
    return HostStagedLink(c.layerwise).ready_s(pricer, c.layer_bytes * c.layers)


def staged_ready_s(
    cost: CostModel,
    layers: int,
    layer_bytes: int,
    calls_per_layer: int,
    layerwise: bool,
    share: float = 1.0,
) -> np.ndarray:
    """Each layer's ready time for these calls: ``HostStagedLink``'s recurrence on
    ``CostModel.copy_s``, each layer-by-layer copy's bytes at ``share`` of the rate."""
    if not layerwise:
        total = layers * layer_bytes
        calls = layers * calls_per_layer
        return np.full(layers, cost.copy_s("d2h", total, calls) + cost.copy_s("h2d", total, calls))
    moved = layer_bytes / min(1.0, share)
    return staged_layers_s(
        cost.copy_s("d2h", moved, calls_per_layer),
        cost.copy_s("h2d", moved, calls_per_layer),
        layers,
    )


@dataclass(frozen=True, slots=True)
class StagedPoint:
    case: MeasuredCase
    link_s: np.ndarray  # HostStagedLink.ready_s, per layer
    as_issued_s: np.ndarray
    duplex_s: np.ndarray

    @property
    def measured_total_s(self) -> float:
        return self.case.total_median_s

    @property
    def predicted_total_s(self) -> float:
        return float(self.link_s.max())

    @property
    def total_error(self) -> float:
        return _err(self.predicted_total_s, self.measured_total_s)

    @property
    def last_error(self) -> float:
        return _err(float(self.link_s[-1]), float(self.case.ready_median_s[-1]))

    @property
    def first_error(self) -> float:
        return _err(float(self.link_s[0]), float(self.case.ready_median_s[0]))

    @property
    def as_issued_error(self) -> float:
        return _err(float(self.as_issued_s.max()), self.measured_total_s)

    @property
    def duplex_error(self) -> float:
        return _err(float(self.duplex_s.max()), self.measured_total_s)


def _err(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def compare(
    cases: Sequence[MeasuredCase], profile: Profile | str, model: ModelSpec | str | None = None
) -> list[StagedPoint]:
    """Price every measured case with the profile (the model: the CSV's unless given)."""
    prof = load_profile(profile)
    share = duplex_share(prof)
    costs: dict[str, CostModel] = {}
    points = []
    for c in cases:
        spec = get_model(model if model is not None else c.model)
        if spec.num_layers != c.layers:
            raise ValueError(f"{spec.name} has {spec.num_layers} layers, the CSV {c.layers}")
        cost = costs.setdefault(spec.name, CostModel(spec, prof))
        args = (cost, c.layers, c.layer_bytes, c.calls_per_layer, c.layerwise)
        points.append(
            StagedPoint(
                c, link_ready_s(cost, c), staged_ready_s(*args), staged_ready_s(*args, share)
            )
        )
    return points


def _us(s: float) -> str:
    return f"{s * 1e6:,.1f}"


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def format_markdown(points: Sequence[StagedPoint], profile_name: str = "") -> str:
    """The comparison table, the diagnostic one, and each variant's error range."""
    dev = next((p.case.device_name for p in points if p.case.device_name), "")
    lines = [
        f"KV staged through host memory: measured{' on ' + dev if dev else ''} against "
        f"`HostStagedLink.ready_s`{' with ' + profile_name if profile_name else ''} "
        "(medians over repetitions; error = (predicted - measured) / measured)",
        "",
        "| tokens | variant | total measured, us (min) | total predicted, us | error "
        "| last layer measured, us | last layer predicted, us | error "
        "| first layer measured, us | first layer predicted, us |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        c = p.case
        lines.append(
            f"| {c.tokens} | {c.variant} | {_us(c.total_median_s)} ({_us(c.total_min_s)}) "
            f"| {_us(p.predicted_total_s)} | {_pct(p.total_error)} "
            f"| {_us(c.ready_median_s[-1])} | {_us(p.link_s[-1])} | {_pct(p.last_error)} "
            f"| {_us(c.ready_median_s[0])} | {_us(p.link_s[0])} |"
        )
    lines += [
        "",
        "Diagnostics: calls per layer and direction, the host's issue time, the last layer's D2H "
        "end, and the total priced with the calls as issued, and as issued at the duplex share.",
        "",
        "| tokens | variant | calls/layer | host issue, us | last D2H end, us "
        "| as issued, us | error | duplex, us | error |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        c = p.case
        lines.append(
            f"| {c.tokens} | {c.variant} | {c.calls_per_layer} | {_us(c.host_issue_median_s)} "
            f"| {_us(c.d2h_end_median_s[-1])} | {_us(p.as_issued_s.max())} "
            f"| {_pct(p.as_issued_error)} | {_us(p.duplex_s.max())} | {_pct(p.duplex_error)} |"
        )
    lines += ["", "Total error by variant (HostStagedLink): min .. max, over the sizes", ""]
    for v in dict.fromkeys(p.case.variant for p in points):
        errs = [p.total_error for p in points if p.case.variant == v]
        lines.append(f"- {v}: {_pct(min(errs))} .. {_pct(max(errs))} ({len(errs)} sizes)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m calibration.validate_staged",
        description="Compare measured host-staged KV transfers with HostStagedLink's price.",
    )
    ap.add_argument("csv", help="a CSV written by calibration.measure_staged")
    ap.add_argument("profile", help="a committed profile's name or a profile YAML")
    ap.add_argument("--model", default=None, help="the model (default: the CSV's)")
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    args = ap.parse_args(argv)
    text = format_markdown(
        compare(read_staged_csv(args.csv), args.profile, args.model), Path(args.profile).stem
    )
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
