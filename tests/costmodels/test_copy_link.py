"""The copy form of a link, worked by hand: a batch's start cost, each copy's latency, the bytes at
the link's rate, the host's issue bound; and H2D with D2H at once sharing a duplex rate."""

from __future__ import annotations

import pytest

from costmodels.cost import copy_time, duplex_share, duplex_times
from costmodels.profile import CopyTerm

US = 1e-6
MB = 1e6


def test_a_term_without_start_or_issue_is_the_old_form_bit_for_bit():
    term = CopyTerm(latency_s=2.5 * US, bw_Bps=55e9)
    for nbytes, copies in [(0, 0), (4096, 1), (2 * MB, 64), (1e9, 32768)]:
        assert copy_time(term, nbytes, copies) == copies * 2.5 * US + nbytes / 55e9


def test_the_engine_line_start_once_then_latency_per_copy_and_bytes_at_the_rate():
    term = CopyTerm(latency_s=2 * US, bw_Bps=50e9, start_s=5 * US, issue_s=1 * US)
    # 10 copies of 1 MB: 5 + 10 * 2 + 10e6 / 50e9 s = 5 + 20 + 200 us = 225 us; host 10 us
    assert copy_time(term, 10 * MB, 10) == pytest.approx(225 * US, rel=1e-12)
    # nothing to move costs nothing: no start without a copy
    assert copy_time(term, 0, 0) == 0.0


def test_the_host_line_binds_many_tiny_copies():
    term = CopyTerm(latency_s=1 * US, bw_Bps=50e9, start_s=5 * US, issue_s=7 * US)
    # 1,000 copies of 1 KB: engine 5 + 1000 * 1 + 1e6 / 50e9 s = 1,025 us; host 1000 * 7 = 7,000 us
    assert copy_time(term, 1000 * 1000, 1000) == pytest.approx(7000 * US, rel=1e-12)


def test_duplex_the_shorter_direction_shares_then_the_longer_runs_alone():
    # H2D 2 ms and D2H 3 ms of work at their own rates, each at half rate while both run: H2D's
    # 2 ms take 4 ms; D2H did 2 ms of its work by then and finishes the last 1 ms alone: 5 ms.
    assert duplex_times(2e-3, 3e-3, 0.5) == pytest.approx((4e-3, 5e-3), rel=1e-12)
    assert duplex_times(3e-3, 2e-3, 0.5) == pytest.approx((5e-3, 4e-3), rel=1e-12)
    # equal work: both end together at work / share
    assert duplex_times(2e-3, 2e-3, 0.8) == pytest.approx((2.5e-3, 2.5e-3), rel=1e-12)


@pytest.mark.parametrize("h2d,d2h,share", [(2e-3, 3e-3, 1.0), (0.0, 3e-3, 0.5), (2e-3, 0.0, 0.5)])
def test_duplex_changes_nothing_when_the_link_carries_both_or_one_is_idle(h2d, d2h, share):
    assert duplex_times(h2d, d2h, share) == (h2d, d2h)


def test_the_share_is_the_duplex_rate_over_the_two_directions_rates():
    class P:  # the three rates a profile gives (GB/s): 55 + 55 one way each, 83.4 both at once
        h2d = CopyTerm(latency_s=0.0, bw_Bps=55e9)
        d2h = CopyTerm(latency_s=0.0, bw_Bps=55e9)

        class overlap:
            duplex_Bps = 83.4e9

    assert duplex_share(P) == pytest.approx(83.4 / 110, rel=1e-12)
    P.overlap.duplex_Bps = 0.0  # no duplex rate: each direction at its own
    assert duplex_share(P) == 1.0
    P.overlap.duplex_Bps = 200e9  # a link faster than both: never slowed
    assert duplex_share(P) == 1.0
