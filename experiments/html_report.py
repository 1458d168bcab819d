"""One self-contained HTML page for a results folder (the page behind `kvsim report DIR`).

Pure functions: they take what the folder holds (summary.csv as a table, the config text, the plot
files' bytes) and return HTML text; reading the folder and writing the page is the command's job
(``experiments.commands.report``). The page needs nothing else: plots are embedded as base64
``data:`` URIs, the style is inline, there is no JavaScript, and a Content-Security-Policy forbids
any fetch, so it opens the same offline, from a mail attachment or from a CI artifact.

A figure written as PDF (``kvsim run --format pdf``, or ``figures: {format: pdf}``) cannot be shown
in an ``<img>``: it is linked instead, by its path from the page to the results folder's plots/
(so that link works while the page stays beside the folder, as ``DIR/report.html`` does). A figure
written in several formats is shown once (PNG, else SVG) with its other files linked.

Every piece of text from the folder (column names, cell values, the YAML, file names) goes through
``html.escape``. The pass/FAIL judgements are the ``pass_*`` columns that ``kvsim run`` wrote
(``experiments.targets``; an empty cell, an offline policy's, is n/a); the thresholds shown are the
``targets`` of config.resolved.yaml (the defaults for a folder whose config has no ``targets`` key).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath

import pandas as pd
import yaml

from experiments.targets import DEFAULT_TARGETS, RULES, from_resolved, rule_text

Targets = Mapping[str, float | None] | None

# Embedded image types, by file suffix (lower case).
IMAGE_TYPES = {
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}

# Figures linked, not embedded (a browser shows no PDF in an <img>).
LINKED_TYPES = {".pdf": "application/pdf"}
# The figure files of plots/ the report shows (embedded or linked).
FIGURE_TYPES = {**IMAGE_TYPES, **LINKED_TYPES}
# Which of a figure's files is embedded, the first there is.
_EMBED_ORDER = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")


_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; position: sticky; top: 0; }
td.text { text-align: left; }
td.pass, td.fail, td.na { text-align: center; }
td.pass { background: #e6f4e6; color: #1b5e20; }
td.fail { background: #fde8e8; color: #b71c1c; font-weight: bold; }
td.na { color: #888; }
.scroll { overflow-x: auto; max-width: 100%; }
figure { display: inline-block; margin: 0 1em 1em 0; vertical-align: top; }
figure img { max-width: 640px; width: 100%; border: 1px solid #ddd; }
figcaption { font-family: monospace; font-size: 0.85em; }
figure.linked { border: 1px dashed #bbb; padding: 1em; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 0.8em; overflow-x: auto; }
.muted { color: #666; }
"""


def e(value: object) -> str:
    """Text for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


def data_uri(name: str, data: bytes) -> str:
    """``data:<type>;base64,...`` for an image file called ``name``."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in IMAGE_TYPES:
        raise ValueError(f"{name}: not an image type the report embeds ({', '.join(IMAGE_TYPES)})")
    return f"data:{IMAGE_TYPES[suffix]};base64,{base64.b64encode(data).decode('ascii')}"


def _missing(v: object) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v)) or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _cell_text(v: object) -> str:
    if _missing(v):
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _passed(v: object) -> bool | None:
    """A pass_* cell as True / False, or None when the cell is empty."""
    if _missing(v):
        return None
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "pass")
    return bool(v)


def _verdict_cell(ok: bool | None, text: str | None = None) -> str:
    if ok is None:
        return '<td class="na">n/a</td>'
    label = text if text is not None else ("pass" if ok else "FAIL")
    return f'<td class="{"pass" if ok else "fail"}">{e(label)}</td>'


def target_columns(summary: pd.DataFrame) -> list[str]:
    """The pass_* columns of ``summary``, in their order."""
    return [c for c in summary.columns if str(c).startswith("pass_")]


def target_header(column: str, targets: Targets = DEFAULT_TARGETS) -> str:
    """The rule of a pass_<target> column with its threshold in ``targets``; else its name."""
    name = column[len("pass_") :]
    bound = (targets or {}).get(name)
    return rule_text(name, bound) if name in RULES and bound is not None else name


def config_targets(config_text: str) -> Targets:
    """The targets of a results folder's config.resolved.yaml text (``targets.from_resolved``)."""
    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError as exc:
        raise ValueError(f"config.resolved.yaml: not YAML ({exc})") from None
    return from_resolved(data)


def targets_line(targets: Targets) -> str:
    """The targets the grid points were judged against, as one paragraph."""
    if targets is None:
        return '<p id="target-rules">Targets: none (the experiment says <code>targets: none</code>).</p>'
    rules = [rule_text(n, b) for n, b in targets.items() if n in RULES and b is not None]
    text = "; ".join(rules) if rules else "none set"
    return f'<p id="target-rules">Targets (<code>targets</code> of config.resolved.yaml): {e(text)}.</p>'


