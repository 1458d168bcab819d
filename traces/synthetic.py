"""A seeded, ShareGPT-like multi-turn trace generator.

Lengths and turn counts default to the ShareGPT V3 fit in ``traces/data/sharegpt_fit.yaml``
(written by ``python -m traces.fit_sharegpt``; source, date and goodness of fit are in the file).
Timing is NOT fitted (ShareGPT has no timestamps): Poisson session starts and lognormal think times
are documented assumptions, configurable. Turn counts, prompt and output lengths are drawn
independently of each other (ShareGPT's correlations are not modelled).

Determinism: one numpy SeedSequence(seed) is split into one stream per quantity (arrivals, turn
counts, first prompts, later prompts, outputs, think times), and every draw is consumed in session
order, so the same config gives an identical trace and a longer trace (more sessions, same seed)
starts with exactly the sessions of a shorter one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

import numpy as np
import yaml

from traces.dists import LogNormalMix, ThinkTime
from traces.records import Session, TraceError, TraceLoad, Turn, sort_sessions

# libyaml's safe loader where it is built (about ten times faster): the fit is this package's own
# file, which both loaders read alike (its tests check it).
FIT_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


@lru_cache(maxsize=1)
def load_fit() -> dict:
    """The packaged ShareGPT fit (parsed once)."""
    text = resources.files("traces").joinpath("data/sharegpt_fit.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=FIT_LOADER)  # noqa: S506 - a SafeLoader either way


def _fit_mix(name: str) -> LogNormalMix:
    return LogNormalMix.from_dict(
        {k: load_fit()[name][k] for k in ("weights", "mu", "sigma")}, name
    )


def _fit_pmf() -> tuple[float, ...]:
    counts = load_fit()["turns"]["counts"]
    total = sum(counts)
    return tuple(c / total for c in counts)


_FIT = load_fit()
_HELP = "help"


@dataclass(frozen=True)
class SyntheticConfig:
    """Everything ``generate_synthetic`` needs. Field help is in each field's metadata["help"]."""

    sessions: int = field(default=200, metadata={_HELP: "number of sessions to generate"})
    seed: int = field(
        default=0,
        metadata={
            _HELP: "seed of the numpy Generator streams; the same "
            "config and seed give an identical trace"
        },
    )
    arrival_rate_per_s: float = field(
        default=1.0,
        metadata={
            _HELP: (
                "Poisson session starts per simulated second (ASSUMPTION). The default puts 200 sessions' "
                "starts within ~3.3 min; with ~6 turns of ~30 s think each, a session lasts minutes, so many "
                "overlap: concurrent load within a few minutes of simulated time"
            )
        },
    )
    turns_pmf: tuple[float, ...] = field(
        default=_fit_pmf(),
        metadata={
            _HELP: (
                "P(turns = i+1) for i = 0.. (normalised). Default: ShareGPT empirical pmf capped at "
                f"{_FIT['turns']['max_turns']} turns (mean {_FIT['turns']['gof']['mean_model']})"
            )
        },
    )
    first_prompt_tokens: LogNormalMix = field(
        default=_fit_mix("first_prompt_tokens"),
        metadata={_HELP: "new prompt tokens of turn 0 (system + first user message); ShareGPT fit"},
    )
    prompt_tokens: LogNormalMix = field(
        default=_fit_mix("prompt_tokens"),
        metadata={_HELP: "new prompt tokens of turns >= 1 (the user's next message); ShareGPT fit"},
    )
    output_tokens: LogNormalMix = field(
        default=_fit_mix("output_tokens"),
        metadata={_HELP: "reply tokens of every turn; ShareGPT fit"},
    )
    prompt_max_tokens: int = field(
        default=int(_FIT["prompt_tokens"]["clip"][1]),
        metadata={_HELP: "drawn prompt lengths are clipped to [1, prompt_max_tokens]"},
    )
    output_max_tokens: int = field(
        default=int(_FIT["output_tokens"]["clip"][1]),
        metadata={_HELP: "drawn reply lengths are clipped to [1, output_max_tokens]"},
    )
    think: ThinkTime = field(
        default=ThinkTime(),
        metadata={
            _HELP: (
                "think time between a reply and the next prompt: lognormal (median_s, sigma, max_s). "
                "ASSUMPTION (median 30 s, sigma 1.0): ShareGPT has no timestamps"
            )
        },
    )
    max_context_tokens: int | None = field(
        default=32768,
        metadata={
            _HELP: (
                "a session ends before a turn whose context H_k + p_k + o_k would exceed this (0.4 % of "
                "ShareGPT sessions do at 32768); a turn 0 over it has its prompt shortened. None: no cap"
            )
        },
    )

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise TraceError(f"synthetic config: {name} {what}, got {getattr(self, name)!r}")

        for name in ("sessions", "seed", "prompt_max_tokens", "output_max_tokens"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool), name, "must be an integer")
        need(self.sessions >= 0, "sessions", "must be >= 0")
        need(self.seed >= 0, "seed", "must be >= 0")
        need(self.prompt_max_tokens >= 1, "prompt_max_tokens", "must be >= 1")
        need(self.output_max_tokens >= 1, "output_max_tokens", "must be >= 1")
        r = self.arrival_rate_per_s
        need(
            isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and r > 0,
            "arrival_rate_per_s",
            "must be a finite number > 0",
        )
        c = self.max_context_tokens
        need(
            c is None or (isinstance(c, int) and not isinstance(c, bool) and c >= 2),
            "max_context_tokens",
            "must be an integer >= 2 or None",
        )
        for name, typ in (
            ("first_prompt_tokens", LogNormalMix),
            ("prompt_tokens", LogNormalMix),
            ("output_tokens", LogNormalMix),
            ("think", ThinkTime),
        ):
            need(isinstance(getattr(self, name), typ), name, f"must be a {typ.__name__}")
        try:
            pmf = tuple(float(p) for p in self.turns_pmf)
        except (TypeError, ValueError):
            pmf = ()
        need(
            len(pmf) > 0 and all(p >= 0 and math.isfinite(p) for p in pmf) and sum(pmf) > 0,
            "turns_pmf",
            "must be a non-empty list of probabilities >= 0 with a positive sum",
        )
        object.__setattr__(self, "turns_pmf", tuple(p / sum(pmf) for p in pmf))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "trace") -> "SyntheticConfig":
        """Build from YAML-like options; unknown keys and bad values raise TraceError naming them."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise TraceError(
                f"{where}: unknown synthetic option(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(names)}"
            )
        kw = dict(d)
        for name in ("first_prompt_tokens", "prompt_tokens", "output_tokens"):
            if isinstance(kw.get(name), Mapping):
                kw[name] = LogNormalMix.from_dict(kw[name], f"{where}.{name}")
        if isinstance(kw.get("think"), Mapping):
            kw["think"] = ThinkTime.from_dict(kw["think"], f"{where}.think")
        return cls(**kw)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get(_HELP, "") for f in fields(cls)}


def poisson_starts(rng: np.random.Generator, n: int, rate_per_s: float) -> np.ndarray:
    """n Poisson-process start times; the first session starts at 0 so traces begin at t = 0."""
    gaps = rng.exponential(1.0 / rate_per_s, size=n)
    if n:
        gaps[0] = 0.0
    return np.cumsum(gaps)


def generate_synthetic(cfg: SyntheticConfig | None = None) -> TraceLoad:
    """Draw ``cfg.sessions`` sessions. Same cfg -> identical TraceLoad."""
    cfg = cfg or SyntheticConfig()
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(6)]
    r_start, r_turns, r_first, r_prompt, r_out, r_think = streams
    n = cfg.sessions
    starts = poisson_starts(r_start, n, cfg.arrival_rate_per_s).tolist()
    n_turns = (r_turns.choice(len(cfg.turns_pmf), size=n, p=np.asarray(cfg.turns_pmf)) + 1).tolist()
    n_later = sum(n_turns) - n
    first = cfg.first_prompt_tokens.sample(r_first, n, 1, cfg.prompt_max_tokens).tolist()
    later = cfg.prompt_tokens.sample(r_prompt, n_later, 1, cfg.prompt_max_tokens).tolist()
    outputs = cfg.output_tokens.sample(r_out, n_later + n, 1, cfg.output_max_tokens).tolist()
    thinks = cfg.think.sample(r_think, n_later).tolist()

    cap = cfg.max_context_tokens
    width = max(6, len(str(max(n - 1, 0))))
    sessions, truncated, dropped, shortened = [], 0, 0, 0
    i_later = i_out = 0
    for i in range(n):
        k_total = n_turns[i]
        p0, o0 = first[i], outputs[i_out]
        if (
            cap is not None and p0 + o0 > cap
        ):  # turn 0 alone over the cap: keep the reply, trim the prompt
            o0 = min(o0, cap - 1)
            p0 = cap - o0
            shortened += 1
        turns = [Turn(prompt_tokens=p0, output_tokens=o0, arrival_s=starts[i])]
        context = p0 + o0
        for k in range(1, k_total):
            p, o = later[i_later + k - 1], outputs[i_out + k]
            if cap is not None and context + p + o > cap:
                truncated += 1
                dropped += k_total - k
                break
            turns.append(Turn(prompt_tokens=p, output_tokens=o, think_s=thinks[i_later + k - 1]))
            context += p + o
        # Advance by the drawn turn count, not the kept one, so later sessions do not shift.
        i_later += k_total - 1
        i_out += k_total
        sessions.append(Session(session_id=f"syn{i:0{width}d}", turns=tuple(turns)))
    return TraceLoad(
        sessions=sort_sessions(sessions),
        skipped=0,
        source=f"synthetic(seed={cfg.seed}, sessions={n})",
        info={
            "truncated_sessions": truncated,
            "dropped_turns": dropped,
            "shortened_first_prompts": shortened,
        },
    )
