"""``experiments.start_up.start_up_frozen``: the collector is off until the command's start-up is
over, then what exists is frozen and the collector is back on; everything is handed back when the
command ends (a test or a notebook calling ``experiments.cli.main`` keeps no frozen objects), and
a caller's own choice (collector off, objects frozen) is kept."""

from __future__ import annotations

import gc

import pytest

from experiments.cli import main
from experiments.start_up import start_up_frozen


@pytest.fixture
def collector_restored():
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()
    else:
        gc.disable()


def test_off_then_frozen_then_handed_back(collector_restored):
    gc.enable()
    gc.unfreeze()
    with start_up_frozen() as started:
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # start-up objects: they live on
        started()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
        assert gc.get_count()[0] < 700  # no backlog of the objects made before for the next scan
        started()  # a second call changes nothing
        assert gc.isenabled() and gc.get_freeze_count() >= len(made)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_an_error_before_the_start_up_is_over_turns_the_collector_back_on(collector_restored):
    gc.enable()
    gc.unfreeze()
    with pytest.raises(KeyError), start_up_frozen():
        raise KeyError("x")
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.mark.parametrize("off", [True, False])
def test_a_caller_that_turned_it_off_or_froze_keeps_its_choice(collector_restored, off):
    gc.unfreeze()
    if off:
        gc.disable()
    else:
        gc.enable()
        gc.freeze()
    frozen = gc.get_freeze_count()
    with start_up_frozen() as started:
        started()
    assert gc.isenabled() is not off and gc.get_freeze_count() == frozen


def test_a_command_called_in_process_leaves_nothing_frozen(tmp_path, collector_restored):
    gc.enable()
    gc.unfreeze()
    trace = tmp_path / "s.csv"
    trace.write_text("obj_id,size\n1,1\n2,1\n1,1\n")
    argv = ["cachesim", "--trace", str(trace), "--policy", "lru", "--capacity", "5", "--json"]
    assert main(argv) == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
