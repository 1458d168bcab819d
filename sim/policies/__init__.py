"""Eviction policies, one file each, registered by name.

A policy's module is imported when its name is first asked for (``policy_class``, ``make_policy``):
``sim.policies.registry`` maps each built-in name to its module, so a run imports only the policies
it uses. A new policy file adds its names to that map (a test fails, naming the file, until it does).
"""

from sim.policies.base import EvictionPolicy, PolicyContext
from sim.policies.registry import (
    available_policies,
    make_policy,
    policy_class,
    register,
)

__all__ = [
    "EvictionPolicy",
    "PolicyContext",
    "available_policies",
    "make_policy",
    "policy_class",
    "register",
]
