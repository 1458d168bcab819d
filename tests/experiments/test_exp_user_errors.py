"""What a user sees when an experiment file is off: the file and the likely fix named in one line,
results folders readable as any folder the user makes, names written out in full."""

from __future__ import annotations

import os
import stat

import pytest
import yaml
from exp_fakes import BASE

from experiments.cli import main
from experiments.schema import ConfigError, load_experiment


def test_config_that_is_not_utf8_names_the_file(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.replace("name: t", "name: t  # caf\u00e9").encode("latin-1"))
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"kvsim: error: {path}: "), err
    assert "UTF-8" in err and "line 2, column 15" in err, err


def test_missing_trace_file_names_each_folder_once(tmp_path, monkeypatch):
    path = tmp_path / "exp.yaml"
    path.write_text(
        BASE.replace("{kind: synthetic, sessions: 5, seed: 1}", "{kind: jsonl, path: t.jsonl}")
    )
    monkeypatch.chdir(tmp_path)  # the YAML's folder is the current directory
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    msg = str(info.value)
    assert f"(looked in {tmp_path})" in msg and msg.count(str(tmp_path)) == 2, msg  # file + once


def test_unknown_policy_suggests_the_close_name(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE.replace("policies: [lru, fifo]", "policies: [lur, fifo]"))
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: policies[0]: unknown policy 'lur'"), msg
    assert "did you mean 'lru'?" in msg and "registered:" in msg, msg


def test_a_name_far_from_every_policy_gets_no_suggestion(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE.replace("policies: [lru, fifo]", "policies: [zzzzzz, fifo]"))
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert "did you mean" not in str(info.value)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.slow
def test_results_folder_has_the_users_usual_permissions(
    fake_backend, tiny_yaml, tmp_path, umask_022
):
    out = tmp_path / "res" / "tiny"
    assert main(["run", str(tiny_yaml), "--out", str(out), "--quiet"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "plots").stat().st_mode) == 0o755
    # and so is a folder it replaces with --force
    assert main(["run", str(tiny_yaml), "--out", str(out), "--quiet", "--force"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_resolved_config_names_models_and_gpus_in_full(fake_backend, tmp_path):
    cfg = tmp_path / "alias.yaml"
    cfg.write_text(
        BASE.replace("model: llama-3-8b", "model: [llama3-8b, llama-3-70b]")
        .replace("hardware: h100-sxm", "hardware: [h100, a100-sxm]")
        .replace("gpu_kv_gb: [1, 2]", "gpu_kv_gb: [1]")
        + "tp: {llama3-8b: 1, llama-3-70b: 4}\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    # aliases resolved to the registered names; a name written in another case is kept as written
    assert resolved["model"] == ["Llama-3-8B", "llama-3-70b"]
    assert resolved["hardware"] == ["h100-sxm", "a100-sxm"]
    assert resolved["tp"] == {"Llama-3-8B": [1], "llama-3-70b": [4]}
