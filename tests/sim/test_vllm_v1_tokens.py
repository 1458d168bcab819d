"""Block identities of a session as kvsim's vLLM engine keys them."""

from __future__ import annotations

from sim.vllm_v1.tokens import SessionTokens


def test_keys_at_once_are_the_keys_one_by_one():
    shared = [(11, 1), (12, 2), (13, 3)]
    for tokens in (SessionTokens(7, shared, 16), SessionTokens(8, [], 16)):
        for first in range(6):
            for end in range(first, 8):
                assert list(tokens.block_keys(first, end)) == [
                    tokens.block_key(j) for j in range(first, end)
                ]


def test_own_blocks_of_two_sessions_never_share_a_key_and_shared_ones_do():
    a, b = SessionTokens(1, [(5, 1)], 16), SessionTokens(2, [(5, 1)], 16)
    assert a.block_key(0) == b.block_key(0)
    own_a = set(a.block_keys(1, 1000))
    assert not own_a & set(b.block_keys(1, 1000))
    assert (5, 1) not in own_a
