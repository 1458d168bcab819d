"""The strict YAML reader: libyaml for this package's own files, read exactly as the pure parser
reads them; everyone else's files, and every error, as the pure parser has them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from costmodels import _strict as S

PACKAGE_FILES = sorted(S._PACKAGE_DIR.rglob("*.yaml"))
needs_libyaml = pytest.mark.skipif(S._CLoader is None, reason="PyYAML built without libyaml")


def test_the_package_has_yaml_files():
    names = {p.name for p in PACKAGE_FILES}
    assert {"models.yaml", "hardware.yaml", "h100-sxm-llama3-8b.yaml"} <= names


@needs_libyaml
@pytest.mark.parametrize("path", PACKAGE_FILES, ids=lambda p: p.name)
def test_both_parsers_read_every_package_file_alike(path: Path):
    text = path.read_text(encoding="utf-8")
    pure = yaml.load(text, Loader=S._Loader)  # noqa: S506 - a SafeLoader
    assert yaml.load(text, Loader=S._CLoader) == pure  # noqa: S506 - a SafeLoader's constructor
    assert S.read_yaml(path) == pure


BROKEN = "linear:\n  tau_s: 1\n    flops: 2\n"  # both parsers refuse it; only the pure one quotes
LAX = "linear:\n  tau_s\t: 5e-6\n"  # libyaml takes the tab before the colon; the pure one refuses


def _message(text: str, path: Path) -> str:
    with pytest.raises(ValueError, match="not valid YAML") as info:
        path.write_text(text, encoding="utf-8")
        S.read_yaml(path)
    return str(info.value)


@needs_libyaml
def test_a_package_file_libyaml_refuses_gets_the_pure_parsers_message():
    inside = S._PACKAGE_DIR / "data" / "not-there.yaml"  # never read: _parse takes the text
    with pytest.raises(yaml.YAMLError) as fast:
        S._parse(BROKEN, inside)
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.load(BROKEN, Loader=S._Loader)  # noqa: S506 - a SafeLoader
    assert str(fast.value) == str(pure.value)
    assert "line 3, column 10:\n" in str(fast.value) and "^" in str(fast.value)  # quoted


def test_a_users_file_keeps_the_pure_parser(tmp_path):
    msg = _message(BROKEN, tmp_path / "broken.yaml")
    assert "line 3, column 10:\n" in msg and "flops: 2" in msg
    assert "line 2" in _message(LAX, tmp_path / "lax.yaml")
