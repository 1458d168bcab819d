"""Fit the synthetic generator's defaults to ShareGPT V3 and write ``traces/data/sharegpt_fit.yaml``.

    python -m traces.fit_sharegpt [--data PATH] [--out PATH]

Input: ``shared/data/sharegpt/sharegpt_v3_messages_derived.csv`` (PROVENANCE 1.5: one row per message
of 17,671 ShareGPT V3 records; columns conv_id, msg_idx, role, n_chars, n_tokens_cl100k). Sessions are
the conv_id before the last '_' and turns follow ``traces.conversation`` (the rule ``load_sharegpt``
uses), so the fitted targets describe the loader's output, with cl100k_base token counts.

Fitted:
- turns per session: the empirical pmf over 1..MAX_TURNS (the few longer sessions folded into MAX_TURNS);
- new prompt tokens of turn 0 (first prompt, incl. system text), of later turns, and reply tokens:
  mixtures of 1..3 lognormals on ln(tokens) by EM, the number of components picked by BIC (a single
  lognormal misses the ShareGPT quantiles by 20-60 %). Draws are rounded and clipped to [1, cap];
- chars per token for the offline tokenizer estimate.
Goodness of fit: data vs model quantiles (exact model quantiles of the rounded, clipped draw), means,
and the KS distance on the integer support.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

from traces.conversation import (
    Message,
    PairStats,
    TurnTokens,
    join_pieces,
    pair_turns,
    role_kind,
    split_record_id,
)
from traces.dists import LogNormalMix
from traces.records import TraceError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = (
    REPO_ROOT.parent / "shared" / "data" / "sharegpt" / "sharegpt_v3_messages_derived.csv"
)
FIT_PATH = Path(__file__).resolve().parent / "data" / "sharegpt_fit.yaml"

MAX_TURNS = 100  # pmf support cap; sessions with more turns (0.4 % in ShareGPT) count as 100
PROMPT_MAX_TOKENS = 16384  # clip for drawn prompt lengths (ShareGPT p99.9 of later prompts ~3.1k)
OUTPUT_MAX_TOKENS = 4096  # clip for drawn reply lengths (ShareGPT p99.9 ~800)
MAX_COMPONENTS = 3
SIGMA_FLOOR = 0.2  # ln-space; below it a component collapses onto one integer (ln 2 = 0.69)
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
CSV_COLUMNS = ("conv_id", "msg_idx", "role", "n_chars", "n_tokens_cl100k")


@dataclass(frozen=True)
class LengthFit:
    """A fitted length distribution and how well its rounded, clipped draws match the data."""

    dist: LogNormalMix
    lo: int
    hi: int
    n: int
    bic: dict[int, float]
    data_quantiles: tuple[int, ...]
    model_quantiles: tuple[int, ...]
    data_mean: float
    model_mean: float
    ks: float


@dataclass(frozen=True)
class TurnsFit:
    counts: tuple[int, ...]  # counts[i] = sessions with i+1 turns (the last bin holds >= MAX_TURNS)
    data_quantiles: tuple[int, ...]
    data_mean: float
    model_mean: float
    data_max: int


@dataclass(frozen=True)
class TokenizerFit:
    chars_per_token: float  # token-weighted: sum(chars) / sum(tokens)
    median_ratio: float  # median of per-message chars/tokens
    mape: float  # per message, of round(chars / chars_per_token) vs cl100k tokens
    median_ape: float
    messages: int


@dataclass(frozen=True)
class ShareGPTFit:
    turns: TurnsFit
    first_prompt_tokens: LengthFit
    prompt_tokens: LengthFit
    output_tokens: LengthFit
    tokenizer: TokenizerFit
    counts: dict[str, int | float]


def read_messages(path: str | Path) -> pd.DataFrame:
    """The derived per-message CSV, checked for its columns."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"conv_id": str, "role": str}, keep_default_na=False)
    except (OSError, pd.errors.ParserError) as e:
        raise TraceError(f"{path}: cannot read CSV: {e}") from e
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(f"{path.name}: missing column(s) {missing}; expected {list(CSV_COLUMNS)}")
    return df


