"""``netserve.ratelog.RateLimitedLog``: the first line of a kind at once, the repeats within
the interval counted into the next line of that kind, a traceback once per kind. The
clock is a plain function the test advances (no sleeping)."""

from __future__ import annotations

import logging

from netserve.ratelog import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_kind_per_interval_and_the_repeats_counted(caplog):
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), 60.0, clock)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        logged = [limited.log(logging.ERROR, "refused", "refused line %d", n) for n in range(5)]
        limited.log(logging.ERROR, "other", "another kind")
        clock.now += 60.0
        limited.log(logging.ERROR, "refused", "refused line %d", 5)
        clock.now += 60.0
        limited.log(logging.ERROR, "refused", "refused line %d", 6)
    assert logged == [True, False, False, False, False]
    assert [record.getMessage() for record in caplog.records] == [
        "refused line 0",
        "another kind",
        "refused line 5 (and 4 more like it in the last 60 s)",
        "refused line 6",
    ]


def test_a_traceback_only_with_the_first_line_of_its_kind(caplog):
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), 1.0, clock)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        for _ in range(3):
            try:
                raise OSError(28, "No space left on device")
            except OSError:
                limited.log(logging.ERROR, "write", "write failed", exc_info=True)
            clock.now += 1.0
    assert [bool(record.exc_info) for record in caplog.records] == [True, False, False]
    assert [record.getMessage() for record in caplog.records] == ["write failed"] * 3
