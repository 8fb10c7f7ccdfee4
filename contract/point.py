"""A sample point and its InfluxDB line-protocol and JSON forms.

This is the one line-protocol writer of the project: the agent and the workloads both
encode through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contract.text import visible

FieldValue = int | float | str | bool


@dataclass(slots=True)
class Point:
    measurement: str
    tags: dict[str, str] = field(default_factory=dict)
    fields: dict[str, FieldValue] = field(default_factory=dict)
    time_ns: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "measurement": self.measurement,
            "tags": dict(self.tags),
            "fields": dict(self.fields),
            "time": self.time_ns,
        }

    def to_line(self) -> str:
        return encode_line(self)


# Names and tags are written as contract.text.visible shows them (control and bidirectional
# formatting characters as escapes: the collector refuses them raw, and line protocol cannot
# carry a line break); string fields keep their text but for line breaks and NUL, which are
# written as their escapes too. Backslashes are doubled everywhere, so a process named
# ``evil\`` no longer escapes the separator after it (issue 44, item 4).
_LINE_BREAKS = {"\n": r"\x0a", "\r": r"\x0d", "\0": r"\x00"}
_MEASUREMENT_ESCAPES = str.maketrans({"\\": "\\\\", ",": r"\,", " ": r"\ "})
_KEY_ESCAPES = str.maketrans({"\\": "\\\\", ",": r"\,", "=": r"\=", " ": r"\ "})
_STRING_ESCAPES = str.maketrans({'"': r"\"", "\\": "\\\\", **_LINE_BREAKS})
_LINE_SAFE = str.maketrans(_LINE_BREAKS)


def name_as_read(text: str) -> str:
    """What a measurement, tag key or tag value reads back as from its line."""
    return visible(text)


def string_as_read(text: str) -> str:
    """What a string field reads back as from its line."""
    return text.translate(_LINE_SAFE)


def _encode_value(value: FieldValue) -> str | None:
    kind = type(value)
    if kind is float:
        if value - value != 0.0:  # NaN or +-Inf: line protocol has neither
            return None
        return repr(value)
    if kind is int:
        return f"{value}i"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{int(value)}i"
    if isinstance(value, float):
        return None if not math.isfinite(value) else repr(float(value))
    return '"' + str(value).translate(_STRING_ESCAPES) + '"'


# The escaped "measurement,tag=value,..." of every series and the escaped "field=" of
# every field name, computed once: the agent writes the same series every tick.
# Emptied when full (series that come and go by the thousand), never grown unbounded.
_MAX_CACHED = 10_000
_series_prefixes: dict[tuple, str] = {}
_field_prefixes: dict[str, str] = {}


def _series_prefix(point: Point) -> str:
    key = (point.measurement, *point.tags.items())
    prefix = _series_prefixes.get(key)
    if prefix is None:
        parts = [visible(point.measurement).translate(_MEASUREMENT_ESCAPES)]
        for name in sorted(point.tags):
            value = point.tags[name]
            if value != "":
                escaped_name = visible(name).translate(_KEY_ESCAPES)
                parts.append(f"{escaped_name}={visible(str(value)).translate(_KEY_ESCAPES)}")
        prefix = ",".join(parts)
        if len(_series_prefixes) >= _MAX_CACHED:
            _series_prefixes.clear()
        _series_prefixes[key] = prefix
    return prefix


def _field_prefix(name: str) -> str:
    prefix = _field_prefixes.get(name)
    if prefix is None:
        prefix = visible(name).translate(_KEY_ESCAPES) + "="
        if len(_field_prefixes) >= _MAX_CACHED:
            _field_prefixes.clear()
        _field_prefixes[name] = prefix
    return prefix


def encode_line(point: Point) -> str:
    """One line of InfluxDB line protocol, nanosecond precision, without newline.

    Empty tag values are left out (InfluxDB does the same) and non-finite floats are
    dropped; a point left with no field encodes as the empty string.
    """
    encoded_fields = []
    for key, value in point.fields.items():
        kind = type(value)
        if kind is int:
            encoded: str | None = f"{value}i"
        elif kind is float and value - value == 0.0:
            encoded = repr(value)
        else:
            encoded = _encode_value(value)
            if encoded is None:
                continue
        prefix = _field_prefixes.get(key) or _field_prefix(key)
        encoded_fields.append(prefix + encoded)
    if not encoded_fields:
        return ""
    return f"{_series_prefix(point)} {','.join(encoded_fields)} {point.time_ns}"


def encode_lines(points: Iterable[Point]) -> str:
    """Newline-separated line protocol for many points (no trailing newline)."""
    return "\n".join(line for line in map(encode_line, points) if line)
