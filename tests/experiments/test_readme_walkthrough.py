"""The README's walkthrough of one's own trace runs as written: its commands, in order, in a fresh
folder that holds a small generated file of conversations under the name the README gives it, and
its YAML saved under the name its `kvsim run` line reads."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Your own trace, end to end"
MARK = "<!-- run by tests/experiments/test_readme_walkthrough.py -->"
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```\s*$", re.M | re.S)


def walkthrough() -> list[tuple[str, str]]:
    """(language, body) of every block of the README's walkthrough, in order; each one marked as
    run by this test (so the docs snippet check leaves it to this test)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ")]  # up to the next top-level section
    blocks = []
    for m in FENCE.finditer(section):
        above = section[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        assert above == MARK, f"a block of the walkthrough is not marked {MARK}: {m['body']!r}"
        blocks.append((m["lang"], m["body"]))
    return blocks


def sharegpt_file(path: Path, sessions: int = 12, seed: int = 0) -> None:
    """A small ShareGPT JSON file: conversations of 1 to 4 exchanges of random words."""
    rng = np.random.default_rng(seed)
    words = ["cache", "token", "model", "layer", "page", "query", "reply", "turn", "memory"]

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(words, int(rng.integers(lo, hi))))

    records = []
    for i in range(sessions):
        conv = []
        for _ in range(int(rng.integers(1, 5))):
            conv.append({"from": "human", "value": text(20, 300)})
            conv.append({"from": "gpt", "value": text(20, 400)})
        records.append({"id": f"chat{i}", "conversations": conv})
    path.write_text(json.dumps(records), encoding="utf-8")


def test_the_readme_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    blocks = walkthrough()
    langs = [lang for lang, _ in blocks]
    assert langs.count("yaml") == 1 and "bash" in langs, langs
    config = yaml.safe_load(next(body for lang, body in blocks if lang == "yaml"))
    trace_file = config["trace"]["path"]
    monkeypatch.chdir(tmp_path)
    sharegpt_file(tmp_path / trace_file)

    commands = [
        shlex.split(line, comments=True)
        for lang, body in blocks
        if lang == "bash"
        for line in body.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert all(c[0] == "kvsim" for c in commands), commands
    verbs = [c[1] for c in commands]
    assert verbs == ["trace", "run", "report"], verbs  # stats, run, report: the whole way
    assert commands[0][2:] == ["stats", trace_file]  # it looks at the file the YAML names
    yaml_name = commands[1][2]
    (tmp_path / yaml_name).write_text(
        next(body for lang, body in blocks if lang == "yaml"), encoding="utf-8"
    )
    for argv in commands:
        rc = main(argv[1:])
        out, err = capsys.readouterr()
        assert rc == 0, f"{shlex.join(argv)} -> {rc}: {err}"
        if argv[1:3] == ["trace", "stats"]:
            assert "sessions" in out and "12" in out
        if argv[1] == "run":
            assert "results: results/" in out and "rejected" not in out
    report = Path(commands[2][2]) / "report.html"
    assert report.is_file() and report.stat().st_size > 10_000
    assert (tmp_path / "results" / config["name"] / "summary.csv").is_file()


@pytest.mark.parametrize("broken", ["trace: {kind: jsonl, path: chats.json}"])
def test_a_walkthrough_yaml_that_names_the_wrong_format_fails(
    broken, tmp_path, monkeypatch, capsys
):
    """The test would catch a walkthrough whose YAML and file disagree (here: a ShareGPT file
    read as kvsim's JSONL)."""
    monkeypatch.chdir(tmp_path)
    sharegpt_file(tmp_path / "chats.json")
    body = next(body for lang, body in walkthrough() if lang == "yaml")
    body = re.sub(r"^trace:.*$", broken, body, flags=re.M)
    (tmp_path / "chats.yaml").write_text(body, encoding="utf-8")
    assert main(["run", "chats.yaml", "--quiet"]) == 2
    assert "looks like a sharegpt trace" in capsys.readouterr().err
