"""Policies registered by name; ``module:Class`` names a user's class."""

from __future__ import annotations

import difflib
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
    """A registered name, or ``package.module:Class`` for a user's EvictionPolicy subclass or a
    sequence-level policy class (wrapped by ``sim.adapters``)."""
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
    try:
        return _POLICIES[name]
    except KeyError:
        close = difflib.get_close_matches(name, available_policies(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown policy {name!r}{hint}; registered: {', '.join(available_policies())}"
        ) from None


def make_policy(name: str, ctx: PolicyContext) -> EvictionPolicy:
    return policy_class(name)(ctx)
