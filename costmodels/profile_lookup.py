"""Finding a profile by name: a GPU's analytic profile, a committed profile, or a profile YAML.

A module of its own because a GPU name resolves to ``analytic.analytic_profile``, and analytic
builds its profile from the terms in ``profile``: the lookup sits above both.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import _strict as S
from .analytic import analytic_profile
from .hardware import available_hardware, find_hardware
from .profile import Profile, committed_profiles, read_profile_file


def load_profile(name_or_path: str | os.PathLike[str] | Profile) -> Profile:
    """Resolve a profile: a GPU name gives its analytic Level-0 profile, else a committed profile's
    name (file stem under costmodels/profiles/), else a path to a profile YAML.

    ``load_profile("h100-sxm")`` (or "h100", or "analytic-h100-sxm") is the analytic H100 profile.
    """
    if isinstance(name_or_path, Profile):
        return name_or_path
    text = os.fspath(name_or_path)
    key = text.strip()
    lowered = key.lower()
    hw = find_hardware(lowered.removeprefix("analytic-"))
    if hw is not None:
        return analytic_profile(hw)
    committed = committed_profiles()
    if key in committed:
        return read_profile_file(committed[key])
    if S.is_yaml_path(text):
        if not Path(text).is_file():
            raise ValueError(f"{text}: profile file not found")
        return read_profile_file(text)
    raise ValueError(
        f"unknown profile {text!r}: give a GPU name for its analytic profile "
        f"({', '.join(available_profiles())}), a committed profile name, or a path to a profile YAML"
    )


def available_profiles() -> list[str]:
    """Names ``load_profile`` accepts without a path: analytic GPU names and committed profiles."""
    return sorted(available_hardware()) + sorted(committed_profiles())
