"""The training thread's time per step event: the shipper spooling in the call (an
``fdatasync`` per event) against ``BackgroundSink`` (spooled on a thread of the rank's own).

    .venv/bin/python bench/profile_overhead/event_cost.py

Nothing listens on port 9, so every event stays in a temporary spool under ``~`` (the
disk a rank's spool is on); 60 events per variant, 20 ms apart, three rounds alternated.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from contract.schema import Event, Workload
from workloads.record.events import BackgroundSink, EventSink, EventWriter, ShipperSink

EVENTS = 60
UNREACHABLE = "http://127.0.0.1:9/"


def emit_times(in_background: bool) -> list[float]:
    """Seconds each ``emit`` held the calling thread."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as directory:
        sink: EventSink = ShipperSink(UNREACHABLE, None, Path(directory) / "spool")
        if in_background:
            sink = BackgroundSink(sink)
        writer = EventWriter(sink, "event-cost", 0, "pytorch", host="bench")
        times = []
        for step in range(EVENTS):
            began = time.perf_counter()
            fields = {Workload.EPOCH: 1, Workload.STEP: step, Workload.IMAGES: 8}
            writer.emit(Event.STEP, fields)
            times.append(time.perf_counter() - began)
            time.sleep(0.02)
        sink.close(0.5)
        return times


def main() -> None:
    for _ in range(3):
        for in_background in (False, True):
            times = emit_times(in_background)
            name = "BackgroundSink" if in_background else "spooled in the call"
            median, worst = statistics.median(times) * 1e3, max(times) * 1e3
            print(f"{name}: median {median:.3f} ms, max {worst:.3f} ms")


if __name__ == "__main__":
    main()
