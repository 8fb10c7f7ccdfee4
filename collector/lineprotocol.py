"""InfluxDB line protocol -> columns of samples, workload events and per-line errors.

A body is split on newlines; blank lines and ``#`` comments are skipped. Each line is parsed
by the ``line-protocol-parser`` package (C): escapes in measurement, tag and field names,
quoted strings with spaces, commas and equals signs, integer ``i`` and unsigned ``u``
suffixes with their range checks, booleans (``t``, ``T``, ``true``, ``True``, ``TRUE`` and
the ``f`` forms), optional timestamps.

* A valid line of any measurement but ``workload`` contributes its numeric fields (floats,
  integers, booleans as 1/0) to a :class:`SampleGroup`: every line of one tag set with the
  same field names, as one int64 time vector and one float64 row per field. Every number is
  a float64 sample, so a field written as an integer in one batch and as a float in the next
  is one series (as in Prometheus and VictoriaMetrics; InfluxDB would refuse the float).
  A string field is not a sample and is never dropped silently: the line gets a
  :class:`LineError` naming the field (so the write answers 400, as InfluxDB does for a field
  type conflict), and the line's numeric fields are stored all the same.
* A ``workload`` line is kept whole, typed fields and all, as a :class:`~contract.point.Point`
  event (``contract.schema.Workload``).
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
from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
from line_protocol_parser import LineFormatError, parse_line

from contract.identifiers import string_field_problem, tag_problem
from contract.point import FieldValue, Point
from contract.schema import Workload

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
UINT64_MAX = 2**64 - 1
# InfluxDB's time range: int64 less its two extremes (kept as markers)
MIN_TIME_NS = INT64_MIN + 2
MAX_TIME_NS = INT64_MAX - 1


class PrecisionError(ValueError):
    """An unknown ``precision`` query argument."""


@dataclass(frozen=True, slots=True)
class LineError:
    line: int  # 1-based line number in the body
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class SampleGroup:
    """Points of one tag set with the same numeric fields, as columns.

    Held as the bytes the store writes (and that cross between processes cheaply: pickling
    numpy arrays costs ~15x more); ``times_ns`` and ``values`` are read-only numpy views.
    """

    __slots__ = (
        "fields",
        "key",
        "max_ns",
        "measurement",
        "min_ns",
        "n",
        "tag_items",
        "times",
        "vals",
    )

    def __init__(
        self,
        measurement: str,
        tag_items: tuple[tuple[str, str], ...],
        fields: tuple[str, ...],
        times: bytes,
        vals: bytes,
        key: str | None = None,
    ) -> None:
        # What identifies the group's series in one string (hashed once, where a tuple of
        # names would hash every name): measurement and tags as written, then the field
        # names, separated by newlines (which no line can hold).
        self.key = key if key is not None else _group_key(measurement, tag_items, fields)
        self.measurement = measurement
        self.tag_items = tag_items  # every tag, host included, as written
        self.fields = fields
        self.times = times  # int64[n], ascending, unique
        self.vals = vals  # float64[n, len(fields)]: a row per point, as lines come; NaN: none
        self.n = len(times) // 8
        self.min_ns = int.from_bytes(times[:8], "little", signed=True)
        self.max_ns = int.from_bytes(times[-8:], "little", signed=True)

    def __reduce__(self) -> tuple:
        args = (self.measurement, self.tag_items, self.fields, self.times, self.vals, self.key)
        return (SampleGroup, args)

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.tag_items)

    @property
    def times_ns(self) -> np.ndarray:
        return np.frombuffer(self.times, dtype=np.int64)

    @property
    def values(self) -> np.ndarray:
        """float64[len(fields), n]: one row per field (a transposed view)."""
        return np.frombuffer(self.vals, dtype=np.float64).reshape(self.n, len(self.fields)).T

    @property
    def samples(self) -> int:
        return self.n * len(self.fields)

    def __repr__(self) -> str:
        return (
            f"SampleGroup({self.measurement!r}, {self.tags!r}, {self.fields!r}, "
            f"times_ns={self.times_ns.tolist()!r}, values={self.values.tolist()!r})"
        )


@dataclass(slots=True)
class ParsedBody:
    groups: list[SampleGroup] = field(default_factory=list)
    events: list[Point] = field(default_factory=list)  # workload lines, in body order
    errors: list[LineError] = field(default_factory=list)
    points: int = 0  # valid lines
    untimed_lines: list[int] = field(default_factory=list)  # 1-based; got server_time_ns
    server_time_ns: int = 0
    partly_stored: int = 0  # lines in ``errors`` whose numeric fields were stored all the same

    @property
    def samples(self) -> int:
        return sum(group.samples for group in self.groups)

    def __reduce__(self) -> tuple:
        # groups as plain tuples: pickles several times faster than objects (worker -> server)
        groups = [(g.measurement, g.tag_items, g.fields, g.times, g.vals) for g in self.groups]
        state = (
            self.events,
            self.errors,
            self.points,
            self.untimed_lines,
            self.server_time_ns,
            self.partly_stored,
        )
        return (_unpickle_parsed_body, (groups, state))


def _group_key(measurement: str, tag_items: tuple, fields: tuple[str, ...]) -> str:
    return "\n".join(("", repr((measurement, tag_items)), *fields))


def _unpickle_parsed_body(groups: list[tuple], state: tuple) -> ParsedBody:
    return ParsedBody([SampleGroup(*group) for group in groups], *state)


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
    if "\\\\" not in line:
        return parse_line(line)
    # The C parser takes any backslash before a separator as escaping it, so an escaped
    # backslash there ("comm=evil\\,host=n1", a process named evil\) failed the line
    # (issue 44, item 4). Each escaped backslash goes in as a character the line does not
    # hold and comes back out as one backslash, in names, tags and string fields.
    stand_in = _absent_character(line)
    parsed = parse_line(line.replace("\\\\", stand_in))
    _restore_backslashes(parsed, stand_in)
    return parsed


def _absent_character(line: str) -> str:
    return next(c for c in map(chr, range(0xE000, 0xF900)) if c not in line)


def _restore_backslashes(parsed: dict, stand_in: str) -> None:
    def restore(text: str) -> str:
        return text.replace(stand_in, "\\")

    parsed["measurement"] = restore(parsed["measurement"])
    parsed["tags"] = {restore(k): restore(v) for k, v in parsed["tags"].items()}
    parsed["fields"] = {
        restore(k): restore(v) if isinstance(v, str) else v for k, v in parsed["fields"].items()
    }


class _Rows:
    """One group while lines are parsed one by one."""

    __slots__ = ("indexes", "measurement", "names", "rows", "tag_items", "times")

    def __init__(self, measurement: str, tag_items: tuple, names: tuple[str, ...]) -> None:
        self.indexes: list[int] = []  # of the lines, in the body
        self.measurement = measurement
        self.tag_items = tag_items
        self.names = names
        self.times: list[int] = []
        self.rows: list[tuple] = []


def parse_body(text: str, precision: str | None = "ns", now_ns: int | None = None) -> ParsedBody:
    """Parse a whole write body. Bad lines never raise: see ``ParsedBody.errors``."""
    factor = precision_factor(precision)
    if now_ns is None:
        now_ns = time.time_ns()
    server_time_ns = now_ns // factor * factor
    result = ParsedBody(server_time_ns=server_time_ns)
    lines = text.split("\n")
    if len(_templates) > _TEMPLATE_LIMIT:
        _templates.clear()

    # The hot loop: file each line under the text before its field set, nothing more.
    by_prefix: dict[str, _Candidates] = {}
    general: list[int] = []  # 0-based indexes of lines for the general path
    skipped = 0
    for index, line in enumerate(lines):
        if not line or line[0] == "#" or line.isspace():
            skipped += 1
            continue
        parts = line.rsplit(" ", 2)
        if len(parts) == 3 and '"' not in line:
            candidates = by_prefix.get(parts[0])
            if candidates is None:
                candidates = by_prefix[parts[0]] = _Candidates()
            candidates.fields.append(parts[1])
            candidates.times.append(parts[2])
            candidates.indexes.append(index)
        else:
            general.append(index)

    # Prefixes whose lines have one field set and types (every host's disk lines, say) are
    # converted together: a few string operations per body, not per tag set.
    shapes: dict[tuple, list[tuple[str, _Candidates, _Template]]] = {}
    for prefix, candidates in by_prefix.items():
        template = _templates.get(prefix)
        if template is None:
            template = _make_template(prefix, candidates.fields[0], candidates.times[0])
            if template is None:
                general.extend(candidates.indexes)
                continue
            _templates[prefix] = template
        shapes.setdefault(template.shape, []).append((prefix, candidates, template))
    found: list[tuple[SampleGroup, list[int]]] = []  # each group with its line indexes
    for members in shapes.values():
        for (prefix, candidates, _), group in zip(
            members, _template_groups(members, factor), strict=True
        ):
            if group is None:
                # the template may be stale (fields came or went): the next body renews it
                _templates.pop(prefix, None)
                general.extend(candidates.indexes)
            else:
                found.append((group, candidates.indexes))
    if general:
        general.sort()
        found.extend(_parse_general(lines, general, factor, server_time_ns, result))
    found = _refuse_bad_tags(found, lines, result)
    result.groups = _resolve_overlaps(found, lines, factor, server_time_ns)
    result.points = len(lines) - skipped - len(result.errors) + result.partly_stored
    return result


def _refuse_bad_tags(
    found: list[tuple[SampleGroup, list[int]]], lines: list[str], result: ParsedBody
) -> list[tuple[SampleGroup, list[int]]]:
    """The groups whose tags may be stored; every line of the others is an error (checked
    once per tag set, not per line)."""
    kept = []
    for group, indexes in found:
        problem = tag_problem(group.tag_items)
        if problem is None:
            kept.append((group, indexes))
            continue
        result.errors.extend(
            LineError(index + 1, f"{problem} {_excerpt(lines[index])}") for index in indexes
        )
    if len(kept) < len(found):
        result.errors.sort(key=lambda error: error.line)
    return kept


def _string_fields_message(names: list[str], numbers_stored: bool) -> str:
    quoted = ", ".join(f'"{name}"' for name in names)
    what = f"field {quoted} is a string" if len(names) == 1 else f"fields {quoted} are strings"
    kept = "; the line's numeric fields were stored" if numbers_stored else ""
    return f"{what}, not stored (samples are numbers: send text as a tag, or leave it out{kept})"


class _Candidates:
    """Lines after one prefix, split but not parsed."""

    __slots__ = ("fields", "indexes", "times")

    def __init__(self) -> None:
        self.fields: list[str] = []
        self.times: list[str] = []
        self.indexes: list[int] = []


@dataclass(slots=True)
class _Template:
    """What the lines after one prefix look like: checked against its first line's parse."""

    measurement: str
    tag_items: tuple[tuple[str, str], ...]
    names: list[str]  # raw field names, in line order
    int_columns: list[int]  # positions of i values
    uint_columns: list[int]  # positions of u values

    @property
    def shape(self) -> tuple:
        """Templates of one shape read the same text the same way, whatever the tags."""
        return (tuple(self.names), tuple(self.int_columns), tuple(self.uint_columns))


