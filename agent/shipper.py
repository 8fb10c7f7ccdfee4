"""Push points to an InfluxDB v2 write endpoint, from the queue of a disk spool.

``submit`` puts the batch in the queue (``agent.queue``: the disk spool, durable before
it returns, or memory while the spool fails; never waits on the network); a background
thread sends the spool oldest-first over one kept-alive HTTP
connection (``HttpWriter``: line protocol, precision ns) and deletes a segment only after
a 2xx. Once caught up it waits ``batch_seconds`` before the next request, so that one
request carries several ticks (a flush or a stop cuts the wait short). Any InfluxDB v2
write endpoint works: the epochscope collector, InfluxDB 2/3, VictoriaMetrics (all take
``POST /api/v2/write``). The standard library's ``http.client`` replaced influxdb-client
here: a request costs a fraction of the CPU, and the agent ~10 MB less memory
(bench/agent_overhead/README.md).

What happens on each answer:

- 2xx: the segments are deleted.
- connection refused, timeout, 3xx, 5xx, 401, 408, 429: the segments stay; retry after a backoff
  that doubles from 0.5 s up to ``backoff_max_seconds`` (a ``Retry-After`` in seconds is
  honoured up to that cap; its HTTP-date form is ignored); logged once per outage. A token
  that no HTTP header can carry is retried the same way, the log saying so without it.
- a 400 that says it was a partial write (the epochscope collector's ``partial write: N
  points written, K line(s) rejected: line 3: ...``): the valid lines are stored, so the
  batch is done; the K refused lines are counted in ``points_dropped`` and logged once
  with the server's line numbers.
- any other 4xx (malformed data, the whole body refused): logged with the line number from
  the server's message when it gives one, and the segment is deleted, its points counted
  in ``points_dropped``. A batch of several segments is first retried one segment at a
  time, so only the poisoned segment is lost.

When the spool itself fails (any ``OSError``: a full disk while writing or sealing a
segment, a read-only directory when deleting a delivered one, an unreadable segment),
delivery goes on: the queue logs each failing operation once until it works again and
keeps new points in memory; the shipper sends them from there while the spool has
nothing older, and retries the failed operation with the same doubling backoff. A segment
that cannot be read (EIO: a bad sector) while the next one can is dropped after
``UNREADABLE_SEGMENT_TRIES`` tries, counted and named in one line; a disk that fails every
read drops nothing.

Counts are mirrored into the ``AgentStats`` the self sampler reports (see
``agent.queue``).
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.queue import PointQueue
from agent.spool import DEFAULT_SEGMENT_MAX_BYTES, Segment
from agent.thread_names import name_this_thread
from contract.point import Point, encode_line
from netserve.ratelog import RateLimitedLog
from netserve.tls import client_context

if TYPE_CHECKING:
    from agent.samplers.agent import AgentStats

log = logging.getLogger(__name__)

SHIPPER_THREAD = "es-shipper"  # its kernel name too (agent.thread_names)
BACKOFF_START_SECONDS = 0.5
# A segment whose reads fail this many times in a row while a newer one reads is set aside
# (a bad sector, not a failing disk): its points are dropped, the rest of the spool is sent.
UNREADABLE_SEGMENT_TRIES = 4
BATCH_MAX_BYTES = 1 << 20
BATCH_MAX_SEGMENTS = 64
HTTP_TIMEOUT_SECONDS = 10.0
USER_AGENT = "epochscope-shipper"
# refused lines come back every batch while their cause lasts: one line of each kind per
# 10 minutes (the rest counted into it), not one a batch (~17,000 a day per node)
REFUSED_LOG_SECONDS = 600.0
TOKEN_NOT_A_HEADER = (
    "the token cannot be sent in an HTTP header (a line break or a non-latin-1 character)"
)
_LINE_NUMBER = re.compile(r"\bline[s()]*\s*:?\s*(\d+)", re.IGNORECASE)
_LINES_REJECTED = re.compile(r"\bpartial write\b.*?\b(\d+) line\(s\) rejected", re.IGNORECASE)


@dataclass(frozen=True)
class Outcome:
    """What a write attempt came to."""

    delivered: bool
    retry: bool  # not delivered, keep and retry later
    status: int | None = None
    message: str = ""
    retry_after: float | None = None


def line_number_in(message: str) -> int | None:
    """The first line number a server's error message names, if any."""
    match = _LINE_NUMBER.search(message)
    return int(match[1]) if match else None


