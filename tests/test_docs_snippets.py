"""The README and the guides in docs/ stay runnable: their YAML, their commands and their links.

* Every ```yaml block is an experiment, or a fragment of one merged onto the quickstart's config,
  validated by ``experiments.schema``; a model spec or a cost-model profile, validated by its own
  loader; anything else fails, so a YAML block of a new kind must be added here on purpose.
* Every ``kvsim ...`` line of a ```bash / ```sh / ```console block is accepted by the command
  line's own parser (parsed, never run), and every repository path it reads exists.
* Every relative link (and ``<img src>``) between these pages resolves, ``#anchors`` included.

Snippets that read ``../shared/data`` skip, with the reason, when it is not beside the checkout.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from costmodels.models import load_model_file
from costmodels.profile import read_profile_file
from experiments.cli import build_parser
from experiments.schema import Experiment, parse_experiment, read_yaml, resolve_config

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Linked from the README before it is written (the engine's parts, by the engine's owner); once the
# file exists its links and snippets are checked like every other page's.
NOT_YET_WRITTEN = {ROOT / "docs" / "architecture.md"}

FENCE = re.compile(
    r"^(?P<fence>`{3,})(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# Sections of an experiment that a fragment merges key by key; any other key replaces the quickstart's.
SECTIONS = ("memory", "engine", "executor")
# Options whose value is a file or folder a command writes, so it need not exist.
OUTPUT_OPTIONS = {"--out", "--timeline", "--params-out", "--plots"}
COMMAND_SEPARATORS = {"&&", "||", ";", "|"}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def code_blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line of the opening fence) of every fenced block."""
    return [
        (m["lang"].strip().lower(), m["body"], text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


# A block right below this comment is run, not only parsed, by the test it names (the README's
# walkthrough of one's own trace: that test makes its files, which are not in the repository).
RUN_BY = re.compile(r"<!-- run by (?P<test>tests/[\w/]+\.py) -->")


def run_by(text: str, line: int) -> str | None:
    """The test named by a ``<!-- run by tests/....py -->`` line right above the fence at ``line``."""
    above = text.splitlines()[line - 2].strip() if line >= 2 else ""
    m = RUN_BY.fullmatch(above)
    return m["test"] if m else None


def _snippets(langs: set[str]) -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, body, line in code_blocks(text):
            if lang in langs and run_by(text, line) is None:
                out.append((f"{_rel(page)}:{line}", body))
    return out


def _needs_shared_data(text: str) -> None:
    if "../shared/" in text and not SHARED_DATA.is_dir():
        pytest.skip(f"reads ../shared/data, which is not beside the checkout ({SHARED_DATA})")


# ---------------------------------------------------------------------------------------------
# YAML


def yaml_kind(data: Any) -> str:
    """What a YAML block is: experiment, fragment (of one), model (spec) or profile."""
    if isinstance(data, dict) and data:
        keys = set(data)
        if keys <= set(Experiment.model_fields):
            required = {k for k, f in Experiment.model_fields.items() if f.is_required()}
            return "experiment" if required <= keys else "fragment"
        if "num_layers" in keys and "hidden_size" in keys:
            return "model"
        if "format_version" in keys:
            return "profile"
    raise AssertionError(
        "neither an experiment nor a fragment of one (unknown keys: "
        f"{sorted(set(data) - set(Experiment.model_fields)) if isinstance(data, dict) else data!r}"
        "), nor a model spec, nor a cost-model profile"
    )


def merged_onto_quickstart(fragment: dict) -> dict:
    base = read_yaml(QUICKSTART)
    for key, value in fragment.items():
        if key in SECTIONS and isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def check_yaml(body: str, where: str, tmp_path: Path) -> str:
    """Validate one YAML block; return its kind. Raises ConfigError / ValueError / AssertionError."""
    path = tmp_path / "snippet.yaml"
    path.write_text(body, encoding="utf-8")
    data = read_yaml(path)  # duplicate keys and syntax errors are ConfigErrors
    kind = yaml_kind(data)
    if kind == "experiment":
        parse_experiment(data, source=where, base_dir=ROOT)
    elif kind == "fragment":
        parse_experiment(merged_onto_quickstart(data), source=where, base_dir=ROOT)
    elif kind == "model":
        load_model_file(path)
    else:
        read_profile_file(path)
    return kind


YAML_SNIPPETS = _snippets({"yaml", "yml"})


@pytest.mark.parametrize(("where", "body"), YAML_SNIPPETS, ids=[w for w, _ in YAML_SNIPPETS])
def test_yaml_snippet_validates(where: str, body: str, tmp_path: Path) -> None:
    _needs_shared_data(body)
    check_yaml(body, where, tmp_path)


# ---------------------------------------------------------------------------------------------
# Commands


def kvsim_commands(body: str, lang: str = "bash") -> list[list[str]]:
    """The argv (after ``kvsim``) of every kvsim command in a shell block: continuation lines
    joined, comments dropped, ``a && b`` split, ``VAR=value`` prefixes skipped; in a console block
    only ``$ `` lines are commands."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip()
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        tokens = shlex.split(line, comments=True)
        command: list[str] = []
        for tok in [*tokens, "&&"]:
            if tok not in COMMAND_SEPARATORS:
                command.append(tok)
                continue
            while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                command.pop(0)
            if command and command[0] == "kvsim":
                out.append(command[1:])
            command = []
    return out


@lru_cache(maxsize=1)
def _parser():
    return build_parser()


def check_command(argv: list[str]) -> None:
    """The parser accepts ``kvsim ARGV``, and every repository path it reads exists."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ns = _parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(
            f"kvsim {shlex.join(argv)}: rejected: {err.getvalue().strip()}"
        ) from exc
    config = getattr(ns, "config", None)
    if isinstance(config, str):
        resolve_config(config)  # a file, or a bundled experiment's name; ConfigError names it
    for prev, tok in zip(["", *argv], argv):
        if tok.startswith("-") or prev in OUTPUT_OPTIONS or "/" not in tok:
            continue
        if tok.startswith("../shared/"):
            _needs_shared_data(tok)
            assert (ROOT / tok).exists(), f"kvsim {shlex.join(argv)}: no such file: {tok}"
        elif not tok.startswith(("/", "~", "..")):
            assert (ROOT / tok).exists(), (
                f"kvsim {shlex.join(argv)}: no such file in the repo: {tok}"
            )


COMMANDS = [
    (f"{where} kvsim {shlex.join(argv)}", argv)
    for page in PAGES
    for text in [page.read_text(encoding="utf-8")]
    for lang, body, line in code_blocks(text)
    if lang in SHELL_LANGS and run_by(text, line) is None
    for where in [f"{_rel(page)}:{line}"]
    for argv in kvsim_commands(body, lang)
]


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_kvsim_command_parses(where: str, argv: list[str]) -> None:
    check_command(argv)


def test_blocks_run_by_a_test_name_one_that_exists() -> None:
    named = {
        run_by(text, line)
        for page in PAGES
        for text in [page.read_text(encoding="utf-8")]
        for _, _, line in code_blocks(text)
    } - {None}
    assert named, "no page has a block run by a test (the README's walkthrough has)"
    for test in named:
        assert (ROOT / str(test)).is_file(), f"no such test: {test}"


# ---------------------------------------------------------------------------------------------
# Links

LINK = re.compile(r"\]\((?P<md>[^)\s]+)(?:\s+\"[^\"]*\")?\)|<img\b[^>]*\bsrc=\"(?P<img>[^\"]+)\"")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings (a repeated one gets -1, -2, ...)."""
    text = FENCE.sub("", text)
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))
    bad = []
    for m in LINK.finditer(prose):
        target = m["md"] or m["img"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if dest in NOT_YET_WRITTEN and not dest.exists():
            continue
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md":
            if anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[_rel(p) for p in PAGES])
def test_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def unclosed_fence(text: str) -> int | None:
    """The line of a code fence that nothing closes (the rest of the page would render as code)."""
    rest = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    m = re.search(r"^`{3,}", rest, re.M)
    return None if m is None else rest.count("\n", 0, m.start()) + 1


@pytest.mark.parametrize("page", PAGES, ids=[_rel(p) for p in PAGES])
def test_code_fences_close(page: Path) -> None:
    assert unclosed_fence(page.read_text(encoding="utf-8")) is None


# ---------------------------------------------------------------------------------------------
# The checks themselves


def test_the_pages_have_snippets_to_check() -> None:
    """Guards the extraction: a change of fence style must not leave nothing to check."""
    assert {"README.md", "docs/experiments.md", "docs/cost-model.md"} <= {_rel(p) for p in PAGES}
    assert len(YAML_SNIPPETS) >= 8
    assert len(COMMANDS) >= 15
    assert ["run", "experiments/quickstart.yaml"] in [argv for _, argv in COMMANDS]


def test_every_yaml_kind_is_recognised(tmp_path: Path) -> None:
    assert check_yaml(QUICKSTART.read_text(), "quickstart", tmp_path) == "experiment"
    assert check_yaml("policies: [lru, arc]\n", "f", tmp_path) == "fragment"
    profile = ROOT / "costmodels" / "profiles" / "h100-public.yaml"
    assert check_yaml(profile.read_text(), "profile", tmp_path) == "profile"
    model = "\n".join(
        [
            "name: tiny",
            "num_layers: 2",
            "hidden_size: 64",
            "num_heads: 4",
            "num_kv_heads: 2",
            "head_dim: 16",
            "intermediate_size: 128",
            "vocab_size: 1000",
            "dtype_bytes: 2",
            "gated_mlp: true",
            "source: a test",
        ]
    )
    assert check_yaml(model, "model", tmp_path) == "model"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("memory: {gpu_kv_gb: [1, -2]}\n", r"memory.gpu_kv_gb\[1\]: must be > 0"),
        ("polices: [lru]\n", "neither an experiment"),  # a misspelt key: no kind of YAML known here
        ("policies: [no-such-policy]\n", "unknown policy 'no-such-policy'"),
        # belady (the quickstart's) needs the future, which vLLM's prefix cache cannot know
        ("engine: {kind: vllm-v1}\n", "'belady' cannot run with engine.kind vllm-v1"),
        ("name: x\nname: y\n", "duplicate key 'name'"),
        ("num_layers: 2\nhidden_size: 64\n", "missing required key"),  # a model spec, cut short
    ],
)
def test_a_broken_yaml_snippet_fails(body: str, why: str, tmp_path: Path) -> None:
    with pytest.raises((ValueError, AssertionError), match=why):
        check_yaml(body, "broken", tmp_path)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("kvsim run experiments/quickstart.yaml --no-such-flag", "unrecognized arguments"),
        ("kvsim no-such-command", "invalid choice: 'no-such-command'"),
        ("kvsim run experiments/no_such_experiment.yaml", "not a bundled experiment"),
        (
            "kvsim cost --profile h100-public --model llama-3-8b --swap-bytes",
            "expected one argument",
        ),
        ("kvsim trace stats traces/no_such_trace.jsonl", "no such file in the repo"),
    ],
)
def test_a_broken_command_fails(line: str, why: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"Run:\n\n```bash\npip install -e . && {line}  # a comment\n```\n")
    blocks = code_blocks(page.read_text())
    [argv] = kvsim_commands(blocks[0][1])
    with pytest.raises((ValueError, AssertionError), match=why):
        check_command(argv)


def test_an_unclosed_fence_fails() -> None:
    assert unclosed_fence("# T\n\n```bash\nkvsim list\n```\n\n```\nsim/  the core\n") == 7


def test_a_broken_link_fails(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-section) [ok](#here) [web](https://example.org/x)\n\n"
        "# Here\n\n[gone](missing.md) [no heading](there.md#no-such-section)\n"
        '<img src="img/missing.png" width="10">\n\n```bash\n[in code](not-checked.md)\n```\n'
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "there.md#no-such-section: no heading #no-such-section in " + str(tmp_path / "there.md"),
        "img/missing.png: no such file",
    ]
