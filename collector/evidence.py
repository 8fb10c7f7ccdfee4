"""A finding's evidence as labelled values with units, for people (CLI and dashboard).

The rules return evidence as plain keys and values (``collector.findings``), named the
way the report's columns are: the unit is the key's suffix (``_bytes``, ``_mbps``,
``_percent``, ``_seconds``, ``_ratio``, ``images_per_second``). This module words them
once: ``evidence_lines`` turns ``{"first_epoch_storage_read_bytes": 64e6,
"gpu_util_percent": None}`` into ``[("first epoch storage read", "64.0 MB")]``. What was
not measured (None, NaN, or a group of only such values) is left out, never shown as
"None". The JSON output keeps the raw evidence at full precision.
"""

from __future__ import annotations

import math
from typing import Any

from collector.columns import human_bytes

_BYTES_PER_IMAGE = "_bytes_per_image"


def _number(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _unit_of(key: str) -> tuple[str, str]:
    """The label and unit kind of ``key``."""
    for suffix, unit in (
        (_BYTES_PER_IMAGE, "bytes/image"),
        ("_bytes_per_host", "bytes/host"),
        ("_bytes_mean", "bytes"),
        ("_bytes", "bytes"),
        ("_mbps_per_node", "MB/s per node"),
        ("_mbps", "MB/s"),
        ("_percent", "%"),
        ("_seconds", "s"),
        ("_ratio", "ratio"),
    ):
        if key.endswith(suffix):
            rate = "_rate" if suffix.startswith("_mbps") else ""  # beside its bytes
            return key[: -len(suffix)] + rate, unit
    if key in ("images_per_second", "ideal"):
        return key.removesuffix("_per_second"), "images/s"
    if key == "bytes":
        return "size", "bytes"
    return key, ""


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, dict):
        return all(_missing(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_missing(v) for v in value)
    return False


def format_value(value: Any, unit: str) -> str:
    """One value in its unit: 64000000 bytes -> "64.0 MB", 97.08 % -> "97.1 %"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if unit == "bytes":
        return human_bytes(value)
    if unit in ("bytes/image", "bytes/host"):
        return f"{human_bytes(value)}/{unit.split('/')[1]}"
    if unit == "ratio":
        return _number(float(value), 3)
    if unit == "":
        return _number(value, 3) if isinstance(value, float) else _number(value)
    return f"{_number(value)} {unit}"


def _label(key: str) -> str:
    return key.replace("_", " ").strip()


def _inline(value: Any, unit: str) -> str:
    """A dict or list of values on one line, missing values left out."""
    if isinstance(value, dict) and "resource" in value:  # a resource that changed
        name, item_unit = _unit_of(str(value["resource"]))
        before, after = value.get("reference"), value.get("run")
        change = f"{format_value(before, item_unit)} -> {format_value(after, item_unit)}"
        text = f"{_label(name)} {change}"
        return text + (f" ({value['ratio']:.2f}x)" if value.get("ratio") else "")
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            if _missing(item):
                continue
            name, item_unit = _unit_of(str(key))
            shown = _inline(item, item_unit or unit)
            parts.append(f"{_label(name) if item_unit else _label(str(key))}: {shown}")
        return ", ".join(parts)
    if isinstance(value, list | tuple):
        return ", ".join(_inline(item, unit) for item in value if not _missing(item))
    return format_value(value, unit)


def evidence_lines(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value with unit) for each measured piece of evidence, in the rule's order.
    A ``..._by_epoch`` mapping lists its epochs; a nested group of values (a run's
    resources) is one line of its measured members."""
    lines: list[tuple[str, str]] = []
    for key, value in evidence.items():
        if _missing(value):
            continue
        if key.endswith("_by_epoch") and isinstance(value, dict):
            name, unit = _unit_of(key.removesuffix("_by_epoch"))
            shown = ", ".join(
                f"{epoch}: {format_value(v, unit)}" for epoch, v in value.items() if not _missing(v)
            )
            lines.append((f"{_label(name)} by epoch", shown))
            continue
        name, unit = _unit_of(key)
        lines.append((_label(name), _inline(value, unit)))
    return lines
