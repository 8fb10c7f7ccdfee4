"""Where ``collector serve`` parses line protocol (``--workers N``).

With ``N`` >= 2, every write body of ``POOL_PARSE_BYTES`` or more is parsed in one of
``N`` worker processes and the server only stores what they hand back: parsing is
CPU-bound Python (``float()`` per value, the templates, the columns; ~59 % of the
collector's CPU in one process), and under the GIL one process kept all of it on one core.
The server stays the one writer (SQLite has one; VictoriaMetrics gets the forwarded bodies),
so what is stored, what is refused and when the 204 is sent do not change.

Each worker has a pipe of its own: a request thread takes an idle worker, sends it the
body and waits for the parsed columns (pickled as plain tuples, ~0.2 ms to load against
~2 ms to parse a node's 5-tick body), then gives the worker back; threads beyond ``N``
wait for one. A worker that dies (killed, out of memory) is found by the request that
uses it: that body is parsed in the server instead, and a new worker started in its
place, so nothing acknowledged depends on a worker staying alive. With ``N`` = 1 the
request threads parse (large bodies one at a time: memory).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import select
import signal
import threading
import time
from multiprocessing.connection import Connection

from collector import lineprotocol
from collector.lineprotocol import ParsedBody

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server
# a body this large parsed in a request thread is parsed one at a time (``_parse_here``)
PARALLEL_PARSE_BYTES = 256 * 1024
# with workers, a body this large goes to one: a node's one-tick body (~7.5 kB) costs
# ~0.7 ms to parse and ~0.13 ms to load back; a one-line event body stays in its thread
POOL_PARSE_BYTES = 2 * 1024
WORKER_STOP_SECONDS = 5.0


def default_workers() -> int:
    """``--workers``' default: the cores this process may run on, at most 8 (each worker
    holds ~30 MB of Python and numpy)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def exit_with_parent(parent_pid: int) -> None:
    """In a worker process: exit as soon as ``parent_pid`` (the collector) is gone.

    The workers are children of the forkserver, not of the collector, so a kill -9 of the
    collector would leave them behind (no atexit, no pool shutdown runs). A daemon thread
    waits on a pidfd of the collector (no polling); where pidfds are not available it
    checks once a second. The forkserver itself exits when the collector's end of its
    pipe closes.
    """

    def watch() -> None:
        try:
            pidfd = os.pidfd_open(parent_pid)
        except (AttributeError, OSError):
            while _process_exists(parent_pid):
                time.sleep(1.0)
        else:
            select.select([pidfd], [], [])
        os._exit(0)

    if not _process_exists(parent_pid):
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerGone(Exception):
    """The worker's pipe broke: it died (killed, out of memory) or was stopped."""


class ParseFailed(Exception):
    """The parser itself raised in a worker (a bug: malformed lines are reported, not
    raised); the request is answered 500 as it would be in the server."""


def serve_parses(connection: Connection, parent_pid: int) -> None:
    """A worker process: parse each body sent down ``connection``, send back its
    ``ParsedBody``; exit when the pipe closes or the collector is gone."""
    exit_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the collector stops us
    while True:
        try:
            precision, now_ns = connection.recv()
            body = connection.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            result: ParsedBody | ParseFailed = lineprotocol.parse_body_bytes(
                body, precision, now_ns
            )
        except Exception as error:
            result = ParseFailed(f"{type(error).__name__}: {error}"[:200])
        try:
            connection.send(result)
        except OSError:
            return


class _Worker:
    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self.connection, theirs = context.Pipe(duplex=True)
        self.process = context.Process(
            target=serve_parses,
            args=(theirs, os.getpid()),
            name="collector-parse",
            daemon=True,
        )
        self.process.start()
        theirs.close()

    def parse(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        try:
            self.connection.send((precision, now_ns))
            self.connection.send_bytes(body)
            result = self.connection.recv()
        except (EOFError, OSError) as error:
            raise WorkerGone(str(error) or type(error).__name__) from None
        if isinstance(result, ParseFailed):
            raise result
        return result

    def stop(self) -> None:
        self.connection.close()  # the worker's recv ends: it exits
        self.process.join(WORKER_STOP_SECONDS)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(WORKER_STOP_SECONDS)


class ParsePool:
    """``workers`` parse processes (none for 1); small bodies are parsed in the caller."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.replaced = 0  # workers started in place of one that died
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._closed = False
        self._parsing_here = threading.Lock()
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["collector.lineprotocol"])

    def start(self) -> None:
        """Start the workers (the server calls this once its port is open: each imports
        numpy); until they run, the request threads parse."""
        if self.workers < 2:
            return
        try:
            for _ in range(self.workers):
                self._add(self._new_worker())
        except OSError as error:
            log.warning("parse workers unavailable (%s); parsing in the server", error)
            self.workers = 1
            self.close()
            return
        self._started.set()

    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._all if w.process.pid is not None]

    def _new_worker(self) -> _Worker:
        return _Worker(self._context)

    def _add(self, worker: _Worker) -> None:
        with self._lock:
            self._all.append(worker)
        self._idle.put(worker)

    def parse(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        if self.workers >= 2 and len(body) >= POOL_PARSE_BYTES and self._started.is_set():
            return self._parse_in_worker(body, precision, now_ns)
        if len(body) < PARALLEL_PARSE_BYTES:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)
        return self._parse_here(body, precision, now_ns)

    def _parse_in_worker(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        while True:
            try:
                worker = self._idle.get(timeout=1.0)
                break
            except queue.Empty:
                with self._lock:
                    if not self._all:  # every worker died and none could be started
                        return self._parse_here(body, precision, now_ns)
        try:
            return worker.parse(body, precision, now_ns)
        except WorkerGone as why:
            worker = self._replace(worker, str(why))
            return self._parse_here(body, precision, now_ns)
        finally:
            if worker is not None:
                self._idle.put(worker)

    def _replace(self, dead: _Worker, why: str) -> _Worker | None:
        """A new worker for ``dead`` (None when none can be started: the pool shrinks)."""
        dead.stop()
        log.warning(
            "parse worker %s died (%s, exit status %s); its body is parsed in the server, "
            "a new worker started",
            dead.process.pid,
            why,
            dead.process.exitcode,
        )
        with self._lock:
            if dead in self._all:
                self._all.remove(dead)
            if self._closed:
                return None
        try:
            worker = self._new_worker()
        except OSError as error:
            log.warning("no new parse worker (%s): %d left", error, len(self._all))
            return None
        with self._lock:
            self._all.append(worker)
            self.replaced += 1
        return worker

    def _parse_here(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        """A large body parsed in the server: one at a time. Parsing holds about 13 times
        a body of short lines (its text, then a Python object per line until the columns
        are built); with 16 request threads at once that was the 5.6x peak of issue 30."""
        with self._parsing_here:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        self._started.clear()
        for worker in workers:
            worker.stop()
