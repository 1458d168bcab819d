"""Block selectors of sparse offload: the pages they pick, determinism, counts, and error messages."""

from __future__ import annotations

import numpy as np
import pytest

from sim.sparse import (
    BlockSelector,
    FullSelector,
    SelectionContext,
    TopKSelector,
    available_selectors,
    check_phase,
    make_selector,
    selected_count,
    selected_counts,
    validate_sparse,
)

CTX = SelectionContext(session=3, step=100, layer=5, seed=7)


def test_recency_picks_the_latest_pages() -> None:
    sel = make_selector("quest", k=3, scorer="recency")
    assert sel.select_blocks(np.arange(10), CTX).tolist() == [7, 8, 9]
    # Page indices, not positions: the CPU holds a scattered set.
    assert sel.select_blocks(np.array([0, 2, 5, 7, 11]), CTX).tolist() == [5, 7, 11]
    assert sel.select_blocks(np.array([4, 9]), CTX).tolist() == [4, 9]  # fewer than K: all
    assert sel.select_blocks(np.array([], dtype=int), CTX).tolist() == []


def test_sink_recency_keeps_page_zero() -> None:
    sel = make_selector("quest", k=3, scorer="sink-recency")
    assert sel.select_blocks(np.arange(10), CTX).tolist() == [0, 8, 9]
    assert sel.select_blocks(np.array([3, 4, 5, 6]), CTX).tolist() == [4, 5, 6]  # sink on the GPU


def test_full_picks_everything_in_both_phases() -> None:
    sel = make_selector("full")
    pages = np.array([1, 4, 6])
    assert sel.select_blocks(pages, CTX).tolist() == [1, 4, 6]
    prefill = SelectionContext(session=0, step=0, phase="prefill")
    assert sel.select_blocks(pages, prefill).tolist() == [1, 4, 6]
    check_phase(sel, "prefill")
    check_phase(sel, "decode")


def test_random_is_deterministic_per_seed_session_step_layer() -> None:
    sel = make_selector("quest", k=5, scorer="random")
    pages = np.arange(200)

    def pick(**kw):
        base = {"session": 3, "step": 100, "layer": 5, "seed": 7} | kw
        return tuple(sel.select_blocks(pages, SelectionContext(**base)).tolist())

    first = pick()
    assert pick() == first  # same key, same pages
    assert len(first) == 5 and list(first) == sorted(set(first))  # K distinct pages, sorted
    assert set(first) <= set(pages.tolist())
    for change in ({"seed": 8}, {"session": 4}, {"step": 101}, {"layer": 6}):
        assert pick(**change) != first, change
    # Across many steps every page is picked at some point (not a fixed subset).
    seen = set()
    for step in range(400):
        seen.update(pick(step=step))
    assert seen == set(range(200))


def test_random_does_not_depend_on_call_order() -> None:
    sel = make_selector("quest", k=4, scorer="random")
    pages = np.arange(50)
    a = SelectionContext(session=1, step=2, layer=0, seed=9)
    b = SelectionContext(session=1, step=3, layer=0, seed=9)
    ab = (sel.select_blocks(pages, a).tolist(), sel.select_blocks(pages, b).tolist())
    b2 = SelectionContext(session=1, step=3, layer=0, seed=9)
    a2 = SelectionContext(session=1, step=2, layer=0, seed=9)
    ba = (sel.select_blocks(pages, a2).tolist(), sel.select_blocks(pages, b2).tolist())
    assert ab == ba


def test_callable_scorer_and_ties() -> None:
    earliest = TopKSelector(2, lambda pages, ctx: -pages.astype(float))
    assert earliest.select_blocks(np.arange(6), CTX).tolist() == [0, 1]
    flat = TopKSelector(2, lambda pages, ctx: np.zeros(len(pages)))
    assert flat.select_blocks(np.arange(6), CTX).tolist() == [4, 5]  # ties go to later pages
    bad = TopKSelector(2, lambda pages, ctx: np.zeros(1))
    with pytest.raises(ValueError, match="returned 1 scores for 6 pages"):
        bad.select_blocks(np.arange(6), CTX)


