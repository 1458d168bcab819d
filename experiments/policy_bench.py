"""``kvsim bench-policies``: how fast the eviction policies decide, and how fast cachesim replays.

A benchmark, not a test: it prints figures.

1. Eviction decision latency, for every online registered policy (offline ones, ``offline = True``,
   are skipped): ``resident`` engine units (uids of 16-page sessions, read through a
   ``sim.units.UnitView`` as in the engine; the Llama-3-8B/H100 cost model in the context) are
   inserted into one policy instance and warmed with Zipf hits; then each timed cycle is ``evict`` +
   ``insert`` of a new unit (the engine's eviction path; one untimed hit between cycles keeps the
   mix). Reported: p50 and p99 in microseconds, against the targets p50 < 100 us, p99 < 1 ms.
2. cachesim throughput on a Zipf stream of ``requests`` requests (unit sizes), for lru and fifo,
   side by side with libCacheSim on the same stream: natively (``process_trace`` over an
   oracleGeneral binary trace: C reader and C loop) and stepped from Python (``cache.get`` per
   request), with an initial hash table sized to the cache (2^max(16, bits(4c)) buckets; it grows).
   Requests per second, min/median/max over ``repeats`` runs, and the ratios of medians.
   The hit counts of the three are printed too (they must agree).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class PolicyBenchConfig:
    resident: int = 1_000_000  # units resident in the policy during the latency benchmark
    cycles: int = 20_000  # timed evict+insert cycles per policy
    requests: int = 1_000_000  # cachesim stream length
    objects: int = 100_000  # Zipf universe of the stream
    alpha: float = 1.0  # Zipf exponent
    capacity: int = 10_000  # cachesim capacity (objects)
    repeats: int = 3
    seed: int = 1
    policies: tuple[str, ...] = ()  # latency benchmark: () = every online registered policy
    throughput_policies: tuple[str, ...] = ("lru", "fifo")
    layers: int = 1  # units per page: 1 (block), or the layers of layer_block
    throughput: bool = True  # also run the cachesim throughput part


@dataclass(frozen=True, slots=True)
class Latency:
    policy: str
    p50_us: float
    p99_us: float
    max_us: float
    cycles: int


def _mmm(values, fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


# -- 1. eviction decision latency --------------------------------------------------------------------
def online_policies() -> list[str]:
    from sim.policies import available_policies, policy_class

    return [p for p in available_policies() if not getattr(policy_class(p), "offline", False)]


def decision_latency(policy: str, cfg: PolicyBenchConfig) -> Latency:
    from costmodels import cost_model
    from sim.policies import PolicyContext, make_policy
    from sim.units import UNIT_BITS, UNIT_MASK, SessionKV, Tier, UnitView, uid_of

    cost = cost_model("llama-3-8b", "h100-sxm")
    layers = cfg.layers
    unit = 16 * cost.kv_bytes_per_token // layers  # one page of all layers, or of one layer
    per_sess = 16 * layers  # 16 pages a session
    rng = np.random.default_rng(cfg.seed)
    n_new = cfg.cycles
    total = cfg.resident + n_new
    n_sess = -(-total // per_sess)
    sessions = [SessionKV(i, f"s{i}", i % 3) for i in range(n_sess)]
    think = rng.exponential(30.0, n_sess)
    for i, sess in enumerate(sessions):
        n = min(per_sess, total - per_sess * i)
        sess.tier.extend(bytes([Tier.DROPPED]) * n)  # placed in the tier when it enters
        sess.tier_pages[Tier.DROPPED] = n
        sess.tokens = 16 * -(-n // layers)
        sess.next_access_s = float(think[i])
    units = [uid_of(k // per_sess, k % per_sess) for k in range(total)]
    view = UnitView(sessions, unit, layers=layers)
    pol = make_policy(
        policy,
        PolicyContext(
            tier=Tier.GPU, block_tokens=16, num_layers=cost.model.num_layers, view=view, cost=cost
        ),
    )
    pol.set_capacity(cfg.resident * unit)

    def place(uid: int, tier: Tier) -> None:
        sess = sessions[uid >> UNIT_BITS]
        old = sess.tier[uid & UNIT_MASK]
        sess.tier[uid & UNIT_MASK] = tier
        sess.tier_pages[old] -= 1
        sess.tier_pages[tier] += 1

    now = 0.0
    for uid in units[: cfg.resident]:
        now += 1e-3
        place(uid, Tier.GPU)
        sessions[uid >> UNIT_BITS].last_access_s = now
        pol.insert(uid, now)
    resident = list(units[: cfg.resident])
    pos = {uid: i for i, uid in enumerate(resident)}
    p = 1.0 / np.arange(1, cfg.resident + 1) ** 0.9
    warm = rng.choice(cfg.resident, size=cfg.resident, p=p / p.sum()).tolist()
    for i in warm:  # warm-up hits (untimed)
        now += 1e-3
        uid = resident[i]
        sessions[uid >> UNIT_BITS].last_access_s = now
        pol.access(uid, now)
    hits_between = rng.integers(0, cfg.resident, n_new).tolist()
    samples = np.empty(n_new, dtype=np.int64)
    clock = time.perf_counter_ns
    for c in range(n_new):
        now += 1e-3
        new = units[cfg.resident + c]
        place(new, Tier.GPU)
        sessions[new >> UNIT_BITS].last_access_s = now
        t0 = clock()
        v = pol.evict(now)
        pol.insert(new, now)
        samples[c] = clock() - t0
        assert v is not None, f"{policy}: no victim among {cfg.resident} resident units"
        place(v, Tier.DROPPED)  # bookkeeping (untimed)
        i = pos.pop(v)
        resident[i] = new
        pos[new] = i
        uid = resident[hits_between[c]]
        sessions[uid >> UNIT_BITS].last_access_s = now
        pol.access(uid, now)
    us = samples / 1e3
    return Latency(
        policy, float(np.percentile(us, 50)), float(np.percentile(us, 99)), float(us.max()), n_new
    )


# -- 2. cachesim throughput --------------------------------------------------------------------------
def zipf_stream(cfg: PolicyBenchConfig):
    from sim.cachesim import stream_from_arrays

    rng = np.random.default_rng(cfg.seed)
    p = 1.0 / np.arange(1, cfg.objects + 1) ** cfg.alpha
    ranks = rng.choice(cfg.objects, size=cfg.requests, p=p / p.sum())
    return stream_from_arrays(rng.permutation(cfg.objects)[ranks])


def _write_oracle_general(stream, path: Path) -> None:
    """libCacheSim's oracleGeneral binary format: <u4 time, <u8 id, <u4 size, <i8 next access."""
    from sim.cachesim import next_access

    rec = np.zeros(
        len(stream), dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
    )
    n = len(stream)
    nxt = next_access(stream.obj_ids)
    rec["t"] = np.arange(n, dtype=np.uint32)
    rec["id"] = stream.obj_ids
    rec["sz"] = stream.sizes
    rec["nxt"] = np.where(nxt < n, nxt, -1)
    rec.tofile(path)


