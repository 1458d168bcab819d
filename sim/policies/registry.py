"""Policies registered by name; ``module:Class`` names a user's class (DESIGN.md 5)."""
from __future__ import annotations

import importlib

from sim.policies.base import EvictionPolicy, PolicyContext

_POLICIES: dict[str, type[EvictionPolicy]] = {}


def register(name: str):
    def deco(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
        if name in _POLICIES and _POLICIES[name] is not cls:
            raise ValueError(f"policy {name!r} is registered twice")
        cls.name = name
        _POLICIES[name] = cls
        return cls
    return deco


def available_policies() -> list[str]:
    return sorted(_POLICIES)


def policy_class(name: str) -> type[EvictionPolicy]:
    """A registered name, or ``package.module:Class`` for a user's EvictionPolicy subclass."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"policy {name!r}: cannot import {attr} from {module_name}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, EvictionPolicy)):
            raise ValueError(f"policy {name!r} is not a subclass of sim.policies.EvictionPolicy")
        return cls
    try:
        return _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; registered: {', '.join(available_policies())}") from None


def make_policy(name: str, ctx: PolicyContext) -> EvictionPolicy:
    return policy_class(name)(ctx)
