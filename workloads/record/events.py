"""Workload events: one ``workload`` point per run/epoch/step milestone of one rank.

Tags: ``host``, ``run_id``, ``rank``, ``framework``. Fields (``contract.schema.Workload``):
``event`` (run_start | epoch_start | epoch_end | step | run_end), ``epoch`` (from 1),
``step`` (global step, from 1), ``images`` (images this rank processed in the epoch or
step, warm-up steps excluded), ``seconds`` (wall time of those steps), ``loss``, ``top1``,
``top5`` (validation accuracy 0..1); ``run_start`` also carries the configuration
(model, batch_size per rank, world_size, local_size, precision, data_format,
dataset_images, dataset_bytes, image_size, host_memory_bytes, warmup_steps, target_top1);
``run_end`` carries ``state`` (finished | failed | interrupted). A rank inside a Slurm job adds its
``slurm_job_id`` and ``slurm_step_id`` to ``run_start`` (``slurm_fields``), so a run names
the job whose ``job``/``slurm_job`` series the node's agent writes (docs/slurm.md).

Count-like fields are always written as integers and the rest as floats, so a field never
changes type between points (InfluxDB refuses that).

Edges: at ``run_start``, ``epoch_start``, ``epoch_end`` and ``run_end`` the writer asks
the node's agent for an edge sample (``AgentEdges``: ``POST /edge`` on 127.0.0.1) and
stamps the event with that sample's time, so the report reads the node's counters at the
event itself instead of interpolating across the tick that holds it. A rank with no agent
answering is told so once (connection refused on loopback: well under a millisecond) and
stamps its events with its own clock from then on.

Points go to a sink: the agent's ``Shipper`` (spooled to disk by a thread of the rank's
own, ``BackgroundSink``, so a slow or absent collector loses nothing and the training's
thread never waits for a disk sync) or, with no collector, a JSON-lines file that
``workloads resend`` can deliver later.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from agent.thread_names import name_this_thread
from contract.point import Point
from contract.schema import Event, Kind, Tag, Workload, field_spec

log = logging.getLogger(__name__)

INTEGER_UNITS = frozenset({"count", "bytes", "pixels"})
DEFAULT_ORG = "epochscope"
DEFAULT_BUCKET = "epochscope"


class EventSink(Protocol):
    def submit(self, points: list[Point]) -> None: ...

    def close(self, timeout: float) -> bool:
        """Deliver what is pending (up to ``timeout`` seconds); True when nothing is left."""
        ...


EVENT_BATCH_SECONDS = 1.0


class ShipperSink:
    """Through the agent's disk-spooled shipper to an InfluxDB v2 write endpoint. Once
    caught up, the shipper sends at most every ``EVENT_BATCH_SECONDS``: the events of that
    second go in one request (a rank's step events come every step where epochs are short,
    and each request costs the rank ~3 ms of CPU and the collector as much: one request a
    second bounds that whatever the step rate), a second late at most on the dashboard."""

    def __init__(self, url: str, token: str | None, spool_dir: Path) -> None:
        from agent.shipper import Shipper  # the one place a workload builds a Shipper

        spool_dir.mkdir(parents=True, exist_ok=True)
        self.spool_dir = spool_dir
        self._shipper = Shipper(
            url=url,
            token=token,
            org=DEFAULT_ORG,
            bucket=DEFAULT_BUCKET,
            spool_dir=spool_dir,
            batch_seconds=EVENT_BATCH_SECONDS,
        )
        self._shipper.start()

    def submit(self, points: list[Point]) -> None:
        self._shipper.submit(points)

    def delivered(self) -> tuple[int, int]:
        """Events (line-protocol lines) and bytes the collector took since this started."""
        return self._shipper.delivered_points, self._shipper.delivered_bytes

    def waiting(self) -> tuple[int, int]:
        """Events and bytes still in the spool (after ``close``: what it kept)."""
        spool = self._shipper.queue.spool
        return spool.points + self._shipper.queue.memory_points, spool.bytes

    def close(self, timeout: float) -> bool:
        """Deliver what is spooled; True when all of it is. A delivered spool's directory
        is removed (with the run's spool directory, once empty): nothing is left behind."""
        delivered = self._shipper.flush(timeout)
        self._shipper.close(timeout=1.0)
        if delivered:
            remove_empty_spool(self.spool_dir)
        return delivered


EVENTS_THREAD = "es-events"  # the kernel keeps 15 bytes of a thread's name


class BackgroundSink:
    """Hands the events to ``sink`` (the spooling shipper) on a thread of its own: spooling
    is durable (an ``fdatasync`` per event, ~10 ms on a busy disk), and the training's
    thread must not wait for it. Each event keeps the time it happened; ``close`` spools
    what is queued, then delivers as the sink does. A rank killed outright (SIGKILL) loses
    the events still queued: the few milliseconds before they reach the spool."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=EVENTS_THREAD, daemon=True)
        self._thread.start()

    def submit(self, points: list) -> None:
        self._queue.put(points)

    def _run(self) -> None:
        name_this_thread(EVENTS_THREAD)
        while (points := self._queue.get()) is not None:
            try:
                self.sink.submit(points)
            except Exception as error:  # the shipper logs its own spool faults
                log.error("an event was not spooled: %r", error)

    def close(self, timeout: float) -> bool:
        began = time.monotonic()
        self._queue.put(None)
        self._thread.join(timeout)
        return self.sink.close(max(1.0, timeout - (time.monotonic() - began)))


def remove_empty_spool(spool_dir: Path) -> None:
    """Remove a spool directory that holds no segment (and its parent, when empty)."""
    import shutil

    if any(path.is_file() and path.stat().st_size for path in spool_dir.rglob("*")):
        return  # something waits in it: never remove that
    shutil.rmtree(spool_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        spool_dir.parent.rmdir()


class FileSink:
    """Appends points as JSON lines (``Point.to_json``), flushed after every batch.

    JSON keeps each value's type (1 vs 1.0), so ``workloads resend`` can deliver the file
    later exactly as the shipper would have.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handle = path.open("a", encoding="utf-8")

    def submit(self, points: list[Point]) -> None:
        for point in points:
            self._handle.write(json.dumps(point.to_json()) + "\n")
        self._handle.flush()

    def close(self, timeout: float) -> bool:
        self._handle.close()
        return True


class MemorySink:
    """Keeps points in a list (tests, and the launcher's own summary)."""

    def __init__(self) -> None:
        self.points: list[Point] = []

    def submit(self, points: list[Point]) -> None:
        self.points.extend(points)

    def close(self, timeout: float) -> bool:
        return True


def read_events_file(path: Path) -> list[Point]:
    """The points a FileSink wrote."""
    points = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                points.append(
                    Point(data["measurement"], data["tags"], data["fields"], data["time"])
                )
            except (ValueError, KeyError) as error:
                raise ValueError(f"{path}:{number}: not an event ({error})") from None
    return points


def coerce(name: str, value: object) -> int | float | str:
    """The value in the one Python type its field is always written with."""
    spec = field_spec(Workload.NAME, name)
    if spec is None:
        raise KeyError(f"{name!r} is not a field of {Workload.NAME} in contract.schema")
    if spec.kind is Kind.TEXT:
        return str(value)
    if spec.unit in INTEGER_UNITS:
        return int(value)  # type: ignore[call-overload]
    return float(value)  # type: ignore[arg-type]


EDGE_EVENTS = frozenset({Event.RUN_START, Event.EPOCH_START, Event.EPOCH_END, Event.RUN_END})
AGENT_PORT_ENV = "EPOCHSCOPE_AGENT_PORT"
DEFAULT_AGENT_PORT = 9711


# A rank spends at most this share of its time waiting for edge samples, after an
# allowance for its first edges (bench/profile_overhead/README.md: one costs ~1-8 ms on a
# loaded node); past it an edge is stamped with the rank's own clock (interpolated, and
# the report says so) until the share is back under.
EDGE_BUDGET_SHARE = 0.002
EDGE_BUDGET_ALLOWANCE_SECONDS = 3.0  # a loaded node's first edges can take 0.2-0.8 s each


class AgentEdges:
    """Asks the local agent (``POST /edge`` on 127.0.0.1) to sample now; its timestamp.

    ``sample()`` returns the agent's sample time in ns, or None when no agent answers:
    after the first failure it never asks again, so a rank without an agent is not slowed.
    A slow answer (over ``timeout`` seconds: the agent is wedged) counts as a failure too;
    a 503 (the agent was busy sampling a tick for longer than it waits) only for that edge.

    Bounded: one keep-alive connection per process (no connect, and no new agent thread,
    per edge); and once the calling threads have waited more than ``budget_share`` of the
    time since the first request plus ``budget_allowance`` seconds in all, an edge is not
    asked for (None: the caller's clock) until the share is back under
    (``skipped_over_budget`` counts them), so a loop that makes many short DataLoader
    passes cannot spend a noticeable share of its steps here.
    """

    def __init__(
        self,
        port: int,
        timeout: float = 1.0,
        budget_share: float = EDGE_BUDGET_SHARE,
        budget_allowance: float = EDGE_BUDGET_ALLOWANCE_SECONDS,
        clock=time.perf_counter,
    ) -> None:
        self.port = port
        self.timeout = timeout
        self.answering: bool | None = None  # None: not asked yet
        self.budget_share = budget_share
        self.budget_allowance = budget_allowance
        self.asked = 0  # requests sent
        self.waited = 0.0  # seconds the callers spent in those requests
        self.skipped_over_budget = 0
        self._clock = clock
        self._since: float | None = None  # the first request
        self._connection: http.client.HTTPConnection | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()  # one connection: one request at a time

    @classmethod
    def from_environment(cls) -> AgentEdges | None:
        """From ``EPOCHSCOPE_AGENT_PORT`` (default 9711; ``0`` or ``off``: none)."""
        text = os.environ.get(AGENT_PORT_ENV, str(DEFAULT_AGENT_PORT)).strip()
        if text in ("0", "off", ""):
            return None
        return cls(int(text)) if text.isdigit() else None

    def within_budget(self) -> bool:
        if self._since is None:
            return True
        elapsed = self._clock() - self._since
        return self.waited <= self.budget_allowance + self.budget_share * elapsed

    def sample(self) -> int | None:
        if self.answering is False:
            return None
        with self._lock:
            if not self.within_budget():
                if self.skipped_over_budget == 0:
                    log.info(
                        "agent edge samples have taken %.3f s of this process's time: edges "
                        "past %.1f%% of it are interpolated between the agent's ticks",
                        self.waited,
                        self.budget_share * 100,
                    )
                self.skipped_over_budget += 1
                return None
            began = self._clock()
            if self._since is None:
                self._since = began
            try:
                return self._ask()
            finally:
                self.asked += 1
                self.waited += self._clock() - began

    def _ask(self) -> int | None:
        try:
            status, body = self._post()
            if status == 503:  # busy for this one edge: ask again next time
                log.debug("the agent was busy: this edge is interpolated")
                return None
            if status != 200:
                raise OSError(f"HTTP {status}")
            time_ns = int(json.loads(body)["time_ns"])
        except (OSError, ValueError, KeyError, http.client.HTTPException) as error:
            self._close()
            if self.answering is None:
                log.info(
                    "no agent edge samples on 127.0.0.1:%d (%s): epoch edges will be "
                    "interpolated between the agent's ticks",
                    self.port,
                    error,
                )
            self.answering = False
            return None
        self.answering = True
        return time_ns

    def _post(self) -> tuple[int, bytes]:
        """``POST /edge`` on the kept connection; once more on a new one if the kept one
        was closed meanwhile (the agent closes idle ones after a minute)."""
        if self._pid != os.getpid():  # a forked child: the parent's socket is not ours
            self._connection, self._pid = None, os.getpid()
        reused = self._connection is not None
        try:
            return self._exchange()
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
            if not reused:
                raise
            self._close()
            return self._exchange()

    def _exchange(self) -> tuple[int, bytes]:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=self.timeout
            )
        self._connection.request("POST", "/edge", body=b"")
        response = self._connection.getresponse()
        body = response.read()
        if response.will_close:
            self._close()
        return response.status, body

    def _close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(OSError):
                self._connection.close()
            self._connection = None


