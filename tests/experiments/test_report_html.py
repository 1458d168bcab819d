"""`kvsim report DIR`: one self-contained HTML page of a results folder.

The page is read back with html.parser (tables by id, images by data-file, the config <pre>); the
test marked ``browser`` opens it in headless Chromium through Playwright and must fail, not skip,
when either is missing (see _launch_chromium for what it looks for).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import struct
from html.parser import HTMLParser

import pandas as pd
import pytest
from test_exp_plot_cmd import TINY

from experiments.cli import main
from experiments.commands.report import write_atomically
from experiments.html_report import targets_html
from sim.metrics import JAIN_TARGET, REPREFILL_TARGET


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One tiny real run (2 policies x 2 capacities), shared and never modified by the tests."""
    folder = tmp_path_factory.mktemp("report")
    cfg = folder / "tiny.yaml"
    cfg.write_text(TINY)
    out = folder / "results"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def own_results(results, tmp_path):
    """A copy of the results folder that a test may edit."""
    return shutil.copytree(results, tmp_path / "results")


class Page(HTMLParser):
    """What the tests look at: tables (by id) as rows of cell texts, <img> attributes, the text of
    pre#config, and every tag name seen."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[dict[str, str]] = []
        self.config = ""
        self.tags: set[str] = set()
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_config = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "table":
            self._table = attrs.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs)
        elif tag == "pre" and attrs.get("id") == "config":
            self._in_config = True

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "pre":
            self._in_config = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_config:
            self.config += data


def _report(folder, *extra) -> tuple[int, Page | None]:
    rc = main(["report", str(folder), *extra])
    out = folder / "report.html" if not extra else extra[extra.index("--out") + 1]
    return rc, Page(open(out, encoding="utf-8").read()) if rc == 0 else None


def _pngs(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "plots").glob("*.png"))}


def test_every_plot_is_embedded_byte_for_byte(own_results, capsys):
    rc, page = _report(own_results)
    assert rc == 0 and "report.html" in capsys.readouterr().out
    pngs = _pngs(own_results)
    assert len(pngs) >= 4
    assert sorted(img["data-file"] for img in page.images) == sorted(pngs)
    for img in page.images:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix)
        assert base64.b64decode(img["src"][len(prefix) :], validate=True) == pngs[img["data-file"]]
    # self-contained: nothing that could load another file or run code
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}


def test_summary_table_holds_every_row_and_column(own_results):
    rc, page = _report(own_results)
    assert rc == 0
    summary = pd.read_csv(own_results / "summary.csv")
    header, *rows = page.tables["summary"]
    assert header == list(summary.columns)
    assert len(rows) == len(summary) == 4
    col = header.index("policy")
    assert [r[col] for r in rows] == list(summary["policy"])
    assert {r[col] for r in rows} == {"lru", "fifo"}
    g = header.index("gpu_kv_gb")
    assert [float(r[g]) for r in rows] == list(summary["gpu_kv_gb"])


def test_config_text_appears_verbatim(own_results):
    rc, page = _report(own_results)
    assert rc == 0
    text = (own_results / "config.resolved.yaml").read_text(encoding="utf-8")
    assert "policies" in text and page.config == text


def test_targets_table_agrees_with_the_pass_columns(own_results):
    rc, page = _report(own_results)
    assert rc == 0
    summary = pd.read_csv(own_results / "summary.csv")
    passes = [c for c in summary.columns if c.startswith("pass_")]
    header, *rows = page.tables["targets"]
    assert len(header) == 2 + len(passes) + 1 and header[-1] == "all targets"
    assert f"jain_service \u2265 {JAIN_TARGET:g}" in header  # thresholds from sim.metrics
    assert f"reprefill_rate < {REPREFILL_TARGET:g}" in header
    assert [r[0] for r in rows] == list(summary["policy"].unique())
    for row in rows:
        mine = summary[summary["policy"] == row[0]]
        assert row[1] == str(len(mine))
        for cell, col in zip(row[2:-1], passes):
            failed = int((~mine[col].astype(bool)).sum())
            assert cell == ("pass" if failed == 0 else f"FAIL ({failed} of {len(mine)})")
        assert row[-1] == ("pass" if mine[passes].astype(bool).all().all() else "FAIL")


def test_a_failing_target_shows_as_fail(own_results):
    summary = pd.read_csv(own_results / "summary.csv")
    passes = [c for c in summary.columns if c.startswith("pass_")]
    summary[passes] = True
    first_lru = summary.index[summary["policy"] == "lru"][0]
    summary.loc[first_lru, "pass_jain"] = False
    summary.to_csv(own_results / "summary.csv", index=False)
    rc, page = _report(own_results)
    assert rc == 0
    header, *rows = page.tables["targets"]
    by_policy = {r[0]: dict(zip(header, r)) for r in rows}
    jain = f"jain_service \u2265 {JAIN_TARGET:g}"
    assert by_policy["lru"][jain] == "FAIL (1 of 2)" and by_policy["lru"]["all targets"] == "FAIL"
    assert by_policy["fifo"][jain] == "pass" and by_policy["fifo"]["all targets"] == "pass"
    s_header, *s_rows = page.tables["summary"]
    assert [r[s_header.index("pass_jain")] for r in s_rows].count("FAIL") == 1


def test_text_from_the_folder_is_escaped(own_results):
    evil = "<script>alert('x')</script><b>&amp;"
    with open(own_results / "config.resolved.yaml", "a", encoding="utf-8") as f:
        f.write(f'note: "{evil}"\n')
    summary = pd.read_csv(own_results / "summary.csv")
    summary.loc[0, "policy"] = evil
    summary.to_csv(own_results / "summary.csv", index=False)
    (own_results / "plots" / 'a"b<c>.png').write_bytes(_pngs(own_results)["ttft_cdf.png"])
    rc, page = _report(own_results)
    assert rc == 0
    raw = (own_results / "report.html").read_text(encoding="utf-8")
    assert "<script>" not in raw and "<b>" not in raw and "&lt;script&gt;" in raw
    assert not page.tags & {"script", "b"}
    assert evil in page.config
    assert evil in [r[0] for r in page.tables["targets"][1:]]
    assert 'a"b<c>.png' in [img["data-file"] for img in page.images]


def test_out_option_and_atomic_write(own_results, tmp_path):
    out = tmp_path / "pages" / "tiny.html"
    rc, page = _report(own_results, "--out", str(out))
    assert rc == 0 and page.tables["summary"]
    assert not (own_results / "report.html").exists()
    assert os.listdir(out.parent) == ["tiny.html"]  # no temporary file left
    # a write that fails half-way leaves the previous page as it was, and no temporary file
    before = out.read_bytes()
    with pytest.raises(UnicodeEncodeError):
        write_atomically(out, "<p>half a page" + "\ud800")  # not encodable as UTF-8
    assert out.read_bytes() == before and os.listdir(out.parent) == ["tiny.html"]


@pytest.mark.parametrize("missing", ["summary.csv", "config.resolved.yaml", "plots"])
def test_an_incomplete_folder_exits_2_naming_the_missing_file(own_results, capsys, missing):
    path = own_results / missing
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert main(["report", str(own_results)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: no such" in err and "Traceback" not in err
    assert not (own_results / "report.html").exists()


def test_a_folder_that_is_not_results_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'summary.csv'}: no such file" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_targets_html_marks_missing_verdicts_and_keeps_policy_order():
    summary = pd.DataFrame(
        {
            "policy": ["b", "a", "b"],
            "pass_jain": [True, None, False],
            "pass_custom": [None, None, True],
        }
    )
    rows = Page(targets_html(summary)).tables["targets"]
    assert rows[0] == [
        "policy",
        "grid points",
        f"jain_service \u2265 {JAIN_TARGET:g}",
        "custom",
        "all targets",
    ]
    assert rows[1] == ["b", "2", "FAIL (1 of 2)", "pass", "FAIL"]
    assert rows[2] == ["a", "1", "n/a", "n/a", "n/a"]  # no verdict at all (an offline bound)


# ---------------------------------------------------------------------------------------------
# In a real browser

INSTALL = (
    "pip install playwright (in the dev extra), then either `python -m playwright install "
    "chromium` (downloads from cdn.playwright.dev) or `apt-get install chromium` (Debian); "
    "KVSIM_BROWSER=/path/to/chromium picks another binary"
)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _chromium_candidates(playwright) -> list[str]:
    """KVSIM_BROWSER if set (only that one); else Playwright's own download, then a system one."""
    if os.environ.get("KVSIM_BROWSER"):
        return [os.environ["KVSIM_BROWSER"]]
    found = []
    with contextlib.suppress(Exception):
        if os.path.exists(playwright.chromium.executable_path):
            found.append(playwright.chromium.executable_path)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            found.append(shutil.which(name))
    return found


