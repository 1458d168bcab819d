"""``experiments.start_up.start_up_frozen``: the collector is off inside, and what exists when it
ends is frozen before the collector is back on; a caller's own choice (collector off) is kept."""

from __future__ import annotations

import gc

import pytest

from experiments.start_up import start_up_frozen


@pytest.fixture
def collector_restored():
    was = gc.isenabled()
    yield
    gc.unfreeze()  # hand the frozen objects back to the collector for the rest of the session
    if was:
        gc.enable()
    else:
        gc.disable()


def test_off_inside_then_frozen_and_back_on(collector_restored):
    gc.enable()
    gc.unfreeze()
    with start_up_frozen():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # start-up objects: they live on
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made)
    assert gc.get_count()[0] < 700  # no backlog of the objects made inside for the next scan


def test_a_caller_that_turned_it_off_keeps_it_off(collector_restored):
    gc.disable()
    gc.unfreeze()
    with start_up_frozen():
        assert not gc.isenabled()
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def test_back_on_after_an_error(collector_restored):
    gc.enable()
    with pytest.raises(KeyError), start_up_frozen():
        raise KeyError("x")
    assert gc.isenabled()
