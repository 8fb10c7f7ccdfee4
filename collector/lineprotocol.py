"""InfluxDB line protocol -> columns of samples, workload events and per-line errors.

A body is split on newlines; blank lines and ``#`` comments are skipped. Each line is parsed
by the ``line-protocol-parser`` package (C): escapes in measurement, tag and field names,
quoted strings with spaces, commas and equals signs, integer ``i`` and unsigned ``u``
suffixes with their range checks, booleans (``t``, ``T``, ``true``, ``True``, ``TRUE`` and
the ``f`` forms), optional timestamps.

* A valid line of any measurement but ``workload`` contributes its numeric fields (floats,
  integers, booleans as 1/0) to a :class:`SampleGroup`: every line of one tag set with the
  same field names, as one int64 time vector and one float64 row per field. String fields
  of such lines are dropped: they are not samples.
* A ``workload`` line is kept whole, typed fields and all, as a :class:`~agent.point.Point`
  event (``agent.schema.Workload``).
* A malformed line becomes a :class:`LineError` with its 1-based line number; the other
  lines are kept (InfluxDB's partial write).

Times: a timestamp counts units of ``precision`` (``ns``/``n``, ``us``/``u``, ``ms``, ``s``,
``m``, ``h``) and is converted to ns. A line without one gets the server time truncated to
the precision, as InfluxDB does. Two points of one series with the same time are one point:
the last one written wins.

Speed: about 8 µs of the ~10 µs per 12-field agent line goes to the C parser itself; a
hand-written fast path (cached tag sets, field sets matched by a compiled template) measured
no faster, so there is none. The server spreads large bodies over worker processes instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from line_protocol_parser import LineFormatError, parse_line

from agent.point import FieldValue, Point
from agent.schema import Workload

PRECISION_NS: dict[str, int] = {
    "ns": 1,
    "n": 1,
    "us": 1_000,
    "u": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class PrecisionError(ValueError):
    """An unknown ``precision`` query argument."""


@dataclass(frozen=True, slots=True)
class LineError:
    line: int  # 1-based line number in the body
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(slots=True)
class SampleGroup:
    """Points of one tag set with the same numeric fields, as columns."""

    measurement: str
    tags: dict[str, str]  # every tag, host included; shared, do not modify
    fields: tuple[str, ...]
    times_ns: np.ndarray  # int64 (n,), ascending, unique
    values: np.ndarray  # float64 (len(fields), n)

    @property
    def samples(self) -> int:
        return int(self.values.size)


@dataclass(slots=True)
class ParsedBody:
    groups: list[SampleGroup] = field(default_factory=list)
    events: list[Point] = field(default_factory=list)  # workload lines, in body order
    errors: list[LineError] = field(default_factory=list)
    points: int = 0  # valid lines
    untimed_lines: list[int] = field(default_factory=list)  # 1-based; got server_time_ns
    server_time_ns: int = 0

    @property
    def samples(self) -> int:
        return sum(group.samples for group in self.groups)


def precision_factor(precision: str | None) -> int:
    """ns per unit of a ``precision`` query argument (``None`` or empty: ns)."""
    if not precision:
        return 1
    try:
        return PRECISION_NS[precision]
    except KeyError:
        raise PrecisionError(
            f"invalid precision {precision!r}: use one of {', '.join(PRECISION_NS)}"
        ) from None


def parse_line_full(line: str) -> tuple[str, dict[str, str], dict[str, FieldValue], int | None]:
    """(measurement, tags, fields, timestamp or None) of one line, names and order as
    written; raises ``LineFormatError``."""
    parsed = _parse(line)
    # the C parser hands tags and fields back last first
    tags = dict(reversed(parsed["tags"].items()))
    fields = dict(reversed(parsed["fields"].items()))
    return parsed["measurement"], tags, fields, parsed["time"]


def _parse(line: str) -> dict:
    """``parse_line``, plus InfluxDB's reading of ``\\\\`` in names and tags as one
    backslash (the C parser keeps both; string field values it already unescapes)."""
    parsed = parse_line(line)
    if "\\\\" in line:
        parsed["measurement"] = _unescape(parsed["measurement"])
        parsed["tags"] = {_unescape(k): _unescape(v) for k, v in parsed["tags"].items()}
        parsed["fields"] = {_unescape(k): v for k, v in parsed["fields"].items()}
    return parsed


def _unescape(name: str) -> str:
    return name.replace("\\\\", "\\")


def parse_body(text: str, precision: str | None = "ns", now_ns: int | None = None) -> ParsedBody:
    """Parse a whole write body. Bad lines never raise: see ``ParsedBody.errors``."""
    factor = precision_factor(precision)
    if now_ns is None:
        now_ns = time.time_ns()
    server_time_ns = now_ns // factor * factor
    result = ParsedBody(server_time_ns=server_time_ns)
    errors, events, untimed = result.errors, result.events, result.untimed_lines
    # (measurement, tags as written, field names) -> (times, rows of values)
    pending: dict[tuple, tuple[list[int], list[tuple]]] = {}
    workload = Workload.NAME
    points = 0

    for line_number, line in enumerate(text.split("\n"), 1):
        if not line or line[0] == "#" or line.isspace():
            continue
        try:
            parsed = _parse(line)
        except LineFormatError as error:
            errors.append(LineError(line_number, f"{error} {_excerpt(line)}"))
            continue
        timestamp = parsed["time"]
        if timestamp is None:
            time_ns = server_time_ns
            untimed.append(line_number)
        else:
            time_ns = timestamp * factor
            if factor != 1 and not INT64_MIN <= time_ns <= INT64_MAX:
                errors.append(LineError(line_number, f"time out of range {_excerpt(line)}"))
                continue
        points += 1
        fields = parsed["fields"]
        measurement = parsed["measurement"]
        if measurement == workload:
            _, tags, typed, _ = parse_line_full(line)
            events.append(Point(measurement, tags, typed, time_ns))
            continue
        if '"' in line:  # it may hold string fields: they are not samples
            fields = {name: value for name, value in fields.items() if type(value) is not str}
            if not fields:
                continue
        key = (measurement, tuple(parsed["tags"].items()), tuple(fields))
        rows = pending.get(key)
        if rows is None:
            rows = pending[key] = ([], [])
        rows[0].append(time_ns)
        rows[1].append(tuple(fields.values()))

    result.points = points
    for (measurement, tags, names), (times, rows) in pending.items():
        times_ns, values = _sorted_unique(
            np.array(times, dtype=np.int64), np.array(rows, dtype=np.float64).T
        )
        group = SampleGroup(measurement, dict(tags), names, times_ns, np.ascontiguousarray(values))
        result.groups.append(group)
    return result


def parse_body_bytes(
    body: bytes, precision: str | None = "ns", now_ns: int | None = None
) -> ParsedBody:
    """``parse_body`` of raw UTF-8; a line that is not valid UTF-8 is a bad line."""
    try:
        return parse_body(body.decode("utf-8"), precision, now_ns)
    except UnicodeDecodeError:
        pass
    lines, bad = [], []
    for line_number, raw in enumerate(body.split(b"\n"), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append("")
            bad.append(LineError(line_number, "not valid UTF-8"))
    result = parse_body("\n".join(lines), precision, now_ns)
    result.errors = sorted(result.errors + bad, key=lambda error: error.line)
    return result


def _sorted_unique(times_ns: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort columns by time; of equal times the last one written wins."""
    if times_ns.size < 2 or bool(np.all(times_ns[1:] > times_ns[:-1])):
        return times_ns, values
    order = np.argsort(times_ns, kind="stable")
    times_ns, values = times_ns[order], values[:, order]
    last_of_run = np.append(times_ns[1:] != times_ns[:-1], True)
    return times_ns[last_of_run], values[:, last_of_run]


def _excerpt(line: str, limit: int = 60) -> str:
    return f"in {line if len(line) <= limit else line[:limit] + '...'!r}"
