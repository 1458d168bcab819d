"""``experiments.start_up.freed_memory_kept``: glibc's mmap and trim thresholds raised for the
command and set back to glibc's defaults after it (an error included); where the C library has no
``mallopt``, or refuses a value, nothing is set back that was not set."""

from __future__ import annotations

import ctypes

import pytest

from experiments import start_up
from experiments.start_up import freed_memory_kept


class _Libc:
    def __init__(self, accepts: bool = True) -> None:
        self.calls: list[tuple[int, int]] = []
        self.accepts = accepts

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1 if self.accepts else 0


@pytest.fixture
def libc(monkeypatch):
    fake = _Libc()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    return fake


RAISED = [(start_up._M_MMAP_THRESHOLD, 32 << 20), (start_up._M_TRIM_THRESHOLD, 1 << 30)]
DEFAULTS = [(start_up._M_MMAP_THRESHOLD, 128 << 10), (start_up._M_TRIM_THRESHOLD, 128 << 10)]


def test_raised_for_the_command_and_set_back_after(libc):
    with freed_memory_kept():
        assert libc.calls == RAISED
    assert libc.calls == RAISED + DEFAULTS


def test_set_back_after_an_error(libc):
    with pytest.raises(KeyError), freed_memory_kept():
        raise KeyError("x")
    assert libc.calls == RAISED + DEFAULTS


def test_a_refused_value_is_not_set_back(libc):
    libc.accepts = False
    with freed_memory_kept():
        pass
    assert libc.calls == RAISED


def test_no_mallopt_no_calls(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    with freed_memory_kept():
        pass


def test_the_real_library_takes_the_values():
    """On this machine's C library (glibc on Linux): the context runs and leaves no error."""
    with freed_memory_kept():
        block = bytearray(8 << 20)  # a block the raised threshold keeps on the heap
        del block
