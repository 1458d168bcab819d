"""Per-iteration cost: batch shape and copy volume in, seconds out.

Assembly (docs/semantics.md, section 5 "What the simulated GPU charges"), all per GPU:
    layer   = linear(N) + elementwise(N) + prefill_attn(pairs, seqs) + decode_attn(B, C)
              with N = prefill tokens + decoding sequences (one new token each)
    compute = L * layer + lm_head(rows) + step_overhead
    H2D     = copies * latency + bytes / bw, spread evenly over the L layers and pipelined with
              them (``costmodels.pipeline``) or, without pipelining, finished before layer 0
              (with a profile's start_s / issue_s: max(start + copies * latency + bytes / bw,
              copies * issue), ``copy_time``)
    D2H     = on its own copy engine, concurrent with everything: total = max(compute path, D2H);
              where the profile gives a duplex rate, H2D and D2H running at once share it
              (``duplex_times``)

linear(N) is tau + the layer's GEMMs: max(weight read, FLOPs) for the whole layer, or, where the
profile sets the per-GEMM fields, the sum over its four GEMMs of ``costmodels.gemm`` (tiles in
waves, a smooth knee), priced once per token count. The LM head keeps the max() form.
elementwise(N) is N * ew_bytes / elementwise_bw, or, where the profile sets the per-op fields, the
sum over the layer's elementwise kernels of ``costmodels.elementwise`` (a floor in CTA waves
against streaming), priced once per token count.

Model-specific numbers (bytes, params, FLOPs per pair) come from ``ModelSpec``; rates and fixed
costs from ``Profile``. Every method is a pure function of its arguments.

Known simplifications (a calibrated profile absorbs part of them): decode attention is linear in
total context (split-KV kernels; their wave quantisation steps of ~10 % are not modelled). A
kernel without split-KV gets the decode wave term (``decode_waves``), priced from an even split of
the context when the shape does not list each sequence's.

Tensor parallelism (``tp`` > 1): every term prices one GPU's shard (``ModelSpec.shard``), and each
layer's ``linear_s`` adds the two all-reduces of its activations (``costmodels.tensor_parallel``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .elementwise import kernel_table, layer_elementwise_s, uses_per_op_form
from .gemm import layer_gemms_s, uses_per_gemm_form
from .models import ModelSpec
from .pipeline import pipelined_time, pipelined_time_uniform, serial_time, serial_time_uniform
from .profile import Profile
from .scorer_mlp import scorer_s_per_token_layer
from .tensor_parallel import ALLREDUCES_PER_LAYER, allreduce_per_token, allreduce_term


def copy_time(term, nbytes: float, copies: float) -> float:
    """Seconds of ``copies`` back-to-back copies moving ``nbytes`` under a ``CopyTerm``:
    max(start_s + copies * latency_s + nbytes / bw_Bps, copies * issue_s); nothing to move costs 0.
    With start_s = issue_s = 0 it is copies * latency_s + nbytes / bw_Bps exactly."""
    engine = copies * term.latency_s + nbytes / term.bw_Bps
    if term.start_s and (copies or nbytes):
        engine += term.start_s
    host = copies * term.issue_s
    return engine if engine >= host else host


def duplex_times(h2d_s: float, d2h_s: float, share: float) -> tuple[float, float]:
    """H2D and D2H started together on their two copy engines, each slowed to ``share`` (< 1) of
    its own rate while both run: the shorter ends at its time / share, the longer then runs alone
    at full rate for what is left. share >= 1 (or a direction idle): unchanged."""
    if share >= 1.0 or h2d_s <= 0.0 or d2h_s <= 0.0:
        return h2d_s, d2h_s
    short, long_ = min(h2d_s, d2h_s), max(h2d_s, d2h_s)
    both = short / share
    stretched = (both, both + long_ - short)
    return stretched if h2d_s <= d2h_s else (stretched[1], stretched[0])


def duplex_share(profile: Profile) -> float:
    """The share of its own rate each direction keeps while both run: the profile's duplex rate
    over the sum of the two directions' rates (1 without a duplex rate, or when the link carries
    both at full rate)."""
    duplex = profile.overlap.duplex_Bps
    if not duplex:
        return 1.0
    return min(1.0, duplex / (profile.h2d.bw_Bps + profile.d2h.bw_Bps))


def attention_pairs(n_new: int, n_ctx: int) -> float:
    """(query, key) pairs of a causal run of n_new tokens after n_ctx cached ones: n_new*(n_ctx + n_new/2).

    FlashInfer's ``attention_flops`` (flashinfer/testing/utils.py) counts (2*kv - q)*q/2 pairs with
    kv = n_ctx + n_new.
    """
    if n_new < 0 or n_ctx < 0:
        raise ValueError(f"attention_pairs needs n_new, n_ctx >= 0, got {n_new}, {n_ctx}")
    return n_new * (n_ctx + n_new / 2.0)


Q_TILE = 128  # query rows per CTA in FlashAttention-style prefill kernels


def _packed(work, sms: int) -> tuple[int, int]:
    """(waves, keys on the critical path) of CTAs run in waves of ``sms``, a wave lasting as long
    as its longest CTA. ``work``: (keys, CTAs) groups, longest first; filled in that order, the
    key count is the sum over waves of the wave's largest."""
    waves = total = free = 0  # free: slots left in the last wave, whose longest CTA is counted
    for keys, ctas in work:
        if ctas <= free:
            free -= ctas
            continue
        more = -(-(ctas - free) // sms)
        waves += more
        total += more * keys
        free = more * sms - (ctas - free)
    return waves, total


def wave_keys(lens, heads: int, sms: int, q_tile: int = Q_TILE) -> int:
    """Keys on the critical path of a prefill kernel that gives each (query tile, head) one CTA and
    streams the sequence's keys inside it (no split-KV): ceil(n_new / q_tile) * heads CTAs per
    sequence, each as long as its keys (n_ctx + n_new); CTAs run in waves of ``sms`` and a wave
    lasts as long as its longest CTA. Filled longest first, this is the sum over waves of the
    wave's largest key count; for S equal sequences ceil(S * ceil(n_new/q_tile) * heads / sms) *
    (n_ctx + n_new). ``lens``: (n_new, n_ctx) per sequence."""
    work = sorted(
        ((n_ctx + n_new, -(-n_new // q_tile) * heads) for n_new, n_ctx in lens if n_new > 0),
        reverse=True,
    )
    return _packed(work, sms)[1]


def decode_waves(ctx_lens, heads: int, sms: int, key_tile: int = 1) -> tuple[int, int, int]:
    """(waves, wave keys, longest) of a decode kernel without split-KV: one CTA per (sequence,
    query head) streams that sequence's context rounded up to ``key_tile`` keys, and CTAs run in
    waves of ``sms`` (``wave_keys``'s packing). For B equal contexts c: ceil(B * heads / sms)
    waves, each of c keys rounded up to the tile."""
    tile = max(1, key_tile)
    keys = sorted((-(-c // tile) * tile for c in ctx_lens), reverse=True)
    if not keys:
        return 0, 0, 0
    waves, total = _packed(((k, heads) for k in keys), sms)
    return waves, total, keys[0]


def equal_decode_waves(seqs: int, ctx, heads: int, sms: int, key_tile: int = 1):
    """(waves, longest) of ``decode_waves`` for ``seqs`` sequences of ``ctx`` keys each, in closed
    form (the wave keys are waves * longest); ``ctx`` may be an array (elementwise)."""
    tile = max(1, key_tile)
    return -(-seqs * heads // sms), -(-ctx // tile) * tile


def even_prefill_lens(tokens: int, pairs: float, seqs: int) -> tuple[tuple[int, int], ...]:
    """Per-sequence (n_new, n_ctx) with these sums when only the sums are known: the new tokens
    split as evenly as possible and one common cached context solved from the pair count
    (pairs = sum n_i * (c + n_i / 2))."""
    if seqs <= 0 or tokens <= 0:
        return ()
    q, r = divmod(tokens, seqs)
    split = [(n, c) for n, c in ((q + 1, r), (q, seqs - r)) if c > 0 and n > 0]
    sq = sum(n * n * c for n, c in split) / 2.0
    ctx = max(0, round((pairs - sq) / tokens))
    return tuple((n, ctx) for n, c in split for _ in range(c))


@dataclass(frozen=True, slots=True)
class BatchShape:
    """The work of one engine iteration (one forward pass over the batch)."""

    prefill_tokens: int = 0  # new tokens computed this step (prompt + recomputed history)
    prefill_pairs: float = 0.0  # sum of attention_pairs(n_new, n_ctx) over prefilling runs
    prefill_seqs: int = 0  # sequences with prefill tokens this step
    decode_seqs: int = 0  # sequences decoding one token each
    decode_ctx_tokens: int = 0  # total context (KV) tokens the decoding sequences attend to
    # Every sequence's lengths, when known (the engine fills them): (new tokens, cached tokens) of
    # each prefilling sequence, in the order admitted, and each decoding sequence's context. The
    # sums above stay exact (a recomputed page's pairs depend on its position, not on the counts).
    prefill_lens: tuple[tuple[int, int], ...] | None = None
    decode_lens: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (
            min(
                self.prefill_tokens,
                self.prefill_pairs,
                self.prefill_seqs,
                self.decode_seqs,
                self.decode_ctx_tokens,
            )
            < 0
        ):
            raise ValueError(f"BatchShape fields must be >= 0: {self}")
        if (self.prefill_tokens > 0) != (self.prefill_seqs > 0):
            raise ValueError(
                f"prefill_tokens and prefill_seqs must be both zero or both positive: {self}"
            )
        if self.prefill_pairs > 0 and self.prefill_tokens == 0:
            raise ValueError(f"prefill_pairs without prefill_tokens: {self}")
        if self.decode_ctx_tokens > 0 and self.decode_seqs == 0:
            raise ValueError(f"decode_ctx_tokens without decode_seqs: {self}")
        if self.prefill_lens is not None and (
            len(self.prefill_lens) != self.prefill_seqs
            or sum(n for n, _ in self.prefill_lens) != self.prefill_tokens
            or min((min(n, c) for n, c in self.prefill_lens), default=1) < 0
        ):
            raise ValueError(
                f"prefill_lens must list prefill_seqs (n_new, n_ctx) >= 0 summing to prefill_tokens: {self}"
            )
        if self.decode_lens is not None and (
            len(self.decode_lens) != self.decode_seqs
            or sum(self.decode_lens) != self.decode_ctx_tokens
            or min(self.decode_lens, default=0) < 0
        ):
            raise ValueError(
                f"decode_lens must list decode_seqs contexts >= 0 summing to decode_ctx_tokens: {self}"
            )

    @classmethod
    def prefill(cls, n_new: int, n_ctx: int = 0) -> "BatchShape":
        """One sequence computing n_new tokens after n_ctx tokens whose KV is resident."""
        if n_new <= 0:
            return cls()
        return cls(
            prefill_tokens=n_new,
            prefill_pairs=attention_pairs(n_new, n_ctx),
            prefill_seqs=1,
            prefill_lens=((n_new, n_ctx),),
        )

    @classmethod
    def decode(
        cls, seqs: int, ctx_tokens: int, lens: tuple[int, ...] | None = None
    ) -> "BatchShape":
        """``seqs`` sequences decoding one token each, attending to ``ctx_tokens`` in total
        (``lens``: each one's context, when known)."""
        return cls(decode_seqs=seqs, decode_ctx_tokens=ctx_tokens, decode_lens=lens)

    def __add__(self, other: "BatchShape") -> "BatchShape":
        """Two groups of sequences in the same iteration (lengths known if known for both)."""
        return BatchShape(
            self.prefill_tokens + other.prefill_tokens,
            self.prefill_pairs + other.prefill_pairs,
            self.prefill_seqs + other.prefill_seqs,
            self.decode_seqs + other.decode_seqs,
            self.decode_ctx_tokens + other.decode_ctx_tokens,
            _joined(self.prefill_lens, self.prefill_seqs, other.prefill_lens, other.prefill_seqs),
            _joined(self.decode_lens, self.decode_seqs, other.decode_lens, other.decode_seqs),
        )

    def prefill_lens_or_even(self) -> tuple[tuple[int, int], ...]:
        """``prefill_lens``, or the even split of the sums when the lengths are unknown."""
        if self.prefill_lens is not None:
            return self.prefill_lens
        return even_prefill_lens(self.prefill_tokens, self.prefill_pairs, self.prefill_seqs)

    @property
    def tokens(self) -> int:
        """Rows through the token-level ops (GEMMs): every prefill token and one per decoder."""
        return self.prefill_tokens + self.decode_seqs

    @property
    def rows(self) -> int:
        """Rows through the LM head: one sampled token per sequence in the batch."""
        return self.prefill_seqs + self.decode_seqs

    @property
    def is_empty(self) -> bool:
        return self.tokens == 0


def _joined(a: tuple | None, na: int, b: tuple | None, nb: int) -> tuple | None:
    """Per-sequence lengths of two groups: a group with no sequences knows its (empty) lengths."""
    a = () if na == 0 else a
    b = () if nb == 0 else b
    return None if a is None or b is None or not (a or b) else a + b


@dataclass(frozen=True, slots=True)
class IterationCost:
    total_s: float  # wall time of the iteration
    compute_s: float  # L * layer compute + LM head + step overhead: the time with no copies
    h2d_s: float  # total host-to-device copy time (copy stream busy time)
    d2h_s: float  # total device-to-host copy time
    stall_s: float  # total_s - compute_s: copy time the compute could not hide (incl. slowdown)


@dataclass(frozen=True, slots=True)
class PensieveConstants:
    """Pensieve's per-layer form for one sequence with ``n_new`` new tokens:
    t_layer(ctx) = alpha * ctx + beta + non_attention."""

    n_new: int
    alpha: float  # seconds per context token per layer (attention)
    beta: float  # seconds per layer, attention's fixed part at this n_new
    non_attention: float  # seconds per layer: GEMMs + elementwise at N = n_new

    def layer_s(self, ctx_tokens: float) -> float:
        return self.alpha * ctx_tokens + self.beta + self.non_attention


class CostModel:
    """Seconds for one model on one profile (GPU x backend x dtype)."""

    __slots__ = (
        "model",
        "profile",
        "tp",
        "kv_bytes_per_token",
        "_L",
        "_w_floor_s",
        "_gemm_s_per_tok",
        "_gemm_shapes",
        "_gemm_cache",
        "_ew_s_per_tok",
        "_ew_table",
        "_ew_cache",
        "_pf_s_per_pair",
        "_pf_s_per_row",
        "_pf_wave_s_per_key",
        "_dec_waves",
        "_dec_wave",
        "_dec_s_per_ctx",
        "_head_floor_s",
        "_head_s_per_row",
        "_slowdown",
        "_layerwise",
        "_duplex",
        "_score_tau_s",
        "_ar_fixed_s",
        "_ar_s_per_tok",
    )

    # Whether the simulator should list each decoding sequence's context in the shapes it prices
    # (decode attention is priced on the total; a recording model replays the exact batch).
    wants_decode_lens = False

    def __init__(self, model: ModelSpec, profile: Profile, tp: int = 1) -> None:
        """``model`` whole; with ``tp`` > 1 every price is one GPU's of a tp group, and
        ``self.model`` (hence ``kv_bytes_per_token``) is that GPU's shard."""
        if not isinstance(model, ModelSpec) or not isinstance(profile, Profile):
            raise TypeError("CostModel(model: ModelSpec, profile: Profile, tp: int = 1)")
        model = model.shard(tp)  # refuses a tp that is not a positive integer or does not split
        self.tp = tp
        self.model = model
        self.profile = profile
        self.kv_bytes_per_token: int = model.kv_bytes_per_token
        lin, pf, dec = profile.linear, profile.prefill_attn, profile.decode_attn
        p = model.linear_params_per_layer
        # Precomputed per-unit costs: the simulator calls iteration() once per engine step.
        self._L = model.num_layers
        self._w_floor_s = p * model.dtype_bytes / lin.weight_bw_Bps  # memory-bound floor
        self._gemm_s_per_tok = 2.0 * p / lin.flops  # compute-bound slope
        # The per-GEMM form costs a few numpy calls: priced once per token count, then looked up.
        self._gemm_shapes = model.gemm_shapes
        self._gemm_cache: dict[int, float] | None = {} if uses_per_gemm_form(lin) else None
        # The per-op form is priced once per token count too; the slope then carries only what
        # ``with_token_scoring`` adds.
        self._ew_cache: dict[int, float] | None = {} if uses_per_op_form(lin) else None
        if self._ew_cache is None:
            self._ew_table = None
            self._ew_s_per_tok = model.elementwise_bytes_per_token_layer / lin.elementwise_bw_Bps
        else:
            self._ew_table = kernel_table(lin, model.elementwise_ops)
            self._ew_s_per_tok = 0.0
        self._pf_s_per_pair = 4.0 * model.num_heads * model.head_dim / pf.flops  # QK^T + PV
        self._pf_s_per_row = pf.query_elem_s * model.num_heads * model.head_dim
        self._pf_wave_s_per_key = pf.wave_key_elem_s * model.head_dim if pf.wave_sm_count else 0.0
        self._dec_s_per_ctx = model.kv_bytes_per_token_layer / dec.kv_bw_Bps
        # Decode waves (kernels without split-KV): per wave, per wave key, per longest key.
        self._dec_waves = dec.wave_sm_count > 0
        self._dec_wave = (
            dec.wave_s,
            dec.wave_key_elem_s * model.head_dim,
            dec.latency_key_elem_s * model.head_dim,
        )
        self._head_floor_s = model.lm_head_params * model.dtype_bytes / lin.weight_bw_Bps
        self._head_s_per_row = 2.0 * model.lm_head_params / lin.flops
        self._slowdown = profile.overlap.compute_slowdown
        self._layerwise = profile.overlap.layerwise_h2d
        self._duplex = duplex_share(profile)
        self._score_tau_s = 0.0  # a token scorer's fixed cost per layer (``with_token_scoring``)
        # One all-reduce of N tokens' activations = fixed + N * per token (0, 0 at tp = 1).
        ar = allreduce_term(profile) if self.tp > 1 else None
        self._ar_fixed_s, self._ar_s_per_tok = allreduce_per_token(model, ar, self.tp)

    def __repr__(self) -> str:
        return f"CostModel({self.model.name!r}, {self.profile.name!r})"

    # --- one layer's terms ----------------------------------------------------------------------
    def linear_s(self, tokens: int) -> float:
        """The four GEMMs of one layer at N tokens, plus the layer's fixed cost tau; under tensor
        parallelism also the layer's all-reduces, which close its row-parallel GEMMs."""
        if tokens <= 0:
            return 0.0
        t = self.profile.linear.tau_s + self._score_tau_s + self._gemms_s(tokens)
        if self.tp > 1:
            t += ALLREDUCES_PER_LAYER * self.allreduce_s(tokens)
        return t

    def _gemms_s(self, tokens: int) -> float:
        """The layer's four GEMMs without their fixed costs: the layer form's max(floor, slope),
        or the per-GEMM form (``costmodels.gemm``) when the profile's linear term sets it."""
        if self._gemm_cache is None:
            return max(self._w_floor_s, tokens * self._gemm_s_per_tok)
        t = self._gemm_cache.get(tokens)
        if t is None:
            lin, b = self.profile.linear, self.model.dtype_bytes
            t = self._gemm_cache[tokens] = layer_gemms_s(lin, tokens, self._gemm_shapes, b)
        return t

    def allreduce_s(self, tokens: int) -> float:
        """One all-reduce of ``tokens`` tokens' activations in the tp group (0 at tp = 1)."""
        if tokens <= 0 or self.tp == 1:
            return 0.0
        return self._ar_fixed_s + tokens * self._ar_s_per_tok

    @property
    def allreduce_s_per_token(self) -> float:
        """What one more token adds to each of a layer's all-reduces (0 at tp = 1)."""
        return self._ar_s_per_tok if self.tp > 1 else 0.0

    def elementwise_s(self, tokens: int) -> float:
        """Norms, RoPE, residual adds, activation and KV write of one layer (memory-bound)."""
        if self._ew_cache is None:
            return max(tokens, 0) * self._ew_s_per_tok
        if tokens <= 0:
            return 0.0
        return self._per_op_s(tokens) + tokens * self._ew_s_per_tok

    def _per_op_s(self, tokens: int) -> float:
        """The per-op form's kernels at ``tokens`` tokens, looked up after the first time."""
        cache, table = self._ew_cache, self._ew_table
        assert cache is not None and table is not None  # set together, in the per-op form
        t = cache.get(tokens)
        if t is None:
            t = cache[tokens] = layer_elementwise_s(self.profile.linear, tokens, table)
        return t

    def prefill_attn_s(
        self, pairs: float, seqs: int, tokens: int, lens: tuple | None = None
    ) -> float:
        """Causal prefill/append attention of one layer: FLOPs over ``pairs``, the per-row work of
        ``tokens`` new tokens, and the wave term over each sequence's (n_new, n_ctx) in ``lens``
        (the even split of the sums when None). The last two cost nothing in a profile without
        them. Floor: every key's K and V is read at least once, at the decode kernel's KV rate
        (what a short append over a long context costs: the FLOPs alone would be far less)."""
        if pairs <= 0 and seqs <= 0:
            return 0.0
        pf = self.profile.prefill_attn
        t = pf.tau_s + pf.per_seq_s * seqs + pairs * self._pf_s_per_pair
        if self._pf_s_per_row:
            t += tokens * self._pf_s_per_row
        if lens is None:
            lens = even_prefill_lens(tokens, pairs, seqs)
        if self._pf_wave_s_per_key:
            keys = wave_keys(lens, self.model.num_heads, pf.wave_sm_count)
            t += keys * self._pf_wave_s_per_key
        kv_read = pf.tau_s + sum(n + c for n, c in lens) * self._dec_s_per_ctx
        return t if t >= kv_read else kv_read

    def decode_attn_s(self, seqs: int, ctx_tokens: int, lens: tuple | None = None) -> float:
        """Paged decode attention of one layer over ``ctx_tokens`` context tokens in total; the
        wave term, where the profile has one, over each sequence's context in ``lens`` (None: an
        even split, every sequence as long as the longest of it)."""
        if seqs <= 0:
            return 0.0
        dec = self.profile.decode_attn
        t = dec.tau_s + dec.per_seq_s * seqs + ctx_tokens * self._dec_s_per_ctx
        return t + self._decode_wave_s(seqs, ctx_tokens, lens) if self._dec_waves else t

    def _decode_wave_s(self, seqs: int, ctx_tokens, lens: tuple | None = None):
        """The decode wave term (``decode_waves``); ``ctx_tokens`` may be an array when ``lens``
        is None (the same operations elementwise)."""
        dec, (per_wave, per_key, per_longest) = self.profile.decode_attn, self._dec_wave
        if lens is not None:
            waves, keys, longest = decode_waves(
                lens, self.model.num_heads, dec.wave_sm_count, dec.key_tile
            )
            return waves * per_wave + keys * per_key + longest * per_longest
        per_seq = -(-ctx_tokens // seqs)  # the longest sequence of an even split
        waves, longest = equal_decode_waves(
            seqs, per_seq, self.model.num_heads, dec.wave_sm_count, dec.key_tile
        )
        return waves * per_wave + (waves * per_key + per_longest) * longest

    def decode_attn_many_s(self, seqs: int, ctx_tokens: np.ndarray) -> np.ndarray:
        """``decode_attn_s(seqs, c)`` for every c in ``ctx_tokens``, to the last bit."""
        ctx = np.asarray(ctx_tokens, dtype=np.int64)
        if seqs <= 0:
            return np.zeros(len(ctx))
        dec = self.profile.decode_attn
        t = (dec.tau_s + dec.per_seq_s * seqs) + ctx * self._dec_s_per_ctx
        return t + self._decode_wave_s(seqs, ctx) if self._dec_waves else t

    def layer_s(self, shape: BatchShape) -> float:
        """One decoder layer's compute for the whole batch (no copies)."""
        return self._layer_fields_s(
            shape.prefill_tokens,
            shape.prefill_pairs,
            shape.prefill_seqs,
            shape.prefill_lens,
            shape.decode_seqs,
            shape.decode_ctx_tokens,
            shape.decode_lens,
        )

    def _layer_fields_s(
        self,
        prefill_tokens: int,
        prefill_pairs: float,
        prefill_seqs: int,
        prefill_lens: tuple | None,
        decode_seqs: int,
        decode_ctx_tokens: int,
        decode_lens: tuple | None,
    ) -> float:
        """``layer_s`` of a shape given by its fields: the hot paths price without building one."""
        n = prefill_tokens + decode_seqs
        if n == 0:
            return 0.0
        t = self.linear_s(n) + self.elementwise_s(n)
        if prefill_tokens:
            t += self.prefill_attn_s(prefill_pairs, prefill_seqs, prefill_tokens, prefill_lens)
        if decode_seqs:
            t += self.decode_attn_s(decode_seqs, decode_ctx_tokens, decode_lens)
        return t

    def lm_head_s(self, rows: int) -> float:
        """Final projection of the rows sampled this step: a GEMM with the same floor/slope form.

        No tau: one kernel, whose weight read (~0.4 ms for a 128k vocab at 8B) dwarfs a launch.
        """
        if rows <= 0:
            return 0.0
        return max(self._head_floor_s, rows * self._head_s_per_row)

    def copy_s(self, direction: str, nbytes: float, copies: float) -> float:
        """Time of ``copies`` host<->device copies moving ``nbytes`` in total, on one copy engine."""
        if direction == "h2d":
            term = self.profile.h2d
        elif direction == "d2h":
            term = self.profile.d2h
        else:
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        if nbytes < 0 or copies < 0:
            raise ValueError(f"copy_s needs nbytes, copies >= 0, got {nbytes}, {copies}")
        return copy_time(term, nbytes, copies)

    # --- one iteration ---------------------------------------------------------------------------
    def iteration(
        self,
        shape: BatchShape,
        h2d_bytes: int = 0,
        h2d_copies: int = 0,
        d2h_bytes: int = 0,
        d2h_copies: int = 0,
        pipelining: bool = True,
        async_save: bool = True,
    ) -> IterationCost:
        """Wall time of one engine iteration with its swap-ins (H2D) and demotions (D2H).

        Copies are counted as issued: with per-layer KV tensors (vLLM/FlashInfer paging) one page of
        all layers is L copies, one page of one layer (``layer_block``) is 1 copy. H2D bytes and
        copies are spread evenly over the L layers (layer l carries h2d_bytes/L and h2d_copies/L),
        so layer l's copy takes t_x = copy_s("h2d", h2d_bytes, h2d_copies) / L.

        pipelining (and ``profile.overlap.layerwise_h2d``): layer l computes once its bytes are in
        (``pipelined_time_uniform``), compute slowed by (1+epsilon) while the copy stream is busy.
        Otherwise all H2D copies finish before layer 0: L*t_x + L*t_c.
        D2H (demotion of victims) runs on the other copy engine from the start of the iteration and
        does not slow compute (a simplification); the iteration ends when both are done. Where
        the profile gives a duplex rate (``overlap.duplex_Bps``), the H2D and D2H copies, taken
        as starting together, share it (``duplex_times``). With ``async_save=False`` the saves
        finish before the iteration computes (D2H + the rest), and so never overlap the H2D.
        An iteration with nothing to compute pays no LM head and no step overhead; with no copies
        either it costs 0.
        """
        total, compute, h2d, d2h = self._iteration_times(
            self.layer_s(shape),
            shape.is_empty,
            shape.rows,
            h2d_bytes,
            h2d_copies,
            d2h_bytes,
            d2h_copies,
            pipelining,
            async_save,
        )
        return IterationCost(
            total_s=total, compute_s=compute, h2d_s=h2d, d2h_s=d2h, stall_s=total - compute
        )

    def _iteration_times(
        self,
        t_c: float,
        empty: bool,
        rows: int,
        h2d_bytes: int,
        h2d_copies: int,
        d2h_bytes: int,
        d2h_copies: int,
        pipelining: bool,
        async_save: bool,
    ) -> tuple[float, float, float, float]:
        """(total, compute, H2D, D2H) seconds of ``iteration`` from its layer compute ``t_c``,
        whether the batch is empty and its LM-head rows: shared with the shape-free prices."""
        layers = self._L
        if empty:
            head = overhead = 0.0
        else:
            head = self.lm_head_s(rows)
            overhead = self.profile.step_overhead_s
        compute = layers * t_c + head + overhead
        h2d = self.copy_s("h2d", h2d_bytes, h2d_copies) if (h2d_bytes or h2d_copies) else 0.0
        d2h = self.copy_s("d2h", d2h_bytes, d2h_copies) if (d2h_bytes or d2h_copies) else 0.0
        if async_save and self._duplex < 1.0:
            h2d, d2h = duplex_times(h2d, d2h, self._duplex)
        if h2d == 0.0:
            body = layers * t_c
        elif pipelining and self._layerwise:
            body = pipelined_time_uniform(layers, h2d / layers, t_c, self._slowdown)
        else:
            body = serial_time_uniform(layers, h2d / layers, t_c)
        total = max(body + head + overhead, d2h) if async_save else d2h + (body + head + overhead)
        return total, compute, h2d, d2h

    def decode_iteration_s(
        self,
        seqs: int,
        ctx_tokens: int,
        lens: tuple[int, ...] | None = None,
        d2h_bytes: int = 0,
        d2h_copies: int = 0,
        async_save: bool = True,
    ) -> float:
        """``iteration(BatchShape() + BatchShape.decode(seqs, ctx_tokens, lens), d2h_bytes=...,
        d2h_copies=..., async_save=...).total_s`` to the bit (the same operations in the same
        order) without building shapes: no H2D, so pipelining plays no part. As in the sum, empty
        ``lens`` count as unknown."""
        t_c = self._layer_fields_s(0, 0.0, 0, None, seqs, ctx_tokens, lens or None)
        times = self._iteration_times(
            t_c, seqs == 0, seqs, 0, 0, d2h_bytes, d2h_copies, True, async_save
        )
        return times[0]

    def lone_prefill_s(self, n_new: int, n_ctx: int = 0) -> float:
        """``prefill_s(n_new, n_ctx)`` to the bit without building the shape: the simulator prices
        every turn's ideal TTFT through here."""
        if n_new <= 0:
            return 0.0  # BatchShape.prefill's empty shape: nothing to compute, no copies
        pairs = attention_pairs(n_new, n_ctx)
        t_c = self._layer_fields_s(n_new, pairs, 1, ((n_new, n_ctx),), 0, 0, None)
        return self._iteration_times(t_c, False, 1, 0, 0, 0, 0, True, True)[0]

    def layered_iteration(
        self,
        layer_compute_s,
        rows: int,
        h2d_copy_s,
        d2h_bytes: int = 0,
        d2h_copies: int = 0,
        pipelining: bool = True,
        async_save: bool = True,
        copy_start_s: float = 0.0,
        compute_start_s: float = 0.0,
        layer_ready_s=None,
    ) -> IterationCost:
        """One iteration whose layers differ: ``layer_compute_s[l]`` (``layer_s`` of layer l's own
        shape: recomputed pages join the layers they are recomputed through) and
        ``h2d_copy_s[l]`` (the copy of the units of layer l, as ``copy_s('h2d', ...)``), run through
        the layer recurrence (``pipelined_time``) or, without pipelining, copies first; ``rows``
        rows through the LM head. ``copy_start_s``: the H2D stream is busy until then (earlier
        copies in flight); ``compute_start_s``: layer 0 may not start before (its data in flight);
        ``layer_ready_s[l]``: layer l may not start before (earlier copies of its data in flight).
        D2H as in ``iteration``. With uniform layers and zero starts it equals ``iteration``."""
        layers = self._L
        if len(layer_compute_s) != layers or len(h2d_copy_s) != layers:
            raise ValueError(
                f"need {layers} layers, got {len(layer_compute_s)} compute and "
                f"{len(h2d_copy_s)} copy times"
            )
        head = overhead = 0.0
        if rows > 0:
            head, overhead = self.lm_head_s(rows), self.profile.step_overhead_s
        compute = float(sum(layer_compute_s)) + head + overhead
        h2d = float(sum(h2d_copy_s))
        d2h = self.copy_s("d2h", d2h_bytes, d2h_copies) if (d2h_bytes or d2h_copies) else 0.0
        if async_save and self._duplex < 1.0 and h2d > 0.0 and d2h > 0.0:
            both, d2h = duplex_times(h2d, d2h, self._duplex)
            h2d_copy_s = [t * both / h2d for t in h2d_copy_s]
            h2d = both
        if pipelining and self._layerwise:
            body = pipelined_time(
                h2d_copy_s,
                layer_compute_s,
                self._slowdown,
                copy_start_s,
                compute_start_s,
                layer_ready_s,
            )
        else:
            body = serial_time(
                h2d_copy_s, layer_compute_s, copy_start_s, compute_start_s, layer_ready_s
            )
        total = max(body + head + overhead, d2h) if async_save else d2h + (body + head + overhead)
        return IterationCost(
            total_s=total, compute_s=compute, h2d_s=h2d, d2h_s=d2h, stall_s=total - compute
        )

    def with_token_scoring(
        self, s_per_token_layer: float | None = None, launch_s: float | None = None
    ) -> CostModel:
        """This cost model plus a learned token scorer (token budgets) run on every new token at
        every layer, beside the layer's elementwise work, so every priced iteration pays it.
        ``s_per_token_layer``: a measured cost; by default the scorer's FLOPs for each KV head at
        the profile's GEMM rate (``costmodels.scorer_mlp``). ``launch_s``: its fixed cost per
        layer and iteration (its small GEMMs' launches); by default the profile's GEMM tau."""
        if s_per_token_layer is None:
            extra = scorer_s_per_token_layer(self.model, self.profile.linear.flops)
        else:
            extra = s_per_token_layer
        launch = self.profile.linear.tau_s if launch_s is None else launch_s
        if not (extra >= 0 and launch >= 0):
            raise ValueError(
                f"scoring cost must be >= 0 s per token and layer and per launch, "
                f"got {extra} and {launch}"
            )
        new = copy.copy(self)
        new._ew_s_per_tok = self._ew_s_per_tok + extra
        new._score_tau_s = self._score_tau_s + launch
        return new

    def prefill_s(self, n_new: int, n_ctx: int = 0) -> float:
        """A lone prefill iteration (TTFT with the whole history resident and an empty queue)."""
        return self.iteration(BatchShape.prefill(n_new, n_ctx)).total_s

    @property
    def decode_lens_matter(self) -> bool:
        """Whether a decode batch's price depends on each sequence's context, not only on their
        sum (the profile has a decode wave term)."""
        return self._dec_waves

    def decode_step_s(self, seqs: int, ctx_tokens: int) -> float:
        """A decode-only iteration of ``seqs`` sequences over ``ctx_tokens`` total context.

        Equals ``iteration(BatchShape.decode(seqs, ctx_tokens)).total_s`` to the last bit (same
        operations in the same order) without building the shape: the simulator prices every
        decode iteration through here.
        """
        if seqs <= 0:
            return 0.0
        t = self.linear_s(seqs) + self.elementwise_s(seqs)
        t += self.decode_attn_s(seqs, ctx_tokens)
        return self._L * t + self.lm_head_s(seqs) + self.profile.step_overhead_s

    def decode_pricer(self, seqs: int):
        """``decode_step_s(seqs, .)`` as a function of the context alone, with the batch's terms
        computed once (the same operations in the same order: bit-identical)."""
        if seqs <= 0:
            return lambda ctx_tokens: 0.0
        dec = self.profile.decode_attn
        a = self.linear_s(seqs) + self.elementwise_s(seqs)
        b = dec.tau_s + dec.per_seq_s * seqs
        c, layers = self._dec_s_per_ctx, self._L
        head, overhead = self.lm_head_s(seqs), self.profile.step_overhead_s
        if self._dec_waves:
            wave = self._decode_wave_s
            return lambda ctx: layers * (a + ((b + ctx * c) + wave(seqs, ctx))) + head + overhead
        return lambda ctx_tokens: layers * (a + (b + ctx_tokens * c)) + head + overhead

    def decode_steps_s(self, seqs: int, ctx_tokens: np.ndarray) -> np.ndarray:
        """``decode_step_s(seqs, c)`` for every c in ``ctx_tokens`` at once, to the last bit (the
        same operations in the same order, elementwise): a run of decode-only iterations of an
        unchanged batch, priced in closed form."""
        ctx = np.asarray(ctx_tokens, dtype=np.int64)
        if seqs <= 0:
            return np.zeros(len(ctx))
        dec = self.profile.decode_attn
        t = self.linear_s(seqs) + self.elementwise_s(seqs)
        attn = (dec.tau_s + dec.per_seq_s * seqs) + ctx * self._dec_s_per_ctx
        if self._dec_waves:
            attn = attn + self._decode_wave_s(seqs, ctx)
        layer = t + attn
        return self._L * layer + self.lm_head_s(seqs) + self.profile.step_overhead_s

    def pensieve_constants(self, n_new: int = 1) -> PensieveConstants:
        """Pensieve's t_layer = alpha*ctx + beta + non_attention for one sequence with n_new tokens.

        n_new = 1 is a decode step (paged decode kernel, memory-bound): alpha = KV bytes per token
        per layer / kv_bw. n_new > 1 is a prefill/append: alpha = 4*Hq*d*n_new / flops_attn (plus
        the wave term's keys, where the profile has one) and beta carries the n_new^2/2 causal part
        and the per-row term. Equals ``layer_s(BatchShape.decode(1, ctx))`` for n_new = 1 and
        ``layer_s(BatchShape.prefill(n_new, ctx))`` otherwise, wherever the append is above its
        KV-read floor (``prefill_attn_s``; a short append over a long context is below it) and, with
        a decode wave term, at contexts that are a multiple of its key tile.
        """
        if n_new < 1:
            raise ValueError(f"n_new must be >= 1, got {n_new}")
        if n_new == 1:
            dec = self.profile.decode_attn
            alpha, beta = self._dec_s_per_ctx, dec.tau_s + dec.per_seq_s
            if self._dec_waves:  # one sequence: its heads' waves, each as long as its context
                per_wave, per_key, per_longest = self._dec_wave
                head_waves = -(-self.model.num_heads // dec.wave_sm_count)
                alpha += head_waves * per_key + per_longest
                beta += head_waves * per_wave
        else:
            pf = self.profile.prefill_attn
            # The wave term is linear in the keys at a fixed n_new: waves * (ctx + n_new).
            waves = wave_keys(((n_new, 0),), self.model.num_heads, pf.wave_sm_count or 1) / n_new
            wave = waves * self._pf_wave_s_per_key
            alpha = n_new * self._pf_s_per_pair + wave
            beta = (
                pf.tau_s
                + pf.per_seq_s
                + (n_new * n_new / 2.0) * self._pf_s_per_pair
                + n_new * self._pf_s_per_row
                + n_new * wave
            )
        non_attention = self.linear_s(n_new) + self.elementwise_s(n_new)
        return PensieveConstants(n_new=n_new, alpha=alpha, beta=beta, non_attention=non_attention)
