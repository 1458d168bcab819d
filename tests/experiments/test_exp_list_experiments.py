"""`kvsim list` lists the bundled experiments: the names `kvsim run NAME` accepts, each with the
first sentence of the comment that opens its YAML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments.bundled import bundled, describe
from experiments.cli import main
from experiments.schema import bundled_experiments, resolve_config

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"


def _opening_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines)


def test_list_experiments_shows_every_bundled_name_with_its_description(capsys):
    assert main(["list", "experiments"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "bundled experiments (run one with kvsim run NAME, from any directory):"
    names = [line.split()[0] for line in lines[1:]]
    on_disk = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))
    assert names == on_disk and "quickstart" in names and "bench_10k" in names
    for line in lines[1:]:
        name, text = line.split(maxsplit=1)
        # the name is what `kvsim run NAME` resolves, to that file
        assert resolve_config(name) == EXPERIMENTS_DIR / f"{name}.yaml"
        # the description is the start of the file's opening comment, one sentence
        opening = _opening_comment(EXPERIMENTS_DIR / f"{name}.yaml")
        assert opening.startswith(text.rstrip(".")), (name, text)
        assert len(text) > 20 and "\n" not in text


def test_a_listed_name_runs_and_an_unlisted_one_does_not(capsys):
    assert main(["list", "experiments", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got) == ["experiments"]
    entries = got["experiments"]["choices"]
    assert [e["name"] for e in entries] == bundled_experiments()
    quick = next(e for e in entries if e["name"] == "quickstart")
    assert quick["run"] == "kvsim run quickstart"
    assert quick["results"] == "results/quickstart/"
    assert quick["description"] == (
        "kvsim quickstart: a synthetic ShareGPT-like multi-turn trace on the analytic H100 profile."
    )
    bench = next(e for e in entries if e["name"] == "bench_10k")
    assert bench["results"] == "results/bench-10k/"  # the YAML's name: decides the folder
    # the YAML's name: is not what `kvsim run` takes; the listed file name is
    with pytest.raises(ValueError, match="not a bundled experiment"):
        resolve_config("bench-10k")


def test_list_ends_with_the_experiments_and_json_has_them(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    tail = out[out.index("bundled experiments (") :]
    assert len(tail.strip().splitlines()) == 1 + len(bundled_experiments())  # the last section
    assert main(["list", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got)[-1] == "experiments"
    assert {e["run"] for e in got["experiments"]["choices"]} == {
        f"kvsim run {n}" for n in bundled_experiments()
    }
    assert main(["list", "policies"]) == 0
    assert "bundled experiments" not in capsys.readouterr().out


def test_an_unknown_section_names_experiments_among_the_sections(capsys):
    assert main(["list", "nope"]) == 2
    assert re.search(r"sections: models, .*, experiments$", capsys.readouterr().err.strip())


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "# One thing, and\n# another.\n#   kvsim run x.yaml\nname: x\n",
            "One thing, and another.",
        ),
        ("# A check against vLLM:\n#   kvsim vllm-check x.yaml\n", "A check against vLLM."),
        ("# Both engines, same GPU:  kvsim run vllm\n# More here.\n", "Both engines, same GPU."),
        ("# Is it worth it? Yes. More.\n", "Is it worth it?"),
        (
            "# vLLM 0.33.0 scheduler and docs (x.md)\n\n# later\n",
            "vLLM 0.33.0 scheduler and docs (x.md).",
        ),
        ("name: bare\n", ""),
    ],
)
def test_describe_takes_the_first_sentence_of_the_opening_comment(text, want):
    assert describe(text) == want


def test_every_bundled_experiment_has_a_description():
    assert all(e.description for e in bundled())
