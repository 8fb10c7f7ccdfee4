"""An in-memory ``ReadStore`` for the analysis tests.

It takes the same ``Point`` objects the agent and the workloads write, so test data can be
built once and written either here or through the real SQLite store's write path. Runs are
derived from ``workload`` events the way the store contract describes: rank 0's
``run_start`` fields are the configuration, ``run_end`` carries the final state.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

import numpy as np

from collector.store.api import RunInfo, SeriesData, SeriesInfo, StepTable, WorkloadEvent
from contract.point import Point
from contract.schema import Event, RunState, Tag, Workload


class MemoryStore:
    def __init__(self) -> None:
        self._series: dict[tuple, SeriesInfo] = {}
        self._samples: dict[int, list[tuple[int, float]]] = defaultdict(list)
        self._events: dict[str, list[WorkloadEvent]] = defaultdict(list)
        self._unsorted: set[str] = set()

    # -- write side -----------------------------------------------------------------------
    def write(self, points: list[Point]) -> None:
        for point in points:
            if point.measurement == Workload.NAME:
                self._write_event(point)
            else:
                self._write_sample(point)

    def _write_sample(self, point: Point) -> None:
        host = point.tags[Tag.HOST]
        other_tags = {k: v for k, v in point.tags.items() if k != Tag.HOST and v != ""}
        for field_name, value in point.fields.items():
            if isinstance(value, str) or value is None:
                continue
            key = (point.measurement, host, field_name, tuple(sorted(other_tags.items())))
            info = self._series.get(key)
            if info is None:
                info = SeriesInfo(
                    series_id=len(self._series) + 1,
                    measurement=point.measurement,
                    host=host,
                    field=field_name,
                    tags=dict(other_tags),
                )
                self._series[key] = info
            samples = self._samples[info.series_id]
            bisect.insort(samples, (point.time_ns, float(value)))

    def _write_event(self, point: Point) -> None:
        event = WorkloadEvent(
            run_id=point.tags[Tag.RUN_ID],
            host=point.tags[Tag.HOST],
            rank=int(point.tags[Tag.RANK]),
            framework=point.tags.get(Tag.FRAMEWORK, ""),
            event=str(point.fields[Workload.EVENT]),
            time_ns=point.time_ns,
            fields={k: v for k, v in point.fields.items() if k != Workload.EVENT},
        )
        self._events[event.run_id].append(event)
        self._unsorted.add(event.run_id)

    def _run_events(self, run_id: str) -> list[WorkloadEvent]:
        events = self._events.get(run_id, [])
        if run_id in self._unsorted:
            events.sort(key=lambda e: (e.time_ns, e.rank))
            self._unsorted.discard(run_id)
        return events

    # -- ReadStore ------------------------------------------------------------------------
    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        return [
            info
            for info in self._series.values()
            if info.measurement == measurement
            and info.field == field
            and (host is None or info.host == host)
        ]

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        out = []
        for info in series:
            samples = self._samples.get(info.series_id, [])
            times = np.array([t for t, _ in samples], dtype=np.int64)
            values = np.array([v for _, v in samples], dtype=np.float64)
            first = max(int(np.searchsorted(times, start_ns, side="left")) - 1, 0)
            last = min(int(np.searchsorted(times, end_ns, side="right")) + 1, times.size)
            out.append(SeriesData(info, times[first:last], values[first:last]))
        return out

    def hosts(self) -> list[str]:
        return sorted({info.host for info in self._series.values()})

    def runs(self) -> list[RunInfo]:
        infos = []
        for run_id in list(self._events):
            events = self._run_events(run_id)
            starts = [e for e in events if e.event == Event.RUN_START]
            rank0 = next((e for e in starts if e.rank == 0), starts[0] if starts else None)
            config = dict(rank0.fields) if rank0 else {}
            ends = [e for e in events if e.event == Event.RUN_END]
            state = RunState.LIVE
            end_ns = None
            if ends:
                end_ns = max(e.time_ns for e in ends)
                failed = any(e.fields.get(Workload.STATE) == RunState.FAILED for e in ends)
                state = RunState.FAILED if failed else RunState.FINISHED
            infos.append(
                RunInfo(
                    run_id=run_id,
                    framework=events[0].framework,
                    model=str(config.get(Workload.MODEL, "")),
                    hosts=tuple(sorted({e.host for e in events})),
                    world_size=int(config.get(Workload.WORLD_SIZE, 0) or 0),
                    start_ns=min(e.time_ns for e in events),
                    end_ns=end_ns,
                    state=state,
                    config=config,
                )
            )
        infos.sort(key=lambda r: r.start_ns, reverse=True)
        return infos

    def run(self, run_id: str) -> RunInfo | None:
        return next((run for run in self.runs() if run.run_id == run_id), None)

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        return [
            e
            for e in self._run_events(run_id)
            if (since_ns is None or e.time_ns > since_ns) and (kinds is None or e.event in kinds)
        ]

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        return StepTable.from_events(self.events(run_id, since_ns, kinds=(Event.STEP,)))
