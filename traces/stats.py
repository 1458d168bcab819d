"""What a user checks in a trace before simulating it: its sessions and turns, lengths, arrivals,
how much of each prefill is history, and how much KV an infinite prefix cache could reuse.

Computed on the canonical sessions every loader returns, so one function serves every trace kind.
A turn's *input* is what its request sends: its history H_k plus its new prompt p_k. Arrivals are
the turns' own timestamps (closed-loop turns, timed by think time, have none until simulated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from traces.records import Session

PERCENTILES = (50, 90, 99)
# A turn with prefix hashes: (arrival, order, hashes, input tokens, block tokens).
_Request = tuple[float, int, tuple[int, ...], int, int | None]


@dataclass(frozen=True, slots=True)
class Dist:
    """Mean, percentiles and max of a sample (NaN when empty)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Dist:
        a = np.asarray(values, dtype=float)
        if a.size == 0:
            return cls(0, *([math.nan] * 5))
        p50, p90, p99 = np.percentile(a, PERCENTILES)
        return cls(int(a.size), float(a.mean()), float(p50), float(p90), float(p99), float(a.max()))


@dataclass(frozen=True, slots=True)
class PrefixReuse:
    """The prefix-cache upper bound: with an infinite cache, replayed in arrival order, the share
    of block references (and of their tokens) whose block an earlier request already computed."""

    block_tokens: int
    references: int
    unique: int
    repeated_share: float
    repeated_token_share: float


@dataclass(frozen=True, slots=True)
class TraceStats:
    sessions: int
    turns: int
    turns_per_session: Dist
    multi_turn_share: float  # sessions with two or more turns
    input_tokens: Dist  # H_k + p_k per turn
    prompt_tokens: Dist  # p_k
    output_tokens: Dist
    interarrival_s: Dist  # between consecutive timestamped turns, in time order
    interarrival_cv: float
    duration_s: float
    history_share_by_turn: tuple[tuple[int, float], ...]  # (turn index, sum H / sum input)
    history_share: float
    prefix_reuse: PrefixReuse | None  # None when the trace carries no prefix hashes


def trace_stats(sessions: Sequence[Session], max_turn_index: int = 10) -> TraceStats:
    """The statistics of ``sessions``; history shares for turn indices up to ``max_turn_index``
    (later turns are pooled into the last row)."""
    counts = [len(s.turns) for s in sessions]
    inputs, prompts, outputs, hist, times = [], [], [], [], []
    by_turn: dict[int, list[int]] = {}
    requests: list[_Request] = []
    for s in sessions:
        h = 0
        for k, t in enumerate(s.turns):
            inputs.append(h + t.prompt_tokens)
            prompts.append(t.prompt_tokens)
            outputs.append(t.output_tokens)
            hist.append(h)
            row = by_turn.setdefault(min(k, max_turn_index), [0, 0])
            row[0] += h
            row[1] += h + t.prompt_tokens
            if t.arrival_s is not None:
                times.append(t.arrival_s)
            if t.prefix_hashes:
                requests.append(
                    (
                        t.arrival_s if t.arrival_s is not None else math.inf,
                        len(requests),
                        t.prefix_hashes,
                        h + t.prompt_tokens,
                        s.block_tokens,
                    )
                )
            h += t.prompt_tokens + t.output_tokens
    times_a = np.sort(np.asarray(times, dtype=float))
    gaps = np.diff(times_a)
    cv = float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else math.nan
    total_input = sum(inputs)
    return TraceStats(
        sessions=len(sessions),
        turns=sum(counts),
        turns_per_session=Dist.of(counts),
        multi_turn_share=sum(c >= 2 for c in counts) / len(counts) if counts else math.nan,
        input_tokens=Dist.of(inputs),
        prompt_tokens=Dist.of(prompts),
        output_tokens=Dist.of(outputs),
        interarrival_s=Dist.of(gaps),
        interarrival_cv=cv,
        duration_s=float(times_a[-1] - times_a[0]) if times_a.size else math.nan,
        history_share_by_turn=tuple(
            (k, v[0] / v[1] if v[1] else math.nan) for k, v in sorted(by_turn.items())
        ),
        history_share=sum(hist) / total_input if total_input else math.nan,
        prefix_reuse=_prefix_reuse(requests),
    )


