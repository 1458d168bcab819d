"""Eviction policies, one file each, registered by name.

Every module in this folder (except base, registry and those starting with ``_``) is imported here,
so a new policy file registers itself without editing this one.
"""

import importlib
import pkgutil

from sim.policies.base import EvictionPolicy, PolicyContext
from sim.policies.registry import (
    available_policies,
    make_policy,
    policy_class,
    register,
)

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name not in ("base", "registry") and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = [
    "EvictionPolicy",
    "PolicyContext",
    "available_policies",
    "make_policy",
    "policy_class",
    "register",
]