def sessions_from_messages(df: pd.DataFrame) -> tuple[dict[str, list[TurnTokens]], dict[str, int]]:
    """Rebuild sessions (base id -> turns, sessions with >= 1 turn) and count the rules that fired."""
    split = {c: split_record_id(c) for c in df["conv_id"].unique().tolist()}  # per record, not row
    conv = df["conv_id"].tolist()
    df = df.assign(
        _base=[split[c][0] for c in conv],
        _suf=[-1 if split[c][1] is None else split[c][1] for c in conv],
    )
    df = df.sort_values(["_base", "_suf", "conv_id", "msg_idx"], kind="stable")
    stats = PairStats()
    sessions: dict[str, list[TurnTokens]] = {}
    unknown_roles = 0
    # Plain lists: iterating pandas columns row by row is an order of magnitude slower.
    cols = zip(
        *(df[c].tolist() for c in ("_base", "conv_id", "role", "n_chars", "n_tokens_cl100k"))
    )
    base_prev: str | None = None
    conv_prev = None
    pieces: list[list[Message]] = []

    def flush() -> None:
        if pieces:
            assert base_prev is not None  # pieces only exist once a row set it
            turns = pair_turns(join_pieces(pieces, stats), stats)
            if turns:
                sessions[base_prev] = turns

    for base, conv, role, n_chars, n_tok in cols:
        if base != base_prev:
            flush()
            pieces, base_prev, conv_prev = [], base, None
        if conv != conv_prev:
            pieces.append([])
            conv_prev = conv
        kind = role_kind(role)
        if kind is None:
            unknown_roles += 1
            continue
        # Content identity without the text: kind, characters and tokens (see traces.conversation).
        pieces[-1].append(Message(kind, int(n_tok), (kind, int(n_chars), int(n_tok))))
    flush()
    counts = {
        "messages": len(df),
        "records": int(df["conv_id"].nunique()),
        "unknown_role_messages": unknown_roles,
        **stats.as_dict(),
    }
    return sessions, counts


def fit_lognormal_mix(
    values: np.ndarray, k: int, iters: int = 3000, tol: float = 1e-10
) -> tuple[LogNormalMix, float]:
    """EM for a k-component Gaussian mixture on ln(values); returns the fit and its log-likelihood.

    Runs on the distinct values with their counts (fast and exact for integer data). Initialised at
    the k quantile midpoints, so the result is deterministic.
    """
    v, cnt = np.unique(np.asarray(values, dtype=float), return_counts=True)
    x, wts = np.log(v), cnt / cnt.sum()
    xs = np.repeat(x, cnt)
    mu = np.quantile(xs, (np.arange(k) + 0.5) / k)
    sd = np.full(k, max(xs.std(), SIGMA_FLOOR))
    w = np.full(k, 1.0 / k)
    prev = -np.inf
    for _ in range(iters):
        lp = (
            -0.5 * ((x[:, None] - mu) / sd) ** 2
            - np.log(sd)
            + np.log(w)
            - 0.5 * math.log(2 * math.pi)
        )
        m = lp.max(axis=1, keepdims=True)
        r = np.exp(lp - m)
        ll = float(((np.log(r.sum(axis=1)) + m[:, 0]) * cnt).sum())
        r = r / r.sum(axis=1, keepdims=True) * wts[:, None]
        nk = r.sum(axis=0)
        w = nk
        mu = (r * x[:, None]).sum(axis=0) / nk
        sd = np.maximum(np.sqrt((r * (x[:, None] - mu) ** 2).sum(axis=0) / nk), SIGMA_FLOOR)
        if ll - prev < tol * abs(ll):
            break
        prev = ll
    order = np.argsort(mu)  # a canonical component order makes the YAML stable
    return LogNormalMix(tuple(w[order]), tuple(mu[order]), tuple(sd[order])), ll


