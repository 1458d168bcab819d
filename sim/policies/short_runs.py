"""Whether a batch of uids repeats none, for a batch of many short runs (a decode span's pages:
one-page runs of many sessions): a set of its uids, built in C, where sorting its runs and
comparing neighbours costs a Python step each."""

from __future__ import annotations

from sim.policies.run_lists import distinct_runs, runs_in_order, split_at_sessions

SHORT = 8  # runs this long on average, or shorter, are checked by a set of their uids


def uids_apart(uids: list[int], runs: list[tuple[int, int]]) -> bool:
    """Does no uid repeat in ``uids``, whose runs of consecutive uids are ``runs`` (split or not at
    session bounds)?"""
    if len(runs) < 2:
        return True
    if len(uids) <= SHORT * len(runs):
        return len(set(uids)) == len(uids)
    ordered = sorted(runs)  # long runs: fewer runs to sort than uids to hash
    return not any(s > a for (_, s), (a, _) in zip(ordered, ordered[1:], strict=False))


def distinct_short_runs(uids) -> list[tuple[int, int]] | None:
    """``distinct_runs(uids)``: ``uids`` as runs of consecutive uids in their order, or None when
    a uid repeats."""
    if type(uids) is not list:
        return distinct_runs(uids)
    runs = runs_in_order(uids)
    return runs if uids_apart(uids, runs) else None


def split_short(uids, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``split_at_sessions(runs)`` for ``runs``, the runs of ``uids`` in order: the list itself,
    unread, where there are as many runs as uids (each one uid, inside one session)."""
    return runs if len(runs) == len(uids) else split_at_sessions(runs)
