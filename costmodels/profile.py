"""Profiles: the fitted constants of each cost term, in model-independent physical form.

A profile says how fast *this GPU with this backend* runs each kind of work (an effective FLOP/s,
an effective bandwidth, a fixed cost), never how long *a given model* takes. The model config turns
the work into bytes and FLOPs (``costmodels.cost``), so one profile serves every model
(do not key constants by model name as Vidur does: that forces a re-profile per model).

All constants are per GPU and, where they say so, per decoder layer. The YAML form is what
``to_dict`` writes; ``costmodels/profiles/README.md`` documents it for humans.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import _strict as S
from .elementwise import ElementwiseOp, per_op_problem, uses_per_op_form
from .gemm import uses_per_gemm_form

FORMAT_VERSION = 1
PROFILES_DIR = Path(__file__).with_name("profiles")


# --- the cost terms ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LinearTerm:
    """Token-level work of one layer: the four GEMMs (QKV, O, gate/up, down) and the elementwise ops.

    With the optional fields at their defaults (the layer form):
      t(N) = tau_s + max(weight_bytes / weight_bw_Bps, 2 * N * P / flops) + N * ew_bytes / elementwise_bw_Bps
    with P the layer's linear params and ew_bytes ``ModelSpec.elementwise_bytes_per_token_layer``.
    With any of ``gemm_knee_p``, ``gemm_activation_bytes``, ``gemm_tiles`` set (the per-GEMM form,
    ``costmodels.gemm``), the max is replaced by the sum over the four GEMMs (``ModelSpec.gemm_shapes``)
    of smax(bytes_g / weight_bw_Bps, compute_g; gemm_knee_p). With ``elementwise_ops`` set (the
    per-op form, ``costmodels.elementwise``), N * ew_bytes / elementwise_bw_Bps is replaced by the
    sum over the layer's elementwise kernels (``ModelSpec.elementwise_ops``) of their kind's form.
    ``tau_s`` is always the layer's additive fixed cost: the GEMMs' (one per GEMM in the per-GEMM
    form) plus, in the layer form, the elementwise ops'; in the per-op form each kind's fixed cost
    is its own ``tau_s``, inside its smooth max, and ``elementwise_bw_Bps`` prices nothing (it is
    the layer form's bandwidth fitted on the same data, a summary).
    """

    tau_s: float  # fixed per-layer cost of the token-level kernels (launch, tails)
    weight_bw_Bps: float  # effective weight-read bandwidth: the floor at small N (memory-bound)
    flops: float  # effective dense FLOP/s: the slope at large N (compute-bound)
    elementwise_bw_Bps: (
        float  # effective bandwidth of norms, RoPE, residual adds, activation, KV write
    )
    # Per-GEMM form (costmodels.gemm); the defaults give the layer form above, bit for bit.
    gemm_knee_p: float = 0.0  # p of smax(memory, compute; p) per GEMM; 0: the hard max
    gemm_activation_bytes: bool = False  # memory also reads the input and writes the output
    gemm_tiles: tuple[tuple[int, int], ...] = ()  # output tiles (rows, cols); (): no tiles
    gemm_tile_overhead: float = 0.0  # c_tile: a smaller tile's extra cost, in 1/elements
    gemm_wave_tail: float = 0.0  # cost of a partial last wave of tiles (0: none, 1: a full wave)
    gemm_sm_count: int = 0  # SMs the tiles run in waves over (needed with gemm_tiles)
    # Per-op elementwise form (costmodels.elementwise); the defaults give the layer form, bit for bit.
    elementwise_ops: tuple[ElementwiseOp, ...] = ()  # one entry per kind; (): the layer form
    elementwise_sm_count: int = 0  # SMs the one-CTA-per-token kernels run in waves over
    elementwise_l2_bytes: int = 0  # L2 size: bytes past half of it pay spill_bw_Bps

    def form_problem(self) -> str | None:
        """Why the per-GEMM or per-op fields do not make a form, or None."""
        if self.gemm_knee_p and self.gemm_knee_p < 1:
            return f"gemm_knee_p must be 0 (hard max) or >= 1, got {self.gemm_knee_p}"
        if self.gemm_tiles and self.gemm_sm_count < 1:
            return "gemm_tiles need gemm_sm_count >= 1 (the SMs the tiles run in waves over)"
        if not self.gemm_tiles and (self.gemm_tile_overhead or self.gemm_wave_tail):
            return "gemm_tile_overhead and gemm_wave_tail need gemm_tiles"
        if self.gemm_wave_tail > 1:
            return f"gemm_wave_tail must be in [0, 1], got {self.gemm_wave_tail}"
        if not self.elementwise_ops and (self.elementwise_sm_count or self.elementwise_l2_bytes):
            return "elementwise_sm_count and elementwise_l2_bytes need elementwise_ops"
        return per_op_problem(self)


@dataclass(frozen=True, slots=True)
class PrefillAttnTerm:
    """Causal attention of the new tokens of prefilling sequences, in one layer.

    t = tau_s + per_seq_s * S + 4 * H_q * d * pairs / flops        pairs = sum n_new*(n_ctx + n_new/2)
          + query_elem_s * sum(n_new) * H_q * d                      per query row (Q in, O out)
          + wave_key_elem_s * d * wave_keys(...)                     kernels without split-KV
    ``pairs`` is FlashInfer's ``attention_flops`` count (flashinfer/testing/utils.py); the wave
    term is ``costmodels.cost.wave_keys`` over ``wave_sm_count`` SMs. The last three fields default
    to 0, which is the FLOP-only form.
    """

    tau_s: float
    flops: float  # effective attention FLOP/s
    per_seq_s: float  # per prefilling sequence (tile tails, plan entries)
    query_elem_s: float = 0.0  # per new token and query-head element: work that ignores the keys
    wave_key_elem_s: float = 0.0  # per key and head-dim element of the longest CTA in each wave
    wave_sm_count: int = 0  # SMs a wave fills; 0 when the kernel splits keys (no wave term)


@dataclass(frozen=True, slots=True)
class DecodeAttnTerm:
    """Paged decode attention, memory-bound, in one layer.

    t = tau_s + per_seq_s * B + C * kv_bytes_per_token_layer / kv_bw_Bps, C = total context tokens
          + wave_s * waves + d * (wave_key_elem_s * wave keys + latency_key_elem_s * longest)
    The second line is for kernels without split-KV (``costmodels.cost.decode_waves``): one CTA
    per (sequence, query head) streams that sequence's keys, rounded up to ``key_tile``, and CTAs
    run in waves over ``wave_sm_count`` SMs. Its fields default to 0, which is the split-KV form.
    """

    tau_s: float
    per_seq_s: float
    kv_bw_Bps: float  # effective KV-read bandwidth
    wave_s: float = 0.0  # per wave of CTAs (start-up: load the query, write the output)
    wave_key_elem_s: float = 0.0  # per key and head-dim element of the longest CTA in each wave
    # Per key and head-dim element of the longest CTA, once: the part of a CTA's key loop that
    # consecutive waves do not overlap (a lone wave streams slower per key than a train of them).
    latency_key_elem_s: float = 0.0
    wave_sm_count: int = 0  # SMs a wave fills; 0 when the kernel splits keys (no wave term)
    key_tile: int = 0  # keys a CTA loads per step; each context is rounded up to it (0: none)


@dataclass(frozen=True, slots=True)
class CopyTerm:
    """One host<->device direction, for a batch of ``copies`` copies issued back to back:

      t = max(start_s + copies * latency_s + bytes / bw_Bps,  copies * issue_s)

    The first line is the copy engine's: the first copy's latency (``start_s``), which the copies
    queued behind it overlap, then each further copy's own cost and the bytes at the link's rate.
    The second is the host's: copies cannot end before they are issued, one call each. With
    ``start_s`` and ``issue_s`` at 0 (every file written before they existed) this is the old form
    t = copies * latency_s + bytes / bw_Bps, bit for bit.
    """

    latency_s: float  # per copy call on the copy engine
    bw_Bps: float  # the link's rate for the bytes of large copies
    start_s: float = 0.0  # once per batch of back-to-back copies (0: none)
    issue_s: float = 0.0  # host time to issue one copy call (0: not a bound)


@dataclass(frozen=True, slots=True)
class AllReduceTerm:
    """One all-reduce of ``nbytes`` over a tensor-parallel group of tp GPUs, as a ring:
    t = latency_s + 2 * (tp - 1) / tp * nbytes / bw_Bps.

    ``bw_Bps`` is a bus bandwidth in nccl-tests' sense (busbw = algbw * 2(tp-1)/tp), so a measured
    busbw goes in as it is.
    """

    latency_s: float
    bw_Bps: float


@dataclass(frozen=True, slots=True)
class OverlapTerm:
    """How copies and compute share the GPU."""

    compute_slowdown: (
        float  # epsilon: compute runs (1 + epsilon) slower while an H2D copy is in flight
    )
    layerwise_h2d: bool  # whether the backend can pipeline H2D per layer (copy l+1 during layer l)
    # Combined H2D + D2H rate while both copy engines run at once (0: none, each direction at its
    # own rate). Below the sum of the two rates, both directions slow in proportion while they
    # overlap (``costmodels.cost.duplex_times``).
    duplex_Bps: float = 0.0


@dataclass(frozen=True, slots=True)
class TermValidation:
    """Held-out error of one fitted term."""

    mape: float  # mean absolute percentage error, as a fraction (0.05 = 5 %)
    max_ape: float  # worst absolute percentage error, as a fraction
    n: int  # held-out shapes
    split: str  # how the held-out set was chosen, e.g. "random 80/20 by shape"


@dataclass(frozen=True, slots=True)
class ProfileMeta:
    """Where and how the constants were obtained; refuse to mix backends."""

    gpu: str
    backend: str
    dtype: str
    source: str  # "analytic: ..." or "fit: <data>"
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    flashinfer: str | None = None
    page_size: int | None = None
    date: str | None = None  # ISO date of the measurement
    notes: str | None = None


TERMS = ("linear", "prefill_attn", "decode_attn", "h2d", "d2h", "overlap", "step_overhead_s")
# Terms a validation entry may be reported for (the fitted terms plus composite checks).
VALIDATION_KEYS = (
    "linear",
    "elementwise",
    "lm_head",
    "prefill_attn",
    "decode_attn",
    "h2d",
    "d2h",
    "overlap",
    "pipeline",
    "step_overhead",
    "layer",
    "iteration",
    "end_to_end",
)


@dataclass(frozen=True)
class Profile:
    """Every constant the cost model needs for one (GPU, backend, dtype)."""

    name: str
    linear: LinearTerm
    prefill_attn: PrefillAttnTerm
    decode_attn: DecodeAttnTerm
    h2d: CopyTerm
    d2h: CopyTerm
    overlap: OverlapTerm
    step_overhead_s: (
        float  # fixed CPU/launch cost per engine iteration (scheduler, input prep, sampler)
    )
    meta: ProfileMeta
    validation: dict[str, TermValidation] = field(default_factory=dict, compare=False)
    # Tensor parallelism's all-reduce; None: derived from meta.gpu's hardware spec when tp > 1.
    allreduce: AllReduceTerm | None = None

    def __post_init__(self) -> None:
        # Also built in code (dataclasses.replace, analytic_profile): hold those to the file rules.
        ctx = S.Ctx(f"<Profile {self.name!r}>")
        for term, cls in _TERM_CLASSES.items():
            obj = getattr(self, term)
            if not isinstance(obj, cls):
                raise ctx.child(term).error(f"expected {cls.__name__}, got {type(obj).__name__}")
            _checked_fields(cls, lambda k, o=obj: getattr(o, k), ctx.child(term))
        problem = self.linear.form_problem()
        if problem:
            raise ctx.child("linear").error(problem)
        S.number(self.step_overhead_s, ctx.child("step_overhead_s"))
        if not isinstance(self.meta, ProfileMeta):
            raise ctx.child("meta").error(f"expected ProfileMeta, got {type(self.meta).__name__}")
        for k, v in self.validation.items():
            if k not in VALIDATION_KEYS or not isinstance(v, TermValidation):
                raise ctx.child(f"validation.{k}").error("expected a known term -> TermValidation")
        if self.allreduce is not None:
            if not isinstance(self.allreduce, AllReduceTerm):
                raise ctx.child("allreduce").error(
                    f"expected AllReduceTerm, got {type(self.allreduce).__name__}"
                )
            ar = self.allreduce
            _checked_fields(AllReduceTerm, lambda k: getattr(ar, k), ctx.child("allreduce"))

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the YAML layout (insertion-ordered)."""
        return _to_dict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> "Profile":
        """Strictly validated; ``source`` names the file (or origin) in error messages."""
        return _from_dict(data, S.Ctx(source))


# --- dict <-> dataclasses ------------------------------------------------------------------------
_TERM_CLASSES = {
    "linear": LinearTerm,
    "prefill_attn": PrefillAttnTerm,
    "decode_attn": DecodeAttnTerm,
    "h2d": CopyTerm,
    "d2h": CopyTerm,
    "overlap": OverlapTerm,
}
# Rates divide, so they must be > 0; fixed costs and the slowdown may be 0.
_POSITIVE_SUFFIXES = ("_Bps", "flops")


def _to_dict(p: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {"format_version": FORMAT_VERSION, "name": p.name}
    for term in _TERM_CLASSES:
        obj = getattr(p, term)
        out[term] = {f.name: _plain(getattr(obj, f.name)) for f in _written_fields(obj)}
    out["step_overhead_s"] = p.step_overhead_s
    out["meta"] = {f.name: getattr(p.meta, f.name) for f in fields(ProfileMeta)}
    out["validation"] = {
        k: {f.name: getattr(v, f.name) for f in fields(TermValidation)}
        for k, v in p.validation.items()
    }
    if p.allreduce is not None:  # optional: files without it keep their old layout
        out["allreduce"] = {f.name: getattr(p.allreduce, f.name) for f in fields(AllReduceTerm)}
    return out


_PER_OP_FIELDS = ("elementwise_ops", "elementwise_sm_count", "elementwise_l2_bytes")


def _written_fields(obj: Any) -> list:
    """A term's fields as a file holds them: a linear term in the layer form leaves out the
    per-GEMM and per-op fields (all at their defaults), and a decode term without waves its wave
    fields, so such files keep their old layout."""
    out = list(fields(obj))
    if isinstance(obj, LinearTerm) and not uses_per_gemm_form(obj):
        out = [f for f in out if not f.name.startswith("gemm_")]
    if isinstance(obj, LinearTerm) and not uses_per_op_form(obj):
        out = [f for f in out if f.name not in _PER_OP_FIELDS]
    if isinstance(obj, DecodeAttnTerm) and not obj.wave_sm_count:
        out = out[:3]  # tau_s, per_seq_s, kv_bw_Bps: the split-KV form
    if isinstance(obj, CopyTerm | OverlapTerm):
        # Optional constants at their default (0: off) stay out of the file.
        out = [f for f in out if f.default is MISSING or getattr(obj, f.name) != f.default]
    return out


def _plain(value: Any) -> Any:
    """YAML-safe: tuples (the GEMM tiles, the elementwise ops) as lists, an op as a mapping."""
    if isinstance(value, ElementwiseOp):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _tiles(obj: Any, ctx: S.Ctx) -> tuple[tuple[int, int], ...]:
    """A list of [rows, cols] tile sizes, each a positive integer."""
    if not isinstance(obj, list | tuple):
        raise ctx.error(f"expected a list of [rows, cols] tiles, got {type(obj).__name__}")
    out = []
    for i, tile in enumerate(obj):
        c = ctx.child(str(i))
        if not isinstance(tile, list | tuple) or len(tile) != 2:
            raise c.error(f"expected [rows, cols], got {tile!r}")
        out.append((S.integer(tile[0], c, minimum=1), S.integer(tile[1], c, minimum=1)))
    return tuple(out)


def _elementwise_ops(obj: Any, ctx: S.Ctx) -> tuple[ElementwiseOp, ...]:
    """A list of per-kind constants, each a mapping with every ``ElementwiseOp`` field."""
    if not isinstance(obj, list | tuple):
        raise ctx.error(f"expected a list of per-kind constants, got {type(obj).__name__}")
    out = []
    for i, entry in enumerate(obj):
        if isinstance(entry, ElementwiseOp):  # built in code
            entry = _plain(entry)
        c = ctx.child(str(i))
        m = S.mapping(entry, c)
        S.check_keys(m, c, required=[f.name for f in fields(ElementwiseOp)])
        values: dict[str, Any] = {"kind": S.string(m["kind"], c.child("kind"))}
        for f in fields(ElementwiseOp)[1:]:
            positive = f.name.endswith("_Bps") or f.name == "knee_p"
            values[f.name] = S.number(m[f.name], c.child(f.name), positive=positive)
        out.append(ElementwiseOp(**values))
    return tuple(out)


def _checked_fields(cls: type, get: Any, ctx: S.Ctx) -> dict[str, Any]:
    """Type and range of every field of a term class: rates > 0, costs >= 0, flags bool."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        c = ctx.child(f.name)
        if f.name == "gemm_tiles":
            values[f.name] = _tiles(get(f.name), c)
        elif f.name == "elementwise_ops":
            values[f.name] = _elementwise_ops(get(f.name), c)
        elif f.type in ("bool", bool):
            values[f.name] = S.boolean(get(f.name), c)
        elif f.type in ("int", int):
            values[f.name] = S.integer(get(f.name), c, minimum=0)
        else:
            v = get(f.name)
            # A rate divides, so it must be > 0; an optional rate whose default is 0 may be 0 (off).
            off = f.default == 0.0 and v == 0.0
            positive = f.name.endswith(_POSITIVE_SUFFIXES) and not off
            values[f.name] = S.number(v, c, positive=positive)
    return values


def _term_from(obj: Any, cls: type, ctx: S.Ctx) -> Any:
    m = S.mapping(obj, ctx)
    required = [f.name for f in fields(cls) if f.default is MISSING]
    optional = [f.name for f in fields(cls) if f.default is not MISSING]
    S.check_keys(m, ctx, required=required, optional=optional)
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    return cls(**_checked_fields(cls, lambda k: m[k] if k in m else defaults[k], ctx))


def _meta_from(obj: Any, ctx: S.Ctx) -> ProfileMeta:
    m = S.mapping(obj, ctx)
    required = ("gpu", "backend", "dtype", "source")
    S.check_keys(m, ctx, required=required, optional=[f.name for f in fields(ProfileMeta)])
    values: dict[str, Any] = {k: S.string(m[k], ctx.child(k)) for k in required}
    for f in fields(ProfileMeta):
        if f.name in required or f.name not in m:
            continue
        if f.name == "page_size":
            v = m[f.name]
            values[f.name] = None if v is None else S.integer(v, ctx.child(f.name), minimum=1)
        else:
            values[f.name] = S.optional_string(m[f.name], ctx.child(f.name))
    return ProfileMeta(**values)


def _validation_from(obj: Any, ctx: S.Ctx) -> dict[str, TermValidation]:
    if obj is None:
        return {}
    m = S.mapping(obj, ctx)
    out: dict[str, TermValidation] = {}
    for term, entry in m.items():
        c = ctx.child(term)
        if term not in VALIDATION_KEYS:
            raise c.error(f"unknown term (allowed: {', '.join(VALIDATION_KEYS)})")
        e = S.mapping(entry, c)
        S.check_keys(e, c, required=("mape", "max_ape", "n", "split"))
        out[term] = TermValidation(
            mape=S.number(e["mape"], c.child("mape")),
            max_ape=S.number(e["max_ape"], c.child("max_ape")),
            n=S.integer(e["n"], c.child("n"), minimum=1),
            split=S.string(e["split"], c.child("split")),
        )
    return out


def _from_dict(data: Any, ctx: S.Ctx) -> Profile:
    m = S.mapping(data, ctx)
    S.check_keys(
        m,
        ctx,
        required=("name", *TERMS, "meta"),
        optional=("format_version", "validation", "allreduce"),
    )
    if "format_version" in m:
        v = S.integer(m["format_version"], ctx.child("format_version"), minimum=1)
        if v != FORMAT_VERSION:
            raise ctx.child("format_version").error(
                f"unsupported version {v} (this code reads {FORMAT_VERSION})"
            )
    terms = {t: _term_from(m[t], cls, ctx.child(t)) for t, cls in _TERM_CLASSES.items()}
    problem = terms["linear"].form_problem()
    if problem:  # before Profile's own check, so that the error names the file
        raise ctx.child("linear").error(problem)
    return Profile(
        name=S.string(m["name"], ctx.child("name")),
        **terms,
        step_overhead_s=S.number(m["step_overhead_s"], ctx.child("step_overhead_s")),
        meta=_meta_from(m["meta"], ctx.child("meta")),
        validation=_validation_from(m.get("validation"), ctx.child("validation")),
        allreduce=(
            _term_from(m["allreduce"], AllReduceTerm, ctx.child("allreduce"))
            if "allreduce" in m
            else None
        ),
    )


# --- files and names ------------------------------------------------------------------------------
def read_profile_file(path: str | os.PathLike[str]) -> Profile:
    """Load one profile YAML, strictly: errors name the key and the file."""
    return _from_dict(S.read_yaml(path), S.Ctx(str(path)))


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` as YAML (the layout ``read_profile_file`` reads); returns the path."""
    p = Path(path)
    S.dump_yaml(
        profile.to_dict(),
        p,
        header=(
            f"kvsim cost-model profile '{profile.name}' (format {FORMAT_VERSION}).\n"
            "Units: seconds, bytes/s, FLOP/s; per GPU, per decoder layer where a term says so.\n"
            "Layout and meaning of every key: costmodels/profiles/README.md"
        ),
    )
    return p


def committed_profiles() -> dict[str, Path]:
    """Profile YAMLs committed under costmodels/profiles/, by file stem."""
    if not PROFILES_DIR.is_dir():
        return {}
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.y*ml"))}