@pytest.mark.parametrize("scorer", ["recency", "random", "sink-recency"])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_selected_count_matches_selection(scorer, k) -> None:
    sel = make_selector("quest", k=k, scorer=scorer)
    for n in range(12):
        pages = np.arange(n) * 2 + 1
        assert selected_count(sel, n) == len(sel.select_blocks(pages, CTX)) == min(k, n)
    full = make_selector("full")
    assert selected_count(full, 11) == 11
    avail = np.array([0, 2, 9, 40])
    assert selected_counts(sel, avail).tolist() == [min(k, n) for n in avail.tolist()]
    assert selected_counts(full, avail).tolist() == avail.tolist()


def test_a_users_selector_counts_by_selecting() -> None:
    class EvenPages(BlockSelector):
        name = "even"

        def select_blocks(self, available, context):
            return available[available % 2 == 0]

    assert selected_count(EvenPages(), 7) == 4  # pages 0, 2, 4, 6
    assert selected_counts(EvenPages(), np.array([1, 4])).tolist() == [1, 2]


def test_registry() -> None:
    assert available_selectors() == ["full", "quest"]
    quest = make_selector("quest", k=4)
    assert isinstance(quest, TopKSelector) and quest.name == "quest"
    assert (quest.supports_prefill, quest.supports_decode) == (False, True)
    assert isinstance(make_selector("full"), FullSelector)


# --- errors name the key ----------------------------------------------------------------------------
def test_quest_cannot_prefill() -> None:
    quest = make_selector("quest", k=4)
    msg = "sparse selector 'quest' supports only decode; it cannot run prefill (sparse.phases)"
    with pytest.raises(ValueError) as err:
        check_phase(quest, "prefill")
    assert str(err.value) == msg
    with pytest.raises(ValueError, match=r"cannot run prefill \(sparse.phases\)"):
        quest.select_blocks(np.arange(4), SelectionContext(session=0, step=0, phase="prefill"))
    check_phase(quest, "decode")
    with pytest.raises(ValueError, match="sparse.phases entries must be one of"):
        check_phase(quest, "train")


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"name": "quest", "k": 0}, "sparse.k must be an integer >= 1, got 0"),
        ({"name": "quest", "k": 2.5}, "sparse.k must be an integer >= 1"),
        ({"name": "quest", "k": True}, "sparse.k must be an integer >= 1"),
        ({"name": "quest"}, "sparse.k is required by sparse selector 'quest'"),
        (
            {"name": "quest", "k": 4, "scorer": "lru"},
            "sparse.scorer must be one of 'random', 'recency', 'sink-recency'",
        ),
        ({"name": "h2o", "k": 4}, "sparse.selector must be one of 'full', 'quest', got 'h2o'"),
    ],
)
def test_make_selector_errors(kwargs, key) -> None:
    with pytest.raises(ValueError, match=key):
        make_selector(**kwargs)


def test_validate_sparse() -> None:
    validate_sparse(16, 16)
    validate_sparse(None, 4)  # full: no K to fit
    with pytest.raises(
        ValueError, match=r"^sparse.k \(32\) must not exceed sparse.ring_slots \(16\): "
    ):
        validate_sparse(32, 16)
    with pytest.raises(ValueError, match="sparse.ring_slots must be an integer >= 1"):
        validate_sparse(1, 0)
    with pytest.raises(ValueError, match="sparse.k must be"):
        validate_sparse(0, 4)


@pytest.mark.parametrize(
    "pages, key",
    [
        (np.array([3, 1]), "ascending"),
        (np.array([1, 1]), "distinct"),
        (np.array([-1, 2]), ">= 0"),
        (np.arange(4).reshape(2, 2), "1-D"),
        (np.array([0.0, 1.0]), "1-D array of page indices"),
    ],
)
def test_available_is_checked(pages, key) -> None:
    with pytest.raises(ValueError, match=key):
        make_selector("quest", k=2).select_blocks(pages, CTX)


def test_context_and_count_checks() -> None:
    with pytest.raises(ValueError, match="SelectionContext.session"):
        SelectionContext(session=-1, step=0)
    with pytest.raises(ValueError, match="SelectionContext.phase"):
        SelectionContext(session=0, step=0, phase="both")
    with pytest.raises(ValueError, match="available_pages"):
        selected_count(make_selector("full"), -1)
    with pytest.raises(ValueError, match="available_pages"):
        selected_counts(make_selector("full"), np.array([1.5]))