_templates: dict[str, _Template] = {}  # prefix text -> template, shared by every body
_TEMPLATE_LIMIT = 100_000
_NOT_NUMERIC = str.maketrans("", "", "0123456789.-+eE")
_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)
_NOT_INTEGER = str.maketrans("", "", "0123456789-")
_NOT_UNSIGNED = str.maketrans("", "", "0123456789")


def _make_template(prefix: str, raw_fields: str, raw_time: str) -> _Template | None:
    """The template of a prefix from one of its lines, if the template path can take it:
    a valid line, not a workload event, numbers only, names without escapes."""
    if "\\" in raw_fields or prefix.endswith("\\"):
        # a prefix ending in a backslash was cut at an escaped space ("a\\ b=1"): the
        # field set starts earlier than the split says
        return None
    try:
        parsed = parse_line(f"{prefix} {raw_fields} {raw_time}")
    except LineFormatError:
        return None
    if parsed["measurement"] == Workload.NAME or "\\\\" in prefix:
        return None
    names, int_columns, uint_columns = [], [], []
    fields = parsed["fields"]
    for column, pair in enumerate(raw_fields.split(",")):
        name, _, raw_value = pair.partition("=")
        value = fields.get(name)
        if type(value) is float:
            pass
        elif type(value) is int:
            (uint_columns if raw_value.endswith("u") else int_columns).append(column)
        else:  # a boolean (or a name the parser read differently)
            return None
        names.append(name)
    if len(names) != len(fields):  # a name given twice
        return None
    tag_items = tuple(sorted(parsed["tags"].items()))
    return _Template(parsed["measurement"], tag_items, names, int_columns, uint_columns)


