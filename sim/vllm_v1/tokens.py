"""A session's tokens as vLLM sees them: block keys for kvsim's engine, token ids for the real one.

A conversation's turn k sends its whole context again (every earlier prompt and reply, then its new
prompt), so the token at position p of a session is the same in every turn: a turn hits the blocks
of its own history. The trace's shared-prefix hashes name blocks that several sessions share
(``sim.prefix.prefix_keys``: the trace's hashes are prefix-chained, as vLLM's are, so equal keys
mean equal tokens up to the block's end); the tokens of such a block derive from its key.

Keys and token ids come from the same positions, so kvsim's engine (keys) and the real vLLM
scheduler (token ids, hashed by vLLM itself) see the same block identities.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

VOCAB = 131072  # token ids in [1, VOCAB): inside the driver's model config
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a deterministic 64-bit hash of an integer (Python's hash of a str
    is salted per process; this is not)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class SessionTokens:
    def __init__(self, index: int, shared: Sequence[tuple[int, int]], block_size: int) -> None:
        """``shared``: the keys of the session's shared-prefix blocks (``prefix_keys``)."""
        self.index = index
        self.bs = block_size
        self.shared = list(shared)
        self.own = index << 32  # block j's own key: own | j

    def block_key(self, j: int) -> Hashable:
        """Block j's identity: its content and everything before it (a shared block's key is a
        tuple; a session's own block is an int, which no tuple equals)."""
        return self.shared[j] if j < len(self.shared) else (self.index << 32) | j

    def block_keys(self, first: int, end: int) -> Sequence[Hashable]:
        """``[block_key(j) for j in range(first, end)]``, without a call per block."""
        n = len(self.shared)
        own = range((self.index << 32) | max(first, n), (self.index << 32) | end)
        if first >= n:
            return own
        return self.shared[first:end] + list(own) if end > n else self.shared[first:end]

    def block_key_parts(self, first: int, end: int) -> list[Sequence[Hashable]]:
        """The keys of blocks first..end-1 in at most two parts: the shared blocks' (a list), then
        the session's own (a range, so that the block pool can treat them as a slice)."""
        n = len(self.shared)
        if first >= n:  # the common case: own blocks only
            return [range(self.own | first, self.own | end)] if end > first else []
        parts: list[Sequence[Hashable]] = []
        if first < end:
            parts.append(self.shared[first:end])
        if end > n:
            parts.append(range(self.own | n, self.own | end))
        return parts

    def token_id(self, pos: int) -> int:
        j = pos // self.bs
        if j < len(self.shared):
            h, _ = self.shared[j]
            seed = _mix(_mix(h & _MASK) ^ pos)
        else:
            seed = _mix(_mix(self.index + (1 << 40)) ^ pos)
        return 1 + seed % (VOCAB - 1)

    def token_ids(self, start: int, end: int) -> list[int]:
        return [self.token_id(p) for p in range(start, end)]
