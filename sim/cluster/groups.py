"""Groups of replicas with their own hardware, KV capacities and policy (a heterogeneous fleet).

``cluster.groups`` lists groups in replica order: the first group's ``replicas`` are replicas
0 .. n-1, the next group's follow, and so on (with disaggregation the prefill pool is the first
``prefill_replicas`` of them, in that order). A key a group leaves out is the run's own: the
top-level hardware (its cost model), ``memory.gpu_kv_gb``, ``memory.cpu_kv_gb``, the policy and the
tensor-parallel degree ``tp``. Every group runs the same model with the same page size, so a token's
KV is the same bytes everywhere (the whole model's); a group at another ``tp`` splits it over its
own GPUs (each holds 1/tp of every page, and of the group's ``gpu_kv_gb``), and its prices are one
of its GPUs'. Where KV crosses between replicas (a shared store, disaggregation) every group must
hold a token in the same bytes over its GPUs: a ``tp`` that replicates KV heads is refused there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from costmodels import CostModel, get_model, load_profile
from sim.config import MemoryConfig
from sim.policies import policy_class


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    replicas: int = 1  # how many replicas of this kind, in order after the group before
    hardware: str | None = None  # a GPU name, a committed profile's name or a profile file
    gpu_kv_gb: float | None = None  # each replica's GPU KV, GiB (None: memory.gpu_kv_gb)
    cpu_kv_gb: float | None = None  # ... and CPU KV (None: memory.cpu_kv_gb)
    policy: str | None = None  # its eviction policy (None: the run's)
    tp: int | None = None  # its tensor-parallel degree (None: the run's)

    def check(self, where: str) -> None:
        """Each key's own rules, every message naming ``where`` (cluster.groups[i]) and the key."""
        n = self.replicas
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{where}.replicas: must be an integer >= 1, got {n!r}")
        if self.tp is not None and (
            isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1
        ):
            raise ValueError(f"{where}.tp: must be an integer >= 1, got {self.tp!r}")
        if self.hardware is not None:
            try:
                load_profile(self.hardware)
            except (ValueError, OSError) as exc:
                raise ValueError(f"{where}.hardware: {exc}") from None
        if self.gpu_kv_gb is not None and not _number(self.gpu_kv_gb, above_zero=True):
            raise ValueError(f"{where}.gpu_kv_gb: must be a number > 0, got {self.gpu_kv_gb!r}")
        if self.cpu_kv_gb is not None and not _number(self.cpu_kv_gb, above_zero=False):
            raise ValueError(f"{where}.cpu_kv_gb: must be a number >= 0, got {self.cpu_kv_gb!r}")
        if self.policy is not None:
            try:
                cls = policy_class(self.policy)
            except ValueError as exc:
                raise ValueError(f"{where}.policy: {exc}") from None
            if cls.offline:
                raise ValueError(
                    f"{where}.policy: {self.policy!r} reads each session's next access, which "
                    f"depends on where the router sends it: offline bounds run on one engine only"
                )