def fit_length(values: np.ndarray, hi: int) -> LengthFit:
    """Fit 1..MAX_COMPONENTS lognormals to token counts (clipped to >= 1), keep the best BIC."""
    values = np.maximum(np.asarray(values, dtype=np.int64), 1)
    n = len(values)
    fits: dict[int, LogNormalMix] = {}
    bic: dict[int, float] = {}
    for k in range(1, MAX_COMPONENTS + 1):
        fits[k], ll = fit_lognormal_mix(values, k)
        bic[k] = round(-2 * ll + (3 * k - 1) * math.log(n), 1)
    best = min(bic, key=bic.__getitem__)
    dist = fits[best]
    support, cdf = dist.int_cdf(1, hi)
    pmf = np.diff(np.concatenate(([0.0], cdf)))
    data_sorted = np.sort(values)
    data_cdf = np.searchsorted(data_sorted, support, side="right") / n
    return LengthFit(
        dist=dist,
        lo=1,
        hi=hi,
        n=n,
        bic=bic,
        data_quantiles=tuple(int(q) for q in np.quantile(values, QUANTILES, method="inverted_cdf")),
        model_quantiles=tuple(int(q) for q in dist.quantiles(QUANTILES, 1, hi)),
        data_mean=float(values.mean()),
        model_mean=float((support * pmf).sum()),
        ks=float(np.abs(data_cdf - cdf).max()),
    )


def fit_turns(n_turns: np.ndarray) -> TurnsFit:
    folded = np.minimum(n_turns, MAX_TURNS)
    counts = np.bincount(folded, minlength=MAX_TURNS + 1)[1:]
    return TurnsFit(
        counts=tuple(int(c) for c in counts),
        data_quantiles=tuple(
            int(q) for q in np.quantile(n_turns, QUANTILES, method="inverted_cdf")
        ),
        data_mean=float(n_turns.mean()),
        model_mean=float(folded.mean()),
        data_max=int(n_turns.max()),
    )


def fit_tokenizer(path: str | Path) -> TokenizerFit:
    df = pd.read_csv(path, usecols=["n_chars", "n_tokens_cl100k"])
    df = df[df["n_tokens_cl100k"] > 0]
    chars, toks = df["n_chars"].to_numpy(float), df["n_tokens_cl100k"].to_numpy(float)
    ratio = chars.sum() / toks.sum()
    est = np.maximum(1.0, np.floor(chars / round(ratio, 2) + 0.5))  # as CharEstimate counts
    ape = np.abs(est - toks) / toks
    return TokenizerFit(
        chars_per_token=round(float(ratio), 2),
        median_ratio=round(float(np.median(chars / toks)), 3),
        mape=round(float(ape.mean()), 4),
        median_ape=round(float(np.median(ape)), 4),
        messages=len(df),
    )


def fit_sharegpt(path: str | Path = DEFAULT_DATA) -> ShareGPTFit:
    """Fit every default of ``SyntheticConfig`` that ShareGPT can inform. Deterministic."""
    by_base, message_counts = sessions_from_messages(read_messages(path))
    sessions = list(by_base.values())
    if not sessions:
        raise TraceError(f"{path}: no sessions with at least one turn")
    n_turns = np.array([len(s) for s in sessions])
    first = np.array([s[0].prompt for s in sessions])
    later = np.array([t.prompt for s in sessions for t in s[1:]])
    outputs = np.array([t.output for s in sessions for t in s])
    totals = np.array([sum(t.prompt + t.output for t in s) for s in sessions])
    counts: dict[str, int | float] = {
        **message_counts,
        "sessions": len(sessions),
        "turns": int(n_turns.sum()),
        "session_tokens_p50": int(np.median(totals)),
        "session_tokens_p99": int(np.quantile(totals, 0.99)),
        "share_sessions_over_32768_tokens": round(float((totals > 32768).mean()), 4),
    }
    return ShareGPTFit(
        turns=fit_turns(n_turns),
        first_prompt_tokens=fit_length(first, PROMPT_MAX_TOKENS),
        prompt_tokens=fit_length(later, PROMPT_MAX_TOKENS),
        output_tokens=fit_length(outputs, OUTPUT_MAX_TOKENS),
        tokenizer=fit_tokenizer(path),
        counts=counts,
    )