def _template_groups(
    members: list[tuple[str, _Candidates, _Template]], factor: int
) -> list[SampleGroup | None]:
    """The lines of prefixes sharing one template shape, as one group per prefix: all
    converted at once, or, when some line strays, prefix by prefix (None for a prefix with
    a stray line: its lines then take the general path, which accepts or rejects each
    line exactly)."""
    template = members[0][2]
    k = len(template.names)
    converted = None
    if len(members) > 1:
        converted = _template_columns(
            template,
            list(chain.from_iterable(c.fields for _, c, _ in members)),
            list(chain.from_iterable(c.times for _, c, _ in members)),
            factor,
        )
    groups: list[SampleGroup | None] = []
    offset = 0
    for prefix, candidates, member_template in members:
        n = len(candidates.times)
        if converted is not None:
            times = converted[0][offset : offset + n]
            numbers = converted[1][offset * k : (offset + n) * k]
            offset += n
        else:
            alone = _template_columns(member_template, candidates.fields, candidates.times, factor)
            if alone is None:
                groups.append(None)
                continue
            times, numbers = alone
        if n > 1 and (times != sorted(times) or len(set(times)) != n):
            times_bytes, vals_bytes = _sorted_unique(
                np.array(times, dtype=np.int64), numbers.reshape(n, k)
            )
        else:
            times_bytes, vals_bytes = array("q", times).tobytes(), numbers.tobytes()
        names = tuple(member_template.names)
        groups.append(
            SampleGroup(
                member_template.measurement,
                member_template.tag_items,
                names,
                times_bytes,
                vals_bytes,
                "\n".join((prefix, *names)),
            )
        )
    return groups