def _prefix_reuse(requests: list[_Request]) -> PrefixReuse | None:
    """Replay the requests' block hashes in arrival order against an infinite cache. Tokens: full
    blocks count ``block_tokens``, a request's last block what its input leaves for it."""
    if not requests:
        return None
    requests.sort(key=lambda r: (r[0], r[1]))
    seen: set[int] = set()
    refs = repeated = 0
    tokens = repeated_tokens = 0
    bt = requests[0][4] or 1
    for _, _, hashes, n_input, block_tokens in requests:
        bt = block_tokens or bt
        last = min(max(n_input - bt * (len(hashes) - 1), 1), bt)
        for i, h in enumerate(hashes):
            w = last if i == len(hashes) - 1 else bt
            refs += 1
            tokens += w
            if h in seen:
                repeated += 1
                repeated_tokens += w
            else:
                seen.add(h)
    return PrefixReuse(bt, refs, len(seen), repeated / refs, repeated_tokens / tokens)


def arrival_notes(kind: str, info: Mapping[str, Any]) -> list[str]:
    """What the inter-arrival figures of a trace of ``kind`` are when they are not its recorded
    times: ShareGPT's are drawn (it has no timestamps), Mooncake's jittered within the buckets its
    timestamps are quantised to (``info`` is the loader's ``TraceLoad.info``)."""
    if kind == "sharegpt":
        return [
            "ShareGPT has no timestamps: these are drawn session starts (a seeded Poisson "
            "process), not measured; later turns follow drawn think times"
        ]
    bucket = info.get("bucket_s") or 0.0
    if kind == "mooncake" and bucket > 0:
        return [
            f"Mooncake's timestamps are in {bucket:g}-s buckets: each arrival is jittered "
            "(drawn uniformly, seeded) within its bucket, so gaps shorter than a bucket are "
            "drawn, not measured"
        ]
    return []


def format_stats(st: TraceStats, source: str = "", notes: Sequence[str] = ()) -> str:
    """A plain-text report: what ``kvsim trace stats`` prints; ``notes`` (``arrival_notes``) follow
    the inter-arrival figures."""

    def dist(name: str, d: Dist, unit: str = "", fmt: str = ",.0f") -> str:
        if d.n == 0:
            return f"  {name:<22} (none)"
        vals = " ".join(
            f"{k} {format(v, fmt)}{unit}"
            for k, v in (
                ("mean", d.mean),
                ("p50", d.p50),
                ("p90", d.p90),
                ("p99", d.p99),
                ("max", d.max),
            )
        )
        return f"  {name:<22} {vals}"

    lines = [
        f"trace {source}".rstrip(),
        f"  sessions               {st.sessions:,} ({st.multi_turn_share:.1%} multi-turn)",
        f"  turns                  {st.turns:,}",
        dist("turns per session", st.turns_per_session, fmt=",.1f"),
        dist("input tokens (H + p)", st.input_tokens),
        dist("new prompt tokens", st.prompt_tokens),
        dist("output tokens", st.output_tokens),
        dist("inter-arrival", st.interarrival_s, " s", ".3f"),
    ]
    if st.interarrival_s.n:
        lines.append(
            f"  {'':<22} CV {st.interarrival_cv:.2f}, duration {st.duration_s:,.1f} s, "
            f"{(st.interarrival_s.n + 1) / st.duration_s if st.duration_s else math.nan:.2f}"
            f" turns/s"
        )
    lines += [f"  {'':<22} note: {n}" for n in notes]
    lines.append(
        f"  history share          {st.history_share:.1%} of all input tokens; by turn "
        "index: "
        + ", ".join(
            f"{k}{'+' if i == len(st.history_share_by_turn) - 1 and i else ''}: {v:.0%}"
            for i, (k, v) in enumerate(st.history_share_by_turn)
        )
    )
    if st.prefix_reuse is None:
        lines.append("  prefix reuse           (no prefix hashes in this trace)")
    else:
        r = st.prefix_reuse
        lines.append(
            f"  prefix reuse bound     {r.repeated_share:.1%} of {r.references:,} block "
            f"references ({r.repeated_token_share:.1%} of their tokens) repeat an earlier "
            f"block; {r.unique:,} unique blocks of {r.block_tokens} tokens"
        )
    return "\n".join(lines)