def _length_dict(f: LengthFit, what: str) -> dict:
    rel = [round(m / d - 1, 3) for m, d in zip(f.model_quantiles, f.data_quantiles)]
    return {
        "what": what,
        "form": "lognormal_mixture",
        **f.dist.to_dict(),
        "clip": [f.lo, f.hi],
        "selection": {"components_by_bic": {k: v for k, v in f.bic.items()}},
        "gof": {
            "n": f.n,
            "quantiles": list(QUANTILES),
            "data": list(f.data_quantiles),
            "model": list(f.model_quantiles),
            "rel_err": rel,
            "mean_data": round(f.data_mean, 1),
            "mean_model": round(f.model_mean, 1),
            "ks": round(f.ks, 4),
        },
    }


def fit_to_dict(fit: ShareGPTFit, source: Path, date: str) -> dict:
    """The YAML document: parameters first, then provenance and goodness of fit."""
    try:
        shown = str(source.resolve().relative_to(REPO_ROOT.parent))
    except ValueError:
        shown = str(source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    t, tok = fit.turns, fit.tokenizer
    return {
        "source": {
            "file": shown,
            "sha256": digest,
            "description": "ShareGPT V3 unfiltered cleaned split, per-message cl100k_base token "
            "counts (PROVENANCE.md 1.5, DERIVED); sessions = conv_id before "
            "the last '_', turns by traces.conversation",
            "fitted_by": "python -m traces.fit_sharegpt",
            "date": date,
        },
        "turns": {
            "what": "turns per session; pmf[i] is P(i+1 turns), sessions longer than "
            f"{MAX_TURNS} folded into {MAX_TURNS}",
            "form": "empirical_pmf",
            "max_turns": MAX_TURNS,
            "counts": list(t.counts),
            "gof": {
                "quantiles": list(QUANTILES),
                "data": list(t.data_quantiles),
                "mean_data": round(t.data_mean, 3),
                "mean_model": round(t.model_mean, 3),
                "max_data": t.data_max,
            },
        },
        "first_prompt_tokens": _length_dict(
            fit.first_prompt_tokens, "new prompt tokens of turn 0 (incl. system text)"
        ),
        "prompt_tokens": _length_dict(fit.prompt_tokens, "new prompt tokens of turns >= 1"),
        "output_tokens": _length_dict(fit.output_tokens, "reply tokens of every turn"),
        "tokenizer": {
            "chars_per_token": tok.chars_per_token,
            "rule": "token-weighted sum(chars)/sum(tokens), cl100k_base",
            "median_message_ratio": tok.median_ratio,
            "mape_per_message": tok.mape,
            "median_ape_per_message": tok.median_ape,
            "messages": tok.messages,
        },
        "counts": dict(fit.counts),
    }


def _print(doc: dict) -> None:
    for name in ("first_prompt_tokens", "prompt_tokens", "output_tokens"):
        d = doc[name]
        print(f"{name}: weights={d['weights']} mu={d['mu']} sigma={d['sigma']} clip={d['clip']}")
        g = d["gof"]
        print(
            f"  q{g['quantiles']}\n  data  {g['data']}\n  model {g['model']}\n"
            f"  rel_err {g['rel_err']}  mean {g['mean_data']} vs {g['mean_model']}  KS {g['ks']}"
        )
    t = doc["turns"]
    print(
        f"turns: data q{t['gof']['quantiles']} = {t['gof']['data']}, mean {t['gof']['mean_data']} "
        f"(model, capped at {t['max_turns']}: {t['gof']['mean_model']})"
    )
    print(f"tokenizer: {doc['tokenizer']}")
    print(f"counts: {doc['counts']}")


class _FlowListDumper(yaml.SafeDumper):
    """Block-style mappings (readable), flow-style lists (quantile rows stay on one line)."""


_FlowListDumper.add_representer(
    list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m traces.fit_sharegpt", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="sharegpt_v3_messages_derived.csv"
    )
    ap.add_argument(
        "--out", type=Path, default=FIT_PATH, help="YAML to write (default: package data)"
    )
    args = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"error: {args.data}: not found (pass --data)", file=sys.stderr)
        return 2
    doc = fit_to_dict(fit_sharegpt(args.data), args.data, _dt.date.today().isoformat())
    _print(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        fh.write("# Written by `python -m traces.fit_sharegpt`; do not edit by hand.\n")
        yaml.dump(doc, fh, Dumper=_FlowListDumper, sort_keys=False, width=100)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
