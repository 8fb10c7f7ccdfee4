"""``ReadGate``: at most N read-API requests built at once, M waiting, the rest refused."""

from __future__ import annotations

import threading

import pytest

from collector.api.server import ReadGate, ReadsBusy


def test_turns_then_the_queue_then_refusals():
    gate = ReadGate(concurrency=2, queue=1, wait_seconds=5)
    release = threading.Event()
    inside = threading.Semaphore(0)
    finished: list[str] = []

    def read(name: str) -> None:
        with gate.turn():
            inside.release()
            release.wait(5)
        finished.append(name)

    holders = [threading.Thread(target=read, args=(f"r{i}",)) for i in range(3)]
    for thread in holders:
        thread.start()
    assert inside.acquire(timeout=5) and inside.acquire(timeout=5)  # two are building
    assert not inside.acquire(timeout=0.2)  # the third waits its turn
    with pytest.raises(ReadsBusy, match="2 reads are being built and 1 wait"), gate.turn():
        pass
    assert gate.refused == 1
    release.set()
    for thread in holders:
        thread.join(5)
    assert sorted(finished) == ["r0", "r1", "r2"]
    with gate.turn():  # every turn is back
        pass


def test_a_queued_read_gives_up_after_its_wait():
    gate = ReadGate(concurrency=1, queue=1, wait_seconds=0.1)
    waited = r"no turn to build this read came in 0\.1 s"
    with gate.turn(), pytest.raises(ReadsBusy, match=waited), gate.turn():
        pass
    assert gate.refused == 1


def test_a_gate_needs_a_turn():
    with pytest.raises(ValueError):
        ReadGate(concurrency=0)