@pytest.fixture(scope="module")
def chromium():
    """chromium() -> a started headless Chromium, shared by the module. Started on the first call,
    inside the test, so that a missing Playwright or browser fails the test (never skips it)."""
    started: dict[str, object] = {}
    with contextlib.ExitStack() as stack:

        def get():
            if "browser" not in started:
                started["browser"] = _launch_chromium(stack, started)
            return started["browser"]

        yield get


def _launch_chromium(stack: contextlib.ExitStack, started: dict):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the browser test needs playwright: {INSTALL}")
    if "playwright" not in started:
        started["playwright"] = stack.enter_context(sync_playwright())
    p = started["playwright"]
    candidates = _chromium_candidates(p)
    if not candidates:
        pytest.fail(f"no Chromium found for the browser test: {INSTALL}")
    errors = []
    for exe in candidates:
        try:
            b = p.chromium.launch(executable_path=exe, args=["--disable-dev-shm-usage"])
        except Exception as exc:  # try the next candidate; report them all
            errors.append(f"{exe}: {str(exc).splitlines()[0]}")
            continue
        stack.callback(b.close)
        return b
    pytest.fail(f"no Chromium would start ({'; '.join(errors)}): {INSTALL}")


def _open(browser, url: str):
    """Load ``url``; return (page, console errors and page errors, URLs requested)."""
    page = browser.new_page()
    problems, requested = [], []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console.{m.type}: {m.text}")
            if m.type in ("error", "assert")
            else None
        ),
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url[:80]}"))
    page.on("request", lambda r: requested.append(r.url))
    page.goto(url, wait_until="load")
    return page, problems, requested