def _number(value, above_zero: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return False
    return value > 0 if above_zero else value >= 0


@dataclass(frozen=True, slots=True)
class ReplicaSetup:
    """What one replica runs with: its cost model, memory and policy."""

    cost: CostModel
    memory: MemoryConfig
    policy: str
    hardware: str | None  # its group's hardware (None: the run's)


def replica_setups(
    groups: Sequence[ReplicaGroup],
    replicas: int,
    cost: CostModel,
    memory: MemoryConfig,
    policy: str,
) -> list[ReplicaSetup]:
    """Each replica's set-up, in replica order: every replica the run's without groups, else
    its group's, each key a group leaves out the run's. A group's cost model is built once."""
    if not groups:
        return [ReplicaSetup(cost, memory, policy, None)] * replicas
    out: list[ReplicaSetup] = []
    for i, g in enumerate(groups):
        group_cost = (
            cost
            if g.hardware is None and (g.tp is None or g.tp == cost.tp)
            else cost_on(cost, g.hardware, f"cluster.groups[{i}]", g.tp)
        )
        mem = replace(
            memory,
            gpu_kv_gb=memory.gpu_kv_gb if g.gpu_kv_gb is None else g.gpu_kv_gb,
            cpu_kv_gb=memory.cpu_kv_gb if g.cpu_kv_gb is None else g.cpu_kv_gb,
        )
        setup = ReplicaSetup(group_cost, mem, policy if g.policy is None else g.policy, g.hardware)
        out += [setup] * g.replicas
    return out


def cost_on(cost: CostModel, hardware: str | None, where: str, tp: int | None = None) -> CostModel:
    """``cost``'s model priced on ``hardware`` (None: ``cost``'s own profile) at tensor-parallel
    degree ``tp`` (None: ``cost``'s). A cost model holds one GPU's shard of the model at tp > 1;
    the whole model is found again by the registered name the shard's is made from (a model given
    as a file is found at tp 1 only)."""
    profile = cost.profile if hardware is None else load_profile(hardware)
    key = f"{where}.hardware" if hardware is not None else f"{where}.tp"
    tp = cost.tp if tp is None else tp
    if cost.tp == 1:
        whole = cost.model
    else:
        name = cost.model.name.removesuffix(f"/tp{cost.tp}")
        try:
            found = get_model(name)
        except ValueError:
            found = None
        if found is None or found.shard(cost.tp) != cost.model:
            raise ValueError(
                f"{key}: the run's model {name!r} at tp {cost.tp} is not a registered "
                f"model, so it cannot be priced on other hardware or at another tp (give it at "
                f"tp 1, or register it)"
            )
        whole = found
    try:
        return CostModel(whole, profile, tp)
    except ValueError as exc:
        raise ValueError(f"{where}.tp: {exc}") from None


def page_bytes_of(cost: CostModel, block_tokens: int) -> int:
    """A page of ``block_tokens`` tokens of the whole model over ``cost``'s tp GPUs: every GPU's
    shard (a replicated KV head counts on every GPU that holds it)."""
    return cost.kv_bytes_per_token * cost.tp * block_tokens


def check_pages_cross(costs: Sequence[CostModel], block_tokens: int, key: str) -> None:
    """KV crosses between replicas (``key``: a shared store, disaggregation): every replica must
    hold a page in the same bytes over its GPUs. Groups at different tp do, unless one of them
    replicates KV heads (more GPUs than KV heads): refused, naming the group's tp."""
    whole = [page_bytes_of(c, block_tokens) for c in costs]
    if len(set(whole)) > 1:
        tps = sorted({c.tp for c in costs})
        raise ValueError(
            f"cluster.groups: tp {tps} with {key}: a page takes {sorted(set(whole))} bytes "
            f"over the replicas' GPUs (a tp above the model's KV heads replicates them), so KV "
            f"could not cross between them; choose tps that split the KV heads"
        )


def check_groups(groups: Sequence[ReplicaGroup], replicas: int) -> None:
    """Every group's keys, and their counts against ``cluster.replicas``."""
    for i, g in enumerate(groups):
        g.check(f"cluster.groups[{i}]")
    if groups:
        total = sum(g.replicas for g in groups)
        if total != replicas:
            raise ValueError(
                f"cluster.groups: the groups' replicas sum to {total}, but cluster.replicas is "
                f"{replicas}"
            )


def fleet_label(groups: Sequence[ReplicaGroup], hardware: str, short=lambda s: s) -> str:
    """A short name for a fleet: each group's count, its hardware (``hardware``: the run's,
    where it sets none) and the other keys it sets, as ``1x h100-sxm + 2x a100-sxm gpu=20 cpu=0
    policy=arc``; ``short`` shortens a hardware path to its file name."""

    def one(g: ReplicaGroup) -> str:
        parts = [f"{g.replicas}x {short(hardware if g.hardware is None else g.hardware)}"]
        for key in ("gpu_kv_gb", "cpu_kv_gb"):
            value = getattr(g, key)
            if value is not None:
                parts.append(f"{key.removesuffix('_kv_gb')}={value:g}")
        if g.policy is not None:
            parts.append(f"policy={g.policy}")
        if g.tp is not None:
            parts.append(f"tp={g.tp}")
        return " ".join(parts)

    return " + ".join(one(g) for g in groups)