# The environment variables Slurm gives a job's processes -> run_start fields.
SLURM_VARIABLES = {
    "SLURM_JOB_ID": Workload.SLURM_JOB_ID,
    "SLURM_STEP_ID": Workload.SLURM_STEP_ID,
}


def slurm_fields(environ: Mapping[str, str]) -> dict[str, str]:
    """The rank's Slurm job and step ids, from its environment; {} outside Slurm."""
    return {
        field: environ[name].strip()
        for name, field in SLURM_VARIABLES.items()
        if environ.get(name, "").strip()
    }


class EventWriter:
    """Builds a rank's ``workload`` points and hands them to a sink.

    ``environ`` (the process's environment by default) is read at ``run_start`` for the
    Slurm job and step the rank runs in; a field the caller gives wins.
    """

    def __init__(
        self,
        sink: EventSink,
        run_id: str,
        rank: int,
        framework: str,
        host: str | None = None,
        clock_ns=time.time_ns,
        edges: AgentEdges | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.sink = sink
        self.environ = environ
        self.tags = {
            Tag.HOST: host or socket.gethostname(),
            Tag.RUN_ID: run_id,
            Tag.RANK: str(rank),
            Tag.FRAMEWORK: framework,
        }
        self._clock_ns = clock_ns
        self.edges = edges

    def emit(
        self, event: str, fields: dict[str, object] | None = None, time_ns: int | None = None
    ) -> Point:
        """``time_ns``: when it happened, if not now (an epoch known to have begun earlier).

        An edge event happening now is stamped with the agent's edge sample time."""
        if time_ns is None and event in EDGE_EVENTS and self.edges is not None:
            time_ns = self.edges.sample()
        values: dict[str, int | float | str] = {Workload.EVENT: event}
        if event == Event.RUN_START:
            values.update(slurm_fields(self.environ))
            values[Workload.PID] = os.getpid()  # tells its processes from others on the host
        for name, value in (fields or {}).items():
            if value is not None:
                values[name] = coerce(name, value)
        point = Point(Workload.NAME, dict(self.tags), values, time_ns or self._clock_ns())
        self.sink.submit([point])
        return point

    def close(self, timeout: float = 30.0) -> bool:
        return self.sink.close(timeout)


def make_sink(
    collector_url: str | None,
    token: str | None,
    spool_dir: Path,
    events_file: Path | None,
) -> EventSink:
    if collector_url:
        return BackgroundSink(ShipperSink(collector_url, token, spool_dir))
    if events_file is not None:
        return FileSink(events_file)
    return MemorySink()
