"""`kvsim report DIR`: one self-contained HTML page of a results folder."""

from __future__ import annotations

import argparse

REPORT_FILE = "report.html"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page of a results folder",
        description="Write one HTML page of a results folder of kvsim run: the pass/FAIL of each "
        "policy against the targets, every plot of plots/ (PNG and SVG embedded, so the "
        "page needs no other file and no network; PDF linked), summary.csv as a table and the "
        "experiment config. The page is written to a temporary file first and renamed "
        "into place.",
    )
    p.add_argument("dir", help="a results folder written by kvsim run")
    p.add_argument("--out", metavar="FILE", help=f"the page to write (default: DIR/{REPORT_FILE})")
    return p


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.html_report import figure_groups, render_report

    folder = Path(args.dir)
    summary, config_text, plots = read_results_folder(folder)
    names = summary["name"].dropna().unique() if "name" in summary.columns else []
    title = str(names[0]) if len(names) == 1 else folder.resolve().name
    figures = len(figure_groups([name for name, _ in plots]))
    out = Path(args.out) if args.out is not None else folder / REPORT_FILE
    page = render_report(
        summary,
        config_text,
        plots,
        title=title,
        source=str(folder),
        plots_href=plots_href(folder, out),
    )
    write_atomically(out, page)
    print(f"report: {out} ({len(summary)} grid points, {figures} plots)")
    return 0


def plots_href(folder, out) -> str:
    """The path from the page ``out`` to the results folder's plots/ (where its PDFs are linked),
    with forward slashes; absolute where there is no relative one."""
    import os
    from pathlib import Path

    from experiments.results import PLOTS_DIR

    plots = Path(folder).resolve() / PLOTS_DIR
    try:
        return Path(os.path.relpath(plots, Path(out).resolve().parent)).as_posix()
    except ValueError:  # another drive
        return plots.as_uri()


def read_results_folder(folder):
    """(summary table, config text, [(plot file name, bytes)]) of a results folder; ValueError
    naming the first missing file when ``folder`` is not one. The plots are the figure files of
    plots/: PNG, SVG (embedded in the page) and PDF (linked)."""
    import pandas as pd

    from experiments.html_report import FIGURE_TYPES
    from experiments.results import CONFIG_FILE, PLOTS_DIR, SUMMARY_FILE

    for name in (SUMMARY_FILE, CONFIG_FILE):
        if not (folder / name).is_file():
            raise ValueError(
                f"{folder / name}: no such file (is {folder} a results folder of kvsim run?)"
            )
    if not (folder / PLOTS_DIR).is_dir():
        raise ValueError(
            f"{folder / PLOTS_DIR}: no such folder (kvsim plot {folder} draws the figures again)"
        )
    summary = pd.read_csv(folder / SUMMARY_FILE)
    config_text = (folder / CONFIG_FILE).read_text(encoding="utf-8")
    plots = [
        (p.name, p.read_bytes())
        for p in sorted((folder / PLOTS_DIR).iterdir())
        if p.is_file() and p.suffix.lower() in FIGURE_TYPES
    ]
    return summary, config_text, plots


def write_atomically(out, text: str) -> None:
    """Write ``text`` to a temporary file beside ``out``, then rename it over ``out``."""
    import os
    import tempfile

    if out.is_dir():
        raise ValueError(f"{out}: is a folder; --out takes the file name of the page")
    out.parent.mkdir(parents=True, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