def _template_columns(
    template: _Template, raw_fields: list[str], raw_times: list[str], factor: int
) -> tuple[list[int], np.ndarray] | None:
    """Times (ns) and values (a row per line, flat) of field sets that all match
    ``template``, else None."""
    n, k = len(raw_times), len(template.names)
    # timestamps: ASCII digits within int64 (a sign, a space or "1_0" is not for us)
    joined_times = "".join(raw_times)
    if not (joined_times.isdigit() and joined_times.isascii()) or "" in raw_times:
        return None  # "" is a line ending in a space: no time, for the general path
    longest = max(map(len, raw_times))
    if longest >= 19 and max(map(int, raw_times)) > MAX_TIME_NS:
        return None
    times = list(map(int, raw_times))
    if factor != 1:
        if max(times) > MAX_TIME_NS // factor:
            return None
        times = [t * factor for t in times]
    # fields: split names from values in one go
    joined = ",".join(raw_fields)
    if "\\" in joined:
        return None
    parts = joined.replace(",", "=").split("=")
    if len(parts) != 2 * n * k or parts[0::2] != template.names * n:
        return None
    values = parts[1::2]
    # Strip the type suffix column by column: only an integer column's values may end in
    # "i" (a float column's "1e3i" is a bad line, for the general path to name).
    for columns, suffix, not_allowed in (
        (template.int_columns, "i,", _NOT_INTEGER),  # 1.5i, 1e3i, +1i are not integers
        (template.uint_columns, "u,", _NOT_UNSIGNED),
    ):
        for column in columns:
            text = ",".join(values[column::k]) + ","
            if text.count(suffix) != n:
                return None
            stripped = text.replace(suffix, ",")[:-1]
            if stripped.replace(",", "").translate(not_allowed):
                return None
            values[column::k] = stripped.split(",")
    digits = "".join(values)
    if digits.translate(_NOT_NUMERIC):  # nan, inf, 1_0, t, a float column's 5i ...
        return None
    if "+" in digits and digits.count("+") != digits.count("e+") + digits.count("E+"):
        return None
    longest = max(map(len, values))
    if longest >= 19 and not _integers_in_range(template, values):
        return None
    try:
        numbers = np.array(list(map(float, values)), dtype=np.float64)
    except ValueError:  # "1-2", "", "."
        return None
    if ("e" in digits or "E" in digits or longest > 300) and not _in_float_range(numbers, values):
        return None
    return times, numbers


