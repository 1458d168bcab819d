"""kvsim cost models: pure functions from batch shapes and copy volumes to seconds.

    >>> from costmodels import cost_model, BatchShape
    >>> cm = cost_model("llama-3-8b", "h100-sxm")          # analytic (Level-0) H100 profile
    >>> cm.iteration(BatchShape.decode(64, 64 * 2000)).total_s   # doctest: +SKIP

Imports only the standard library, numpy and pyyaml; nothing else of the project.
"""

from __future__ import annotations

import os

from .analytic import LEVEL0, analytic_profile
from .cost import (
    BatchShape,
    CostModel,
    IterationCost,
    PensieveConstants,
    attention_pairs,
)
from .hardware import HardwareSpec, available_hardware, get_hardware
from .models import ModelSpec, available_models, get_model
from .pipeline import pipelined_time, pipelined_time_uniform
from .profile import (
    AllReduceTerm,
    CopyTerm,
    DecodeAttnTerm,
    LinearTerm,
    OverlapTerm,
    PrefillAttnTerm,
    Profile,
    ProfileMeta,
    TermValidation,
    save_profile,
)
from .profile_lookup import available_profiles, load_profile
from .recovery import recompute_s, recovery_s, swap_in_s
from .tensor_parallel import MemoryFit, memory_fit, profile_hardware


def cost_model(
    model: str | os.PathLike[str] | ModelSpec,
    hardware_or_profile: str | os.PathLike[str] | Profile,
    tp: int = 1,
) -> CostModel:
    """``CostModel`` from a model name/alias/spec path and a GPU name (analytic profile), a committed
    profile name, or a profile YAML path; with ``tp`` > 1, one GPU of a tensor-parallel group."""
    return CostModel(get_model(model), load_profile(hardware_or_profile), tp)


__all__ = [
    "LEVEL0",
    "AllReduceTerm",
    "BatchShape",
    "CopyTerm",
    "CostModel",
    "DecodeAttnTerm",
    "HardwareSpec",
    "IterationCost",
    "LinearTerm",
    "MemoryFit",
    "ModelSpec",
    "OverlapTerm",
    "PensieveConstants",
    "PrefillAttnTerm",
    "Profile",
    "ProfileMeta",
    "TermValidation",
    "analytic_profile",
    "attention_pairs",
    "available_hardware",
    "available_models",
    "available_profiles",
    "cost_model",
    "get_hardware",
    "get_model",
    "load_profile",
    "memory_fit",
    "pipelined_time",
    "pipelined_time_uniform",
    "profile_hardware",
    "recompute_s",
    "recovery_s",
    "save_profile",
    "swap_in_s",
]
