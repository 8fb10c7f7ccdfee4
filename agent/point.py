"""A sample point and its InfluxDB line-protocol and JSON forms.

This is the one line-protocol writer of the project: the agent and the workloads both
encode through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\n"})
_KEY_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\n"})
_STRING_ESCAPES = str.maketrans({'"': r"\"", "\\": "\\\\", "\n": r"\n"})


def _encode_value(value: FieldValue) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None  # line protocol has no NaN or Inf
        return repr(value)
    return '"' + str(value).translate(_STRING_ESCAPES) + '"'


def encode_line(point: Point) -> str:
    """One line of InfluxDB line protocol, nanosecond precision, without newline.

    Empty tag values are left out (InfluxDB does the same) and non-finite floats are
    dropped; a point left with no field encodes as the empty string.
    """
    parts = [point.measurement.translate(_MEASUREMENT_ESCAPES)]
    for key in sorted(point.tags):
        value = point.tags[key]
        if value != "":
            parts.append(f"{key.translate(_KEY_ESCAPES)}={str(value).translate(_KEY_ESCAPES)}")
    encoded_fields = []
    for key, value in point.fields.items():
        encoded = _encode_value(value)
        if encoded is not None:
            encoded_fields.append(f"{key.translate(_KEY_ESCAPES)}={encoded}")
    if not encoded_fields:
        return ""
    return f"{','.join(parts)} {','.join(encoded_fields)} {point.time_ns}"


def encode_lines(points: Iterable[Point]) -> str:
    """Newline-separated line protocol for many points (no trailing newline)."""
    return "\n".join(line for line in map(encode_line, points) if line)
