"""Where ``collector serve`` parses line protocol: large bodies in worker processes
(parsing is CPU-bound Python, and the GIL would otherwise keep it on one core), small ones
in the request thread."""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
import select
import threading
import time

from collector import lineprotocol
from collector.lineprotocol import ParsedBody

log = logging.getLogger("collector.ingest.server")  # one logger name for the whole server
PARALLEL_PARSE_BYTES = 256 * 1024


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


class ParsePool:
    """Worker processes that parse large bodies; small ones are parsed in the caller."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._parsing_here = threading.Lock()

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["collector.lineprotocol"])
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=context,
                    initializer=exit_with_parent,
                    initargs=(os.getpid(),),
                )
            return self._executor

    def start(self) -> None:
        """Start the workers now rather than on the first large body."""
        if self.workers > 1:
            try:
                futures = [self._pool().submit(os.getpid) for _ in range(self.workers)]
                concurrent.futures.wait(futures)
            except (OSError, concurrent.futures.BrokenExecutor) as error:
                log.warning("parse workers unavailable (%s); parsing in the server", error)
                self.workers = 1

    def parse(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        if len(body) < PARALLEL_PARSE_BYTES:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)
        if self.workers < 2:
            return self._parse_here(body, precision, now_ns)
        try:
            future = self._pool().submit(lineprotocol.parse_body_bytes, body, precision, now_ns)
            return future.result()
        except concurrent.futures.BrokenExecutor:
            log.warning("a parse worker died; starting new workers")
            with self._lock:
                self._executor = None
        except OSError as error:  # no processes to be had: parse here from now on
            log.warning("parse workers unavailable (%s); parsing in the server", error)
            self.workers = 1
        return self._parse_here(body, precision, now_ns)

    def _parse_here(self, body: bytes, precision: str | None, now_ns: int) -> ParsedBody:
        """A large body parsed in the server: one at a time. Parsing holds about 13 times
        a body of short lines (its text, then a Python object per line until the columns
        are built); with 16 request threads at once that was the 5.6x peak of issue 30."""
        with self._parsing_here:
            return lineprotocol.parse_body_bytes(body, precision, now_ns)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
