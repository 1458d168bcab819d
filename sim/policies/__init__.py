"""Eviction policies, one file each, registered by name."""
from sim.policies.base import EvictionPolicy, PolicyContext
from sim.policies.registry import available_policies, make_policy, policy_class, register
from sim.policies import fifo, lru  # noqa: F401  (registration side effect)

__all__ = ["EvictionPolicy", "PolicyContext", "available_policies", "make_policy", "policy_class", "register"]
