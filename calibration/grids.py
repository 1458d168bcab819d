"""The shapes a calibration sweep measures (Vidur-like steps, vidur/profiling/utils/__init__.py).

Token counts are dense near small sizes, where launch costs and the weight-read floor meet, and
geometric beyond. Besides the model's own layer, GEMMs are also measured on narrower shards of it
(heads and MLP width split as under tensor parallelism): distinct weight sizes are what separate
the fixed cost tau from the weight-read time, which a single layer size cannot (both are constant
in N). Prefill shapes include batches of several sequences so the per-sequence cost is separable
from the fixed one. The order is shuffled (seeded) so clock drift is not read as a shape effect.

The full grid also holds three sets of shapes that settle what the first H100 sweep left open
(docs/cost-model.md, "The measured H100 profile, refitted"):
  * short appends over long contexts (``LONG_APPENDS``: n_new 2..64 over 8k..64k cached tokens,
    one sequence), timed with the attention backend the sweep runs, to see how the kernel's query
    tiles price a few new tokens against a long cache;
  * copies from and to pageable host buffers (``pageable_counts``), beside the pinned ones;
  * H2D and D2H at once on their two copy engines (``duplex_counts``, sizes from
    ``duplex_min_bytes``), which fit the profile's duplex rate.
Decode at batch 1 over long contexts (64 .. 128k tokens) was in the grid already.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Grid:
    name: str
    gemm_tokens: tuple[int, ...]
    gemm_shards: tuple[int, ...]  # 1 = the full layer; k = heads and MLP width / k
    lm_head_rows: tuple[int, ...]
    prefill: tuple[tuple[int, int, int], ...]  # (n_new, n_ctx, seqs)
    decode: tuple[tuple[int, int], ...]  # (seqs, context per sequence)
    copy_sizes: tuple[int, ...]  # bytes per measurement (all copies together)
    copy_counts: tuple[int, ...]  # number of equal copies the bytes are split into
    page_size: int = 16
    max_kv_tokens: int = 1 << 20  # cap on batch * keys per attention call (memory)
    pageable_counts: tuple[int, ...] = ()  # copies from/to pageable host buffers (): none
    duplex_counts: tuple[int, ...] = ()  # H2D + D2H at once, copies per direction (): none
    duplex_min_bytes: int = 2 << 20  # duplex pairs from this size (bytes per direction) up

    def filtered(self) -> "Grid":
        """Drop attention shapes above ``max_kv_tokens`` and copy splits below 4 KiB per copy."""
        pf = tuple(p for p in self.prefill if p[2] * (p[0] + p[1]) <= self.max_kv_tokens)
        dec = tuple(d for d in self.decode if d[0] * d[1] <= self.max_kv_tokens)
        return replace(self, prefill=pf, decode=dec)

    def copy_shapes(self) -> tuple[tuple[int, int], ...]:
        """(total bytes, copies) pairs with at least 4 KiB per copy."""
        return _splits(self.copy_sizes, self.copy_counts)

    def pageable_shapes(self) -> tuple[tuple[int, int], ...]:
        """(total bytes, copies) of the pageable-buffer copies: the copy sizes, split as
        ``pageable_counts`` says, at least 4 KiB per copy."""
        return _splits(self.copy_sizes, self.pageable_counts)

    def duplex_shapes(self) -> tuple[tuple[int, int], ...]:
        """(bytes per direction, copies per direction) of the H2D + D2H pairs: the copy sizes of
        ``duplex_min_bytes`` and more, split as ``duplex_counts`` says, at least 4 KiB per copy."""
        sizes = tuple(b for b in self.copy_sizes if b >= self.duplex_min_bytes)
        return _splits(sizes, self.duplex_counts)


def _splits(sizes, counts) -> tuple[tuple[int, int], ...]:
    return tuple((b, c) for b in sizes for c in counts if b // c >= 4096)


def _tokens(limit: int) -> tuple[int, ...]:
    """1, 2, 4, then steps of 8 to 128, 32 to 1024, 128 to 4096, 512 beyond (Vidur-like)."""
    out = (
        [1, 2, 4]
        + list(range(8, 129, 8))
        + list(range(160, 1025, 32))
        + list(range(1152, 4097, 128))
        + list(range(4608, 16385, 512))
    )
    return tuple(n for n in out if n <= limit)


# Appends of a few tokens over long contexts, one sequence: (n_new, n_ctx) not already in the
# full grid's prefill product (n_new 16 and 64 are, at these contexts and at 1 and 4 sequences).
LONG_APPEND_N_NEW = (2, 4, 8, 16, 32, 48, 64)
LONG_APPEND_N_CTX = (8192, 16384, 32768, 65536)


def full_grid(max_tokens: int = 8192) -> Grid:
    """The GPU sweep: ~1.1k shapes, about six minutes on an H100 (0.275 s per timed closure)."""
    n_new = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    n_ctx = (0, 512, 2048, 8192, 16384, 32768, 65536)
    prefill = tuple((a, c, s) for a in n_new for c in n_ctx for s in (1, 4) if a > 1 or c > 0)
    prefill += tuple(
        (a, c, 1) for a in LONG_APPEND_N_NEW for c in LONG_APPEND_N_CTX if (a, c, 1) not in prefill
    )
    batch = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    ctx = (64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    return Grid(
        name="full",
        gemm_tokens=_tokens(max_tokens),
        gemm_shards=(1, 2, 4, 8),
        # Through the GEMM's turn from weight-bound to compute-bound (about 200-700 rows on an
        # H100), where one row count at 512 left the LM head's form undetermined.
        lm_head_rows=(1, 8, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 2048),
        prefill=prefill,
        decode=tuple((b, c) for b in batch for c in ctx),
        copy_sizes=tuple(4096 * 4**k for k in range(0, 10)),  # 4 KiB .. 1 GiB
        copy_counts=(1, 16, 256),
        max_kv_tokens=4 << 20,
        pageable_counts=(1, 16),
        duplex_counts=(1, 16),
    ).filtered()


def quick_grid() -> Grid:
    """A small sweep that runs the whole pipeline in seconds (CPU tests, smoke runs on a GPU)."""
    prefill = (
        (16, 0, 1),
        (64, 0, 1),
        (128, 0, 1),
        (256, 0, 1),
        (512, 0, 1),
        (64, 256, 1),
        (64, 1024, 1),
        (128, 512, 1),
        (256, 768, 1),
        (32, 0, 4),
        (64, 128, 2),
        (128, 128, 4),
        (16, 512, 4),
    )
    decode = tuple((b, c) for b in (1, 4, 16, 32) for c in (64, 256, 1024))
    return Grid(
        name="quick",
        gemm_tokens=(1, 8, 32, 64, 128, 256, 512),
        gemm_shards=(1, 2, 4),
        lm_head_rows=(1, 16, 64),
        prefill=prefill,
        decode=decode,
        copy_sizes=(64 << 10, 1 << 20, 8 << 20),
        copy_counts=(1, 8),
        max_kv_tokens=1 << 16,
        pageable_counts=(1,),
        duplex_counts=(1,),
        duplex_min_bytes=1 << 20,
    ).filtered()


def shuffled(items, seed: int) -> list:
    """Seeded shuffle of a sweep's shapes (randomise order so drift is not a shape effect)."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out