def _hashpower(capacity: int) -> int:
    """libCacheSim's initial hash table (it grows): the default 2^24 buckets would cost it more
    than a 1M-request replay, so it gets one sized to the cache, as its own CLI would."""
    return max(16, (4 * capacity).bit_length())


def _lcs_native(lcs, policy: str, trace: Path, capacity: int) -> tuple[float, float]:
    cls = {"lru": lcs.LRU, "fifo": lcs.FIFO}[policy]
    reader = lcs.TraceReader(str(trace), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = cls(capacity, hashpower=_hashpower(capacity))
    t0 = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - t0, miss_ratio


def _lcs_stepped(lcs, policy: str, stream, capacity: int) -> tuple[float, int]:
    cache = {"lru": lcs.LRU, "fifo": lcs.FIFO}[policy](capacity, hashpower=_hashpower(capacity))
    req = lcs.Request()
    get = cache.get
    ids = stream.obj_ids.tolist()
    t0 = time.perf_counter()
    hits = 0
    for o in ids:
        req.obj_id = o
        hits += get(req)
    return time.perf_counter() - t0, hits


def throughput(cfg: PolicyBenchConfig, echo=print) -> dict:
    from sim.cachesim import simulate_cache

    try:
        import libcachesim as lcs
    except ImportError:
        lcs = None
    stream = zipf_stream(cfg)
    n = len(stream)
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "zipf.oracleGeneral.bin"
        if lcs is not None:
            _write_oracle_general(stream, trace)
        for policy in cfg.throughput_policies:
            ours, native, stepped = [], [], []
            hits = lcs_hits_native = lcs_hits_stepped = None
            for _ in range(cfg.repeats):
                t0 = time.perf_counter()
                res = simulate_cache(stream, policy, cfg.capacity)
                ours.append(n / (time.perf_counter() - t0))
                hits = res.hits
                if lcs is not None:
                    wall, miss_ratio = _lcs_native(lcs, policy, trace, cfg.capacity)
                    native.append(n / wall)
                    lcs_hits_native = round((1 - miss_ratio) * n)
                    wall, lcs_hits_stepped = _lcs_stepped(lcs, policy, stream, cfg.capacity)
                    stepped.append(n / wall)
            echo(
                f"cachesim {policy}, {n:,} Zipf({cfg.alpha}) requests over {cfg.objects:,} objects, "
                f"capacity {cfg.capacity:,}: hits kvsim {hits:,}"
                + (
                    f", libCacheSim native {lcs_hits_native:,}, stepped {lcs_hits_stepped:,}"
                    if lcs is not None
                    else ""
                )
            )
            echo(
                f"  kvsim cachesim          Mreq/s min/median/max: {_mmm([x / 1e6 for x in ours], '.3f')}"
            )
            fig = {"kvsim_req_s": statistics.median(ours), "hits": hits}
            if lcs is not None:
                echo(
                    f"  libCacheSim native      Mreq/s min/median/max: {_mmm([x / 1e6 for x in native], '.3f')}"
                )
                echo(
                    f"  libCacheSim from Python Mreq/s min/median/max: {_mmm([x / 1e6 for x in stepped], '.3f')}"
                )
                r_native = statistics.median(ours) / statistics.median(native)
                r_stepped = statistics.median(ours) / statistics.median(stepped)
                echo(
                    f"  ratio kvsim / libCacheSim: {r_native:.3f} (native), {r_stepped:.3f} (stepped from Python)"
                )
                fig.update(
                    lcs_native_req_s=statistics.median(native),
                    lcs_stepped_req_s=statistics.median(stepped),
                    ratio_native=r_native,
                    ratio_stepped=r_stepped,
                )
            else:
                echo(
                    "  libcachesim is not installed (pip install libcachesim): no reference figures"
                )
            figures[policy] = fig
    return figures


def _python_loop_mreq_s() -> float:
    """This interpreter's speed on a bare dict-lookup loop (context for the figures)."""
    ids = list(range(1_000_000))
    d: dict[int, int] = {}
    t0 = time.perf_counter()
    for x in ids:
        if d.get(x) is None:
            d[x] = 1
    return 1.0 / (time.perf_counter() - t0)


def run_policy_bench(cfg: PolicyBenchConfig, echo=print) -> dict:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    echo(
        f"machine: {os.cpu_count()} CPUs, load average {load:.2f}; a bare Python dict-lookup loop "
        f"runs {_python_loop_mreq_s():.2f} M iterations/s"
    )
    policies = list(cfg.policies) or online_policies()
    kind = "page units" if cfg.layers == 1 else f"layer units ({cfg.layers} per page)"
    echo(
        f"eviction decision latency (evict + insert), {cfg.resident:,} resident {kind}, "
        f"{cfg.cycles:,} cycles; targets p50 < 100 us, p99 < 1000 us"
    )
    echo(f"  {'policy':<18}{'p50 us':>10}{'p99 us':>10}{'max us':>10}  targets")
    lat = {}
    for p in policies:
        try:
            r = decision_latency(p, cfg)
        except Exception as exc:  # noqa: BLE001 - a broken policy is reported, the others still run
            echo(f"  {p:<18} failed: {type(exc).__name__}: {exc}")
            continue
        ok = "pass" if r.p50_us < 100 and r.p99_us < 1000 else "FAIL"
        echo(f"  {p:<18}{r.p50_us:>10.2f}{r.p99_us:>10.2f}{r.max_us:>10.0f}  {ok}")
        lat[p] = r
    return {"latency": lat, "throughput": throughput(cfg, echo) if cfg.throughput else None}
