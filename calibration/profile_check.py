"""Every fitted term of every committed profile, recomputed, against its threshold.

A committed profile states its held-out errors (its ``validation`` block and notes; the tables of
docs/cost-model.md quote them). ``check_profiles`` recomputes each figure from the data behind it,
never from the YAML: the public tables in ../shared/data for ``a100-vidur`` and ``h100-public``
(``fit_public``), the committed samples in ``calibration/measured/`` for each measured profile
(``miss_plots.measured_reports``). Per term: MAPE and max APE on the random split (20 % of the
shapes), on the extrapolation split (fit small shapes, test large ones) and, for constants checked
on a table they were not fitted on, on that transfer; the threshold (5 %, decode attention 10 %)
and PASS only when every reported MAPE is under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .miss_plots import MEASURED_PROFILES, measured_reports
from .validate import ErrorStats, TermReport

# Held-out MAPE a term must stay under: 5 %, decode attention 10 % (the calibration targets).
THRESHOLDS = {"decode_attn": 0.10}
DEFAULT_THRESHOLD = 0.05
SPLITS = ("random", "extrapolation", "transfer")
# The terms a measured profile fits (lm_head: the GEMM constants on the LM head, a transfer).
MEASURED_TERMS = ("gemm", "elementwise", "linear", "prefill_attn", "decode_attn", "h2d", "d2h")


def threshold(term: str) -> float:
    return THRESHOLDS.get(term, DEFAULT_THRESHOLD)


@dataclass(frozen=True, slots=True)
class TermCheck:
    """One fitted term of one committed profile: its recomputed held-out errors per split."""

    profile: str
    term: str
    source: str  # the table or samples it was fitted and scored on
    random: ErrorStats | None
    extrapolation: ErrorStats | None
    transfer: ErrorStats | None = None
    note: str = ""  # why a term has no figures (not fitted on this GPU)

    @property
    def threshold(self) -> float:
        return threshold(self.term)

    def stats(self) -> tuple[tuple[str, ErrorStats], ...]:
        return tuple(
            (name, s)
            for name, s in zip(SPLITS, (self.random, self.extrapolation, self.transfer))
            if s is not None
        )

    @property
    def max_ape(self) -> float | None:
        st = self.stats()
        return max(s.max_ape for _, s in st) if st else None

    @property
    def over(self) -> tuple[str, ...]:
        """The splits whose MAPE is at or over the threshold."""
        return tuple(name for name, s in self.stats() if s.mape >= self.threshold)

    @property
    def verdict(self) -> str:
        if not self.stats():
            return "not fitted"
        return "over: " + ", ".join(self.over) if self.over else "PASS"


def _stats(reports: Iterable[TermReport], source: str, term: str, split: str):
    for r in reports:
        if r.source == source and r.term == term and r.split.name == split:
            return r.test
    return None


def _check(profile: str, reports: Sequence[TermReport], source: str, term: str) -> TermCheck:
    r, e, t = (_stats(reports, source, term, s) for s in SPLITS)
    return TermCheck(profile, term, source, r, e, t)


def public_checks(res) -> list[TermCheck]:
    """The terms of the public profiles ``fit_public`` built (a ``PublicFitResult``)."""
    from .public_profiles import PROFILE_SPECS

    built = {p.name for p in res.profiles}
    reports = res.reports()
    out: list[TermCheck] = []
    for spec in PROFILE_SPECS:
        if spec.name not in built:
            continue
        for term in ("gemm", "elementwise", "linear"):
            out.append(_check(spec.name, reports, spec.linear, term))
        out.append(_check(spec.name, reports, spec.prefill_attn, "prefill_attn"))
        if spec.decode_attn:
            out.append(_check(spec.name, reports, spec.decode_attn, "decode_attn"))
        else:
            out.append(
                TermCheck(
                    spec.name,
                    "decode_attn",
                    "a100-vidur-flashinfer",
                    None,
                    None,
                    note="the A100 fit, its KV rate scaled by HBM",
                )
            )
        # Constants checked on a table they were not fitted on (in the profile's validation).
        for term in ("lm_head", "layer"):
            for src in (spec.prefill_attn, spec.linear):
                c = _check(spec.name, reports, src, term)
                if c.stats():
                    out.append(c)
                    break
    return out


def measured_checks(names: Sequence[str] = MEASURED_PROFILES) -> list[TermCheck]:
    """The terms of each measured profile, refitted from its committed samples."""
    out: list[TermCheck] = []
    for name in names:
        reports = measured_reports(name)
        source = f"measured-{name}"
        out += [_check(name, reports, source, term) for term in (*MEASURED_TERMS, "lm_head")]
    return out


def check_profiles(public=None, measured: Sequence[str] = MEASURED_PROFILES) -> list[TermCheck]:
    """Public profiles (when ``public``, a ``PublicFitResult``, is given), then measured ones."""
    return (public_checks(public) if public is not None else []) + measured_checks(measured)


# --- printing -------------------------------------------------------------------------------------------
def _cell(s: ErrorStats | None) -> str:
    return "-" if s is None else f"{s.mape:.1%} ({s.max_ape:.1%})"


def format_checks(checks: Sequence[TermCheck]) -> str:
    """Fixed width: profile, term, source, MAPE (max APE) per split, worst APE, threshold, verdict."""
    head = (
        f"{'profile':<23} {'term':<13} {'source':<32} {'random (max)':>15} "
        f"{'extrap. (max)':>15} {'transfer (max)':>15} {'max APE':>8}  threshold  verdict"
    )
    lines = [head, "-" * len(head)]
    for c in checks:
        worst = "-" if c.max_ape is None else f"{c.max_ape:.1%}"
        verdict = c.verdict + (f" ({c.note})" if c.note else "")
        lines.append(
            f"{c.profile:<23} {c.term:<13} {c.source:<32} {_cell(c.random):>15} "
            f"{_cell(c.extrapolation):>15} {_cell(c.transfer):>15} {worst:>8}  "
            f"{'<' + format(c.threshold, '.0%'):<9}  {verdict}"
        )
    return "\n".join(lines)


def markdown_checks(checks: Sequence[TermCheck]) -> str:
    """The same as a Markdown table (docs/cost-model.md carries it; a test compares the two)."""
    lines = [
        "| profile | term | source | random: MAPE (max) | extrapolation: MAPE (max) "
        "| transfer: MAPE (max) | threshold | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        verdict = c.verdict if c.verdict != "PASS" else "**PASS**"
        if c.note:
            verdict += f" ({c.note})"
        lines.append(
            f"| {c.profile} | {c.term} | {c.source} | {_cell(c.random)} | "
            f"{_cell(c.extrapolation)} | {_cell(c.transfer)} | < {c.threshold:.0%} | {verdict} |"
        )
    return "\n".join(lines)