_IMAGES = (
    "Array.from(document.images, i => ({file: i.dataset.file, complete: i.complete, "
    "w: i.naturalWidth, h: i.naturalHeight}))"
)


@pytest.mark.browser
def test_the_page_renders_in_headless_chromium(chromium, results, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(results), "--out", str(out)]) == 0
    page, problems, requested = _open(chromium(), out.as_uri())
    assert problems == []
    assert requested == [out.as_uri()]  # no other file, no network
    pngs = _pngs(results)
    images = page.evaluate(_IMAGES)
    assert sorted(i["file"] for i in images) == sorted(pngs)
    for i in images:  # decoded, at the PNG's own size
        assert i["complete"] and i["w"] > 0 and (i["w"], i["h"]) == _png_size(pngs[i["file"]])
    assert page.locator("#targets tbody tr").count() == 2
    assert page.locator("#summary tbody tr").count() == len(pd.read_csv(results / "summary.csv"))
    assert (
        page.locator("#config").inner_text().strip()
        == (results / "config.resolved.yaml").read_text(encoding="utf-8").strip()
    )
    page.close()


@pytest.mark.browser
def test_the_browser_checks_can_fail(chromium, tmp_path):
    """The same checks on a bad page: a corrupt image does not decode, a script error and a
    blocked fetch are reported (so the test above is not vacuous)."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; img-src data:; script-src 'unsafe-inline'\">"
        '<img data-file="x.png" src="data:image/png;base64,iVBORw0KGgoAAAA=">'
        '<img data-file="y.png" src="https://example.invalid/y.png">'
        "<script>undefined_function()</script>",
        encoding="utf-8",
    )
    page, problems, _ = _open(chromium(), bad.as_uri())
    assert any("undefined_function" in p for p in problems)
    assert any("Content Security Policy" in p or "y.png" in p for p in problems)
    assert {i["file"]: i["w"] for i in page.evaluate(_IMAGES)} == {"x.png": 0, "y.png": 0}
    page.close()


def test_the_console_table_names_every_grid_label_that_varies():
    from experiments.report import summary_table

    rows = [
        dict(policy="lru", gpu_kv_gb=1.0, engine=e, pipelining=p, cpu_kv_gb=0.0, seed=1)
        for e in ("kvsim", "vllm-v1")
        for p in (True, False)
    ]
    summary = pd.DataFrame(rows).assign(
        reprefill_rate=0.5, gpu_hit_rate=0.5, cpu_hit_rate=0.0, jain_service=1.0, ttft_p50_s=0.1
    )
    header = summary_table(summary).splitlines()[0].split()
    assert header[:4] == ["policy", "gpu_kv_gb", "engine", "pipelining"]
    assert "cpu_kv_gb" not in header and "seed" not in header  # constant: left out
