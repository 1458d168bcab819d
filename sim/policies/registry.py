"""Policies registered by name; ``module:Class`` names a user's class.

``_MODULES`` maps every built-in policy name to the module whose ``@register`` defines it, so
``policy_class("lru")`` imports ``sim.policies.lru`` (and what it imports) and no other policy
module: a run of one policy does not pay for compiling all of them. ``available_policies()`` lists
the map's names and any a user registered, without importing anything. A new policy file adds its
names here (``tests/policies/test_registry_map.py`` fails, naming the file, until it does).
"""

from __future__ import annotations

import difflib
import importlib

from sim.policies.base import EvictionPolicy, PolicyContext

# built-in name -> the module that registers it (kept equal to the @register calls by a test)
_MODULES: dict[str, str] = {
    "arc": "sim.policies.arc",
    "belady": "sim.policies.belady",
    "clock": "sim.policies.clock",
    "cost-belady": "sim.policies.cost_belady",
    "fifo": "sim.policies.fifo",
    "lfu": "sim.policies.lfu",
    "lru": "sim.policies.lru",
    "pensieve": "sim.policies.pensieve",
    "pensieve-flat": "sim.policies.pensieve",
    "pensieve-physics": "sim.policies.pensieve",
    "pensieve-depth": "sim.policies.pensieve_depth",
    "predictive": "sim.policies.predictive",
    "qos": "sim.policies.qos",
    "s3fifo": "sim.policies.s3fifo",
    "session-aware": "sim.policies.session_aware",
    "sieve": "sim.policies.sieve",
    "slru": "sim.policies.slru",
    "twoq": "sim.policies.twoq",
}

# modules that change a mapped module's classes when imported, imported with it: s3fifo_runs
# names RunS3FIFO as S3FIFO.run_form (the form S3FIFO builds where every unit has one size)
_COMPANIONS: dict[str, tuple[str, ...]] = {
    "sim.policies.s3fifo": ("sim.policies.s3fifo_runs",),
}

_POLICIES: dict[str, type[EvictionPolicy]] = {}  # the names registered so far (imported)
_READY: dict[str, type[EvictionPolicy]] = {}  # those policy_class gave: companions imported too


def register(name: str):
    def deco(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
        if name in _MODULES and cls.__module__ != _MODULES[name]:
            raise ValueError(
                f"policy {name!r} is built in ({_MODULES[name]}); {cls.__module__} cannot "
                "register it"
            )
        if name in _POLICIES and _POLICIES[name] is not cls:
            raise ValueError(f"policy {name!r} is registered twice")
        cls.name = name
        _POLICIES[name] = cls
        return cls

    return deco


def available_policies() -> list[str]:
    """Every built-in name and every name a user registered (nothing is imported)."""
    return sorted(_MODULES.keys() | _POLICIES.keys())


def policy_class(name: str) -> type[EvictionPolicy]:
    """A registered name, or ``package.module:Class`` for a user's EvictionPolicy subclass or a
    sequence-level policy class (wrapped by ``sim.adapters``)."""
    cls = _READY.get(name)
    if cls is not None:
        return cls
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"policy {name!r}: cannot import {attr} from {module_name}: {exc}"
            ) from exc
        from sim.adapters import (
            resolve_policy_class,  # here: adapters imports this package
        )

        return resolve_policy_class(cls, name)
    module = _MODULES.get(name)
    if module is not None:
        importlib.import_module(module)  # its @register fills _POLICIES[name]
        for companion in _COMPANIONS.get(module, ()):
            importlib.import_module(companion)
    cls = _POLICIES.get(name)
    if cls is not None:
        _READY[name] = cls
        return cls
    close = difflib.get_close_matches(name, available_policies(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"unknown policy {name!r}{hint}; registered: {', '.join(available_policies())}"
    )


def make_policy(name: str, ctx: PolicyContext) -> EvictionPolicy:
    return policy_class(name)(ctx)