def _in_float_range(numbers: np.ndarray, values: list[str]) -> bool:
    """What strtod takes without ERANGE, as the C parser does: no overflow (1e999), no
    subnormal (1e-320), no underflow to zero (1e-400; 0e-400 is fine)."""
    magnitudes = np.abs(numbers)
    if not np.isfinite(numbers).all():
        return False
    if ((magnitudes < _SMALLEST_NORMAL) & (magnitudes > 0)).any():
        return False
    for index in np.flatnonzero(numbers == 0).tolist():
        mantissa = values[index].lower().partition("e")[0]
        if mantissa.strip("-+.0"):  # non-zero digits that came out as zero
            return False
    return True


def _integers_in_range(template: _Template, values: list[str]) -> bool:
    k = len(template.names)
    for columns, low, high in (
        (template.int_columns, INT64_MIN, INT64_MAX),
        (template.uint_columns, 0, UINT64_MAX),
    ):
        for column in columns:
            try:
                numbers = list(map(int, values[column::k]))
            except ValueError:  # "1-2", "-": for the general path to name (was a 500)
                return False
            if min(numbers) < low or max(numbers) > high:
                return False
    return True


def _sorted_unique(times_ns: np.ndarray, rows: np.ndarray) -> tuple[bytes, bytes]:
    """Sort rows (points) by time; of equal times the last one written wins."""
    order = np.argsort(times_ns, kind="stable")
    times_ns, rows = times_ns[order], rows[order]
    last_of_run = np.append(times_ns[1:] != times_ns[:-1], True)
    return times_ns[last_of_run].tobytes(), rows[last_of_run].tobytes()


def _parse_general(
    lines: list[str], indexes: list[int], factor: int, server_time_ns: int, result: ParsedBody
) -> list[tuple[SampleGroup, list[int]]]:
    """Parse each of these lines on its own (events, strings, escapes, odd lines, errors).
    Events and errors go to ``result``; sample groups, with their line indexes, are
    returned."""
    errors, events, untimed = result.errors, result.events, result.untimed_lines
    groups: dict[tuple, _Rows] = {}  # (measurement, tags, field names) -> rows
    workload = Workload.NAME
    for index in indexes:
        line = lines[index]
        line_number = index + 1
        try:
            parsed = _parse(line)
        except LineFormatError as error:
            errors.append(LineError(line_number, f"{error} {_excerpt(line)}"))
            continue
        time_ns = parsed["time"]
        if time_ns is None:
            time_ns = server_time_ns
            untimed.append(line_number)
        elif factor != 1:
            time_ns *= factor
            if not MIN_TIME_NS <= time_ns <= MAX_TIME_NS:
                errors.append(LineError(line_number, f"time out of range {_excerpt(line)}"))
                continue
        fields = parsed["fields"]
        if parsed["measurement"] == workload:
            _, tags, typed, _ = parse_line_full(line)
            problem = tag_problem(tags.items()) or string_field_problem(typed)
            if problem:
                errors.append(LineError(line_number, f"{problem} {_excerpt(line)}"))
                continue
            events.append(Point(workload, tags, typed, time_ns))
            continue
        if '"' in line:  # it may hold string fields: not samples, and refused by name
            strings = [name for name, value in fields.items() if type(value) is str]
            if strings:
                fields = {name: value for name, value in fields.items() if type(value) is not str}
                message = _string_fields_message(strings, bool(fields))
                errors.append(LineError(line_number, f"{message} {_excerpt(line)}"))
                if not fields:
                    continue
                result.partly_stored += 1
        tag_items = tuple(sorted(parsed["tags"].items()))
        names = tuple(fields)
        key = (parsed["measurement"], tag_items, names)
        rows = groups.get(key)
        if rows is None:
            rows = groups[key] = _Rows(parsed["measurement"], tag_items, names)
        rows.times.append(time_ns)
        rows.rows.append(tuple(fields.values()))
        rows.indexes.append(index)
    errors.sort(key=lambda error: error.line)
    found = []
    for rows in groups.values():
        times_bytes, vals_bytes = _columns(rows.times, rows.rows)
        group = SampleGroup(rows.measurement, rows.tag_items, rows.names, times_bytes, vals_bytes)
        found.append((group, rows.indexes))
    return found


