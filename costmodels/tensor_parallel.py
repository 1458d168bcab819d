"""Tensor parallelism: what one GPU of a tp group pays beyond its shard, and whether it fits.

Megatron-style TP (``ModelSpec.shard``) splits each layer's heads and MLP width over tp GPUs. Each
decoder layer then all-reduces its activations twice (after the attention output projection and
after the MLP down projection), N tokens x hidden x dtype bytes each, priced as a ring
(``AllReduceTerm``). Memory: each GPU holds its shard's weights and 1/tp of the group's KV pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .analytic import analytic_allreduce
from .hardware import HardwareSpec, available_hardware, find_hardware
from .models import ModelSpec
from .profile import AllReduceTerm, Profile

ALLREDUCES_PER_LAYER = 2  # after the attention O projection and after the MLP down projection
GIB = 2**30  # KV capacities are GiB, as the experiment YAML gives them


def profile_hardware(profile: Profile) -> HardwareSpec | None:
    """The registered GPU a profile was built or measured on (``meta.gpu``), if it names one."""
    return find_hardware(profile.meta.gpu)


def allreduce_term(profile: Profile) -> AllReduceTerm:
    """The profile's all-reduce cost, or else the Level-0 one of the GPU its ``meta.gpu`` names."""
    if profile.allreduce is not None:
        return profile.allreduce
    hw = profile_hardware(profile)
    term = analytic_allreduce(hw) if hw is not None else None
    if term is None:
        raise ValueError(
            f"profile {profile.name!r}: tp > 1 needs an all-reduce cost: add an `allreduce` term "
            f"(latency_s, bw_Bps) to the profile, or name in meta.gpu a registered GPU with an "
            f"NVLink figure ({', '.join(available_hardware())}); got meta.gpu {profile.meta.gpu!r}"
        )
    return term


def ring_allreduce_s(term: AllReduceTerm, tp: int, nbytes: float) -> float:
    """One ring all-reduce of ``nbytes`` over tp GPUs: latency + 2(tp-1)/tp * bytes / bus bw."""
    if tp <= 1:
        return 0.0
    return term.latency_s + 2.0 * (tp - 1) / tp * nbytes / term.bw_Bps


def allreduce_per_token(
    model: ModelSpec, term: AllReduceTerm | None, tp: int
) -> tuple[float, float]:
    """(fixed seconds, seconds per token) of one all-reduce of N tokens' activations, so that
    ``ring_allreduce_s(term, tp, N * hidden * dtype_bytes)`` = fixed + N * per_token."""
    if tp <= 1:
        return 0.0, 0.0
    if term is None:
        raise ValueError(f"tp={tp} needs an all-reduce term")
    return term.latency_s, 2.0 * (tp - 1) / tp * model.hidden_size * model.dtype_bytes / term.bw_Bps


# --- memory --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MemoryFit:
    """One GPU of a tp group: its weights and its share of the KV pool against its HBM.

    A necessary condition, not a sufficient one: activations, CUDA graphs and the runtime take a
    few GB more on a real server.
    """

    model: str
    tp: int
    gpu: str
    hbm_bytes: float
    weight_bytes: float  # the shard's weights: layers, LM head and embedding
    kv_bytes: float  # the group's KV pool / tp; 0 for an unbounded (idealised) pool
    gpu_kv_gb: float  # the group's KV pool as configured, GiB

    @property
    def need_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.hbm_bytes

    def describe(self) -> str:
        weights = (
            f"{self.model} at tp={self.tp} needs {_gb(self.weight_bytes)} of weights per GPU "
            "(LM head and embedding included)"
        )
        if math.isinf(self.gpu_kv_gb):
            need = f"{weights}, its KV pool unbounded (not counted)"
        elif self.gpu_kv_gb == 0:
            need = weights
        else:
            kv = f"{_gb(self.kv_bytes)} of KV ({self.gpu_kv_gb:g} GiB / tp {self.tp})"
            need = f"{weights} + {kv} = {_gb(self.need_bytes)}"
        verdict = "within" if self.fits else "more than"
        return f"{need}, {verdict} the {_gb(self.hbm_bytes)} of HBM of one {self.gpu}"


def memory_fit(model: ModelSpec, tp: int, hardware: HardwareSpec, gpu_kv_gb: float) -> MemoryFit:
    """Per-GPU memory of ``model`` over ``tp`` GPUs of ``hardware`` with a group KV pool of
    ``gpu_kv_gb`` GiB (``math.inf``: unbounded, weights alone are checked)."""
    shard = model.shard(tp)
    kv = 0.0 if math.isinf(gpu_kv_gb) else gpu_kv_gb * GIB / tp
    return MemoryFit(
        model.name, tp, hardware.name, hardware.hbm_bytes, shard.weight_bytes, kv, gpu_kv_gb
    )


def smallest_fitting_tp(
    model: ModelSpec, hardware: HardwareSpec, gpu_kv_gb: float, limit: int = 8
) -> int | None:
    """The smallest power-of-two tp (up to ``limit``, one NVLink node) at which the model can be
    split and fits, or None."""
    tp = 1
    while tp <= limit:
        try:
            if memory_fit(model, tp, hardware, gpu_kv_gb).fits:
                return tp
        except ValueError:  # heads or MLP width not divisible by this tp
            pass
        tp *= 2
    return None


def fit_problem(model: ModelSpec, tp: int, profile: Profile, gpu_kv_gb: float = 0.0) -> str | None:
    """Why ``model`` over ``tp`` GPUs of ``profile``'s GPU does not fit in its HBM (with the
    smallest tp that would), or None when it fits or the profile names no registered GPU."""
    gpu = profile_hardware(profile)
    if gpu is None:
        return None
    fit = memory_fit(model, tp, gpu, gpu_kv_gb)
    if fit.fits:
        return None
    best = smallest_fitting_tp(model, gpu, gpu_kv_gb)
    return fit.describe() + (f" (tp={best} fits)" if best is not None and best > tp else "")


def checked_note(
    model: ModelSpec, tp: int, profile: Profile, fix: str, gpu_kv_gb: float = 0.0
) -> str:
    """``replication_note`` of a run that fits; a ValueError naming the numbers and ``fix`` (the
    settings to change) when it does not."""
    problem = fit_problem(model, tp, profile, gpu_kv_gb)
    if problem is not None:
        raise ValueError(f"{problem}; {fix}")
    return replication_note(model, tp)


def replication_note(model: ModelSpec, tp: int) -> str:
    """A sentence when ``tp`` exceeds the KV heads, so each head is held by several GPUs; else ""."""
    copies = model.kv_head_copies(tp)
    if copies == 1:
        return ""
    return (
        f"{model.name} has {model.num_kv_heads} KV heads for tp={tp}: each GPU holds one KV head, "
        f"replicated on {copies} GPUs (KV bytes per token per GPU are one head's)"
    )


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB"