def summary_html(summary: pd.DataFrame) -> str:
    """Every row and column of summary.csv; pass_* cells as pass / FAIL."""
    if summary.empty:
        return '<p class="muted">summary.csv holds no grid points.</p>'
    passes = set(target_columns(summary))
    head = "".join(f"<th>{e(c)}</th>" for c in summary.columns)
    rows = []
    for record in summary.itertuples(index=False, name=None):
        cells = []
        for col, v in zip(summary.columns, record):
            if col in passes:
                cells.append(_verdict_cell(_passed(v)))
            else:
                cls = "text" if isinstance(v, str) else "num"
                cells.append(f'<td class="{cls}">{e(_cell_text(v))}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table id="summary"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def targets_html(summary: pd.DataFrame, targets: Targets = DEFAULT_TARGETS) -> str:
    """One row per policy (first-seen order), one column per target (headed by its rule in
    ``targets``): pass when every grid point of the policy passes it, else FAIL with how many
    points failed, n/a when no point has a verdict (an offline policy); then all targets
    together."""
    cols = target_columns(summary)
    if summary.empty:
        return '<p class="muted">summary.csv holds no grid points.</p>'
    if "policy" not in summary.columns:
        raise ValueError("summary.csv has no policy column")
    if not cols:
        return '<p class="muted">summary.csv has no pass_* columns.</p>'
    head = (
        "<th>policy</th><th>grid points</th>"
        + "".join(f"<th>{e(target_header(c, targets))}</th>" for c in cols)
        + "<th>all targets</th>"
    )
    rows = []
    for policy, group in summary.groupby("policy", sort=False, dropna=False):
        cells, all_ok, judged = [], True, False
        for col in cols:
            verdicts = [p for p in map(_passed, group[col]) if p is not None]
            if not verdicts:
                cells.append(_verdict_cell(None))
                continue
            failed = verdicts.count(False)
            all_ok, judged = all_ok and not failed, True
            cells.append(
                _verdict_cell(
                    not failed, "pass" if not failed else f"FAIL ({failed} of {len(verdicts)})"
                )
            )
        rows.append(
            f'<tr><td class="text">{e(_cell_text(policy))}</td><td>{len(group)}</td>'
            f"{''.join(cells)}{_verdict_cell(all_ok if judged else None)}</tr>"
        )
    return (
        f'<div class="scroll"><table id="targets"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def figure_groups(names: Sequence[str]) -> list[list[str]]:
    """The figure files of ``names`` grouped by figure (their name without the suffix), in the
    order first seen; each group's files in ``_EMBED_ORDER``, then the linked ones."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if PurePath(name).suffix.lower() in FIGURE_TYPES:
            groups.setdefault(PurePath(name).stem, []).append(name)
    order = [*_EMBED_ORDER, *LINKED_TYPES]
    return [
        sorted(files, key=lambda n: order.index(PurePath(n).suffix.lower()))
        for files in groups.values()
    ]


def plots_html(plots: Sequence[tuple[str, bytes]], href: str = "plots") -> str:
    """Each figure of (file name, bytes): a PNG or SVG embedded with its name as caption, the
    figure's other files (a PDF) linked at ``href``/name, the path from the page to plots/. A
    figure with no file to embed (PDF only) is a link."""
    if not plots:
        return '<p class="muted">plots/ holds no figures.</p>'
    data = dict(plots)
    figures = []
    for files in figure_groups(list(data)):
        shown = files[0] if PurePath(files[0]).suffix.lower() in IMAGE_TYPES else None
        links = [
            f'<a href="{e(_join(href, n))}" data-file="{e(n)}">{e(n)}</a>'
            for n in files
            if n != shown
        ]
        if shown is None:
            figures.append(
                f'<figure class="linked">{" ".join(links)}<figcaption>a PDF: not embedded, '
                f"opened from the results folder</figcaption></figure>"
            )
            continue
        also = f" (also {', '.join(links)})" if links else ""
        figures.append(
            f'<figure><img src="{data_uri(shown, data[shown])}" alt="{e(shown)}" '
            f'data-file="{e(shown)}"><figcaption>{e(shown)}{also}</figcaption></figure>'
        )
    return f'<div id="plots">{"".join(figures)}</div>'


def _join(href: str, name: str) -> str:
    from urllib.parse import quote

    return quote(f"{href.rstrip('/')}/{name}" if href else name, safe="/:")


def config_html(config_text: str) -> str:
    return f'<pre id="config">{e(config_text)}</pre>'


def render_report(
    summary: pd.DataFrame,
    config_text: str,
    plots: Sequence[tuple[str, bytes]],
    *,
    title: str,
    source: str = "",
    plots_href: str = "plots",
) -> str:
    """The whole page: targets per policy, plots, the summary table and the config.
    ``plots_href``: the path from the page to the results folder's plots/ (PDFs are linked)."""
    targets = config_targets(config_text)
    n_policies = summary["policy"].nunique() if "policy" in summary.columns else 0
    n_plots = len(figure_groups([name for name, _ in plots]))
    about = f"{len(summary)} grid points, {n_policies} policies, {n_plots} plots"
    if source:
        about = f"{e(source)}: {about}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{e(_CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} - kvsim report</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{e(title)}</h1>
<p class="muted">{about}</p>
<h2>Targets per policy</h2>
{targets_line(targets)}
<p class="muted">pass: every grid point of the policy meets the target (pass_* columns of
summary.csv); n/a: an offline bound (belady, cost-belady), which reads the future and is not judged.
</p>
{targets_html(summary, targets)}
<h2>Plots</h2>
{plots_html(plots, plots_href)}
<h2>Summary (summary.csv)</h2>
{summary_html(summary)}
<h2>Experiment config (config.resolved.yaml)</h2>
{config_html(config_text)}
</body>
</html>
"""