def lines_rejected_in(message: str) -> int | None:
    """How many lines a server that stored the rest of the body (a partial write, as the
    epochscope collector answers) says it refused; None when the message does not say so,
    that is when the whole body may have been refused."""
    match = _LINES_REJECTED.search(message)
    return int(match[1]) if match else None


def _server_message(body: Any) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = str(body or "").strip()
    try:
        decoded = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(decoded, dict) and "message" in decoded:
        return str(decoded["message"])[:500]
    return text[:500]


class HttpWriter:
    """One InfluxDB v2 write endpoint over one kept-alive ``http.client`` connection;
    never raises.

    A request is the endpoint's own: ``POST {url}/api/v2/write?org=&bucket=&precision=ns``
    with the token in ``Authorization: Token ...``. A kept connection the server has since
    closed (its idle timeout) is found out on the next request, which is then sent once
    more on a new connection, as urllib3 does; any other failure is the endpoint's outage.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        org: str,
        bucket: str,
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"push url {url!r}: want http://HOST[:PORT] or https://...")
        self._https = parts.scheme == "https"
        # https: the collector verified against push.ca_file or $EPOCHSCOPE_CA_FILE (else
        # the system's CAs), a client certificate presented where configured; the context
        # is made for each new connection, so renewed files are read again
        self._tls = tls or client_context
        self._host = parts.hostname
        self._port = parts.port
        query = urllib.parse.urlencode({"org": org, "bucket": bucket, "precision": "ns"})
        self._target = f"{parts.path.rstrip('/')}/api/v2/write?{query}"
        self._headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if token:
            self._headers["Authorization"] = f"Token {token}"
        self._connection: http.client.HTTPConnection | None = None

    def write(self, body: bytes) -> Outcome:
        reused = self._connection is not None
        try:
            try:
                status, headers, text = self._post(body)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not reused:
                    raise
                self.close()  # the kept connection had been closed by the server
                status, headers, text = self._post(body)
        except (OSError, http.client.HTTPException) as error:  # refused, reset, timeout
            self.close()
            return Outcome(False, True, None, f"{type(error).__name__}: {str(error)[:300]}")
        except ValueError:  # http.client refused a header value; its text quotes the token
            self.close()
            return Outcome(False, True, None, TOKEN_NOT_A_HEADER)
        if 200 <= status < 300:
            return Outcome(True, False, status)
        retry = status in (401, 408, 429) or not 400 <= status < 500
        return Outcome(False, retry, status, _server_message(text), _retry_after(headers))

    def _post(self, body: bytes) -> tuple[int, http.client.HTTPMessage, bytes]:
        if self._connection is None:
            self._connection = self._connect()
        self._connection.request("POST", self._target, body=body, headers=self._headers)
        response = self._connection.getresponse()
        text = response.read()  # read whole: the connection is then free for the next one
        if response.will_close:
            self.close()
        return response.status, response.headers, text

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=HTTP_TIMEOUT_SECONDS,
                context=self._tls(),
            )  # fmt: skip
        return http.client.HTTPConnection(self._host, self._port, timeout=HTTP_TIMEOUT_SECONDS)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _retry_after(headers: Any) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Shipper:
    """Durable, ordered, at-least-once delivery of points to one write endpoint."""

    def __init__(
        self,
        url: str,
        token: str | None,
        org: str,
        bucket: str,
        spool_dir: Path,
        spool_max_bytes: int = 512 * 2**20,
        stats: AgentStats | None = None,
        *,
        batch_seconds: float = 0.0,
        backoff_max_seconds: float = 30.0,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        tls: Callable[[], ssl.SSLContext] | None = None,
        sync_each_batch: bool = False,
    ) -> None:
        self.url = url
        self._tls = tls
        self._token = token
        self._org = org
        self._bucket = bucket
        self.batch_seconds = batch_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.queue = PointQueue(
            Path(spool_dir), spool_max_bytes, segment_max_bytes, stats, sync_each_batch
        )
        self._writer: HttpWriter | None = None
        self._wake = threading.Condition()
        self._new_data = False  # set by submit: wakes an idle sender
        self._flush_asked = False  # set by flush: also cuts a backoff short
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._isolate_until_seq = 0  # send one segment at a time up to this one
        self._read_failures = (0, 0)  # (segment seq, reads of it that failed in a row)
        self._outage_logged = False
        self._refusals_log = RateLimitedLog(log, REFUSED_LOG_SECONDS)
        # what the endpoint took since start (line-protocol lines, body bytes); written by
        # the sender thread only (`workloads resend` says how much it delivered)
        self.delivered_points = 0
        self.delivered_bytes = 0

    @property
    def stats(self) -> AgentStats | None:
        return self.queue.stats

    def __repr__(self) -> str:
        return f"Shipper(url={self.url!r}, spool_dir={str(self.queue.directory)!r})"

    # The sampling side.

    def start(self) -> None:
        if self._thread is not None:
            return
        self._writer = HttpWriter(self.url, self._token, self._org, self._bucket, self._tls)
        self._thread = threading.Thread(target=self._run, name=SHIPPER_THREAD, daemon=True)
        self._thread.start()

    def submit(self, points: Sequence[Point]) -> None:
        """Queue the points (durably) and wake the sender; never waits on the network."""
        lines = [line for line in map(encode_line, points) if line]
        if not lines:
            return
        self.queue.put("\n".join(lines).encode(), len(lines))
        with self._wake:
            self._new_data = True
            self._wake.notify_all()

    def flush(self, timeout: float) -> bool:
        """Ask for an immediate attempt; True once the spool is empty (within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._wake:
            self._flush_asked = True
            self._wake.notify_all()
        while not self.queue.empty:
            if self._thread is None or not self._thread.is_alive():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(0.05, remaining))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Flush for up to ``timeout`` seconds, then stop; what is left stays spooled."""
        deadline = time.monotonic() + timeout
        flushed = self.flush(timeout)
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))
        if self._writer is not None:
            self._writer.close()
        self.queue.close()
        spool = self.queue.spool
        if not flushed and len(spool):
            log.warning(
                "stopping with %d points (%d bytes) still spooled in %s: "
                "they are sent at the next start",
                spool.points,
                spool.bytes,
                spool.directory,
            )

    # The sender thread.

    def _wait_for_data(self) -> None:
        """Idle: wait until something is submitted, a flush is asked for, or a stop."""
        with self._wake:
            while not (self._new_data or self._flush_asked or self._stopping):
                self._wake.wait()
            self._new_data = self._flush_asked = False

    def _pause(self, seconds: float) -> None:
        """Wait out a backoff or a batch window; new data does not cut it short, a flush
        or a stop does."""
        deadline = time.monotonic() + seconds
        with self._wake:
            while not (self._flush_asked or self._stopping):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wake.wait(remaining)
            self._new_data = self._flush_asked = False

    def _run(self) -> None:
        name_this_thread(SHIPPER_THREAD)
        backoff = BACKOFF_START_SECONDS
        while not self._stopping:
            try:
                backoff = self._pass(backoff)
            except OSError as error:  # the spool failed in a way not handled below
                self.queue.fails(getattr(error, "operation", "use"), error)
                self.queue.update_stats()
                self._pause(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)
            except Exception:  # a bug must not end delivery for good: log it, go on
                log.exception("shipper: unexpected error; retrying in %.1f s", backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)

    def _pass(self, backoff: float) -> float:
        """One send attempt (or one wait); the backoff to use next."""
        self.queue.move_memory_to_spool()
        self.queue.retry_deletes()
        oldest = self.queue.oldest()
        if oldest is None:
            if self.queue.has_memory:
                return self._send_memory(backoff)
            if self.queue.failing_beyond_write():
                self.queue.update_stats()
                self._pause(backoff)  # retry the failing operation later
                return min(backoff * 2, self.backoff_max_seconds)
            # nothing to send; a failing write is retried by the next put, so wait for
            # data, not out a backoff that grew while nothing was sent (new points would
            # wait up to backoff_max_seconds in memory)
            self._wait_for_data()
            return backoff
        single = oldest.seq <= self._isolate_until_seq
        batch, everything = self.queue.take(BATCH_MAX_BYTES, 1 if single else BATCH_MAX_SEGMENTS)
        try:
            body = b"".join(segment.read() for segment in batch)
        except OSError as error:
            self.queue.release(batch)
            if error.errno == errno.ENOENT:  # deleted behind our back: nothing to send
                log.error("spool: segment file gone (%s); its points are lost", error.filename)
                self.queue.remove([batch[0]], dropped=True)
                return backoff
            self.queue.fails("read", error)
            if self._set_aside_unreadable(batch):
                return backoff
            self.queue.update_stats()
            self._pause(backoff)
            return min(backoff * 2, self.backoff_max_seconds)
        self.queue.works("read")
        self._read_failures = (0, 0)
        damaged = self._report_damaged(batch)
        outcome = self._write(body)
        if outcome.delivered:
            self._count_delivered(sum(segment.points for segment in batch) - damaged, len(body))
            self.queue.count_dropped(damaged)
            self.queue.remove(batch)
            if self.batch_seconds > 0 and everything and not self.queue.write_failing():
                # Caught up: let a few ticks gather so that one request carries them
                # (what was submitted while this request was out waits too).
                self.queue.update_stats()
                self._pause(self.batch_seconds)
            return BACKOFF_START_SECONDS
        if outcome.retry:
            self.queue.release(batch)
            return self._retry_later(outcome, backoff)
        rejected = lines_rejected_in(outcome.message)
        if rejected is not None:  # the other lines of every segment were stored
            lost = rejected + damaged
            self._count_delivered(sum(segment.points for segment in batch) - lost, len(body))
            names = (
                batch[0].path.name
                if len(batch) == 1
                else (f"{batch[0].path.name}..{batch[-1].path.name}")
            )
            self._log_partial(names, rejected, sum(s.points for s in batch), outcome)
            self.queue.count_dropped(lost)
            self.queue.remove(batch)
            return BACKOFF_START_SECONDS
        if len(batch) > 1:
            # Find the poisoned segment: resend this batch one segment at a time.
            self.queue.release(batch)
            self._isolate_until_seq = batch[-1].seq
        else:
            self._log_rejected(batch[0].path.name, batch[0].points, outcome)
            self.queue.remove(batch, dropped=True)
        self.queue.update_stats()
        return backoff

    def _set_aside_unreadable(self, batch: list[Segment]) -> bool:
        """After a failed read: whether the batch's one segment was dropped as unreadable.

        A batch of several is read one segment at a time next, to find the one that fails.
        One segment that failed ``UNREADABLE_SEGMENT_TRIES`` times in a row is dropped only
        when the next segment reads: a disk that fails every read keeps all its points
        (they wait, retried with backoff) rather than losing the spool a segment at a time.
        """
        if len(batch) > 1:
            self._isolate_until_seq = batch[-1].seq
            return False
        segment = batch[0]
        seq, failures = self._read_failures
        failures = failures + 1 if seq == segment.seq else 1
        self._read_failures = (segment.seq, failures)
        if failures < UNREADABLE_SEGMENT_TRIES:
            return False
        newer = self.queue.spool.newer_than(segment)
        if newer is None:
            return False
        try:
            with newer.path.open("rb") as file:
                file.read(1)
        except OSError:
            return False
        log.error(
            "spool: %s cannot be read after %d tries while %s can: its %d points are "
            "dropped, the rest of the spool is sent",
            segment.path.name,
            failures,
            newer.path.name,
            segment.points,
        )
        self._read_failures = (0, 0)
        self.queue.remove([segment], dropped=True)
        return True

    def _report_damaged(self, batch: list[Segment]) -> int:
        """Lines of ``batch`` whose checksum failed (left out of the body): logged once per
        segment with their line numbers; how many."""
        for segment in batch:
            if segment.damaged and not segment.reported:
                segment.reported = True
                shown = ", ".join(str(number) for number in segment.damaged[:10])
                more = f" and {len(segment.damaged) - 10} more" if len(segment.damaged) > 10 else ""
                log.error(
                    "spool: %s: line %s%s damaged on disk (checksum mismatch): skipped, "
                    "the segment's other lines are sent",
                    segment.path.name,
                    shown,
                    more,
                )
        return sum(len(segment.damaged) for segment in batch)

    def _send_memory(self, backoff: float) -> float:
        """The spool is empty and cannot take writes: send what memory holds directly."""
        batch = self.queue.memory_batch(BATCH_MAX_BYTES)
        body = b"".join(lines + b"\n" for lines, _ in batch)
        outcome = self._write(body)
        if outcome.retry and not outcome.delivered:
            return self._retry_later(outcome, backoff)
        points = sum(n for _, n in batch)
        if outcome.delivered:
            self._count_delivered(points, len(body))
        else:
            rejected = lines_rejected_in(outcome.message)
            if rejected is None:
                self._log_rejected("points held in memory", points, outcome)
            else:
                self._count_delivered(points - rejected, len(body))
                self._log_partial("points held in memory", rejected, points, outcome)
            self.queue.count_dropped(points if rejected is None else rejected)
        self.queue.forget_memory(batch)
        return BACKOFF_START_SECONDS if outcome.delivered else backoff

    def _count_delivered(self, points: int, size: int) -> None:
        self.delivered_points += max(points, 0)
        self.delivered_bytes += size

    def _write(self, body: bytes) -> Outcome:
        assert self._writer is not None
        outcome = self._writer.write(body)
        if outcome.delivered and self._outage_logged:
            self._outage_logged = False
            log.info("push to %s works again: sending the spool", self.url)
        return outcome

    def _retry_later(self, outcome: Outcome, backoff: float) -> float:
        self._log_outage(outcome)
        wait = min(outcome.retry_after or backoff, self.backoff_max_seconds)
        self.queue.update_stats()
        self._pause(wait)
        return min(backoff * 2, self.backoff_max_seconds)

    def _log_outage(self, outcome: Outcome) -> None:
        if self._outage_logged:
            return
        self._outage_logged = True
        what = f"HTTP {outcome.status}" if outcome.status else "unreachable"
        if outcome.status == 401:
            what += " (the token was refused)"
        log.warning(
            "push to %s failed (%s: %s): keeping points in the spool and retrying; "
            "logged once until it works",
            self.url,
            what,
            self._redact(outcome.message),
        )

    def _log_rejected(self, where_from: str, points: int, outcome: Outcome) -> None:
        line = line_number_in(outcome.message)
        where = f" at line {line} of {where_from}" if line else f" ({where_from})"
        self._refusals_log.log(
            logging.ERROR,
            ("rejected", outcome.status),
            "%s rejected %d points with HTTP %s%s: %s; dropped them",
            self.url,
            points,
            outcome.status,
            where,
            self._redact(outcome.message),
        )

    def _log_partial(self, where_from: str, rejected: int, points: int, outcome: Outcome) -> None:
        self._refusals_log.log(
            logging.ERROR,
            ("partial", outcome.status),
            "%s refused %d of %d lines (%s) with HTTP %s and stored the others: %s; "
            "dropped the refused lines",
            self.url,
            rejected,
            points,
            where_from,
            outcome.status,
            self._redact(outcome.message),
        )

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text