def _resolve_overlaps(
    found: list[tuple[SampleGroup, list[int]]], lines: list[str], factor: int, server_time_ns: int
) -> list[SampleGroup]:
    """The groups, except that the groups of a tag set that share a timestamp (two field
    sets, two spellings of the tags, or both paths) become one group built line by line,
    so that of two values for one series and time the later line's wins."""
    by_tagset: dict[tuple, list[tuple[SampleGroup, list[int]]]] = {}
    for group, indexes in found:
        by_tagset.setdefault((group.measurement, group.tag_items), []).append((group, indexes))
    groups = []
    for (measurement, tag_items), members in by_tagset.items():
        if len(members) > 1:
            times = np.concatenate([group.times_ns for group, _ in members])
            if np.unique(times).size < times.size:
                indexes = sorted(chain.from_iterable(indexes for _, indexes in members))
                groups.append(
                    _group_line_by_line(
                        measurement, tag_items, lines, indexes, factor, server_time_ns
                    )
                )
                continue
        groups.extend(group for group, _ in members)
    return groups


def _group_line_by_line(
    measurement: str,
    tag_items: tuple,
    lines: list[str],
    indexes: list[int],
    factor: int,
    server_time_ns: int,
) -> SampleGroup:
    """One group from valid lines of one tag set, later lines overwriting earlier ones; a
    field a line lacks is NaN (no value) at that line's time."""
    series: dict[str, dict[int, float]] = {}
    for index in indexes:
        parsed = _parse(lines[index])
        time_ns = parsed["time"]
        time_ns = server_time_ns if time_ns is None else time_ns * factor
        for name, value in reversed(parsed["fields"].items()):
            if type(value) is not str:
                series.setdefault(name, {})[time_ns] = float(value)
    times = sorted(set(chain.from_iterable(series.values())))
    column_of = {time_ns: column for column, time_ns in enumerate(times)}
    vals = np.full((len(times), len(series)), np.nan)
    for column, points in enumerate(series.values()):
        vals[[column_of[t] for t in points], column] = list(points.values())
    times_bytes = np.array(times, dtype=np.int64).tobytes()
    return SampleGroup(measurement, tag_items, tuple(series), times_bytes, vals.tobytes())


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


def _columns(times: list[int], rows: list[tuple]) -> tuple[bytes, bytes]:
    """Times and values (a row per point) as bytes, sorted by time (last write wins)."""
    if len(times) > 1 and (times != sorted(times) or len(set(times)) != len(times)):
        return _sorted_unique(np.array(times, dtype=np.int64), np.array(rows, dtype=np.float64))
    return array("q", times).tobytes(), array("d", chain.from_iterable(rows)).tobytes()


def _excerpt(line: str, limit: int = 60) -> str:
    return f"in {line if len(line) <= limit else line[:limit] + '...'!r}"
