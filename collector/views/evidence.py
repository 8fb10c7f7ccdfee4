"""A finding's evidence as labelled values with units, for people (the dashboard's cards and
the CLI); the JSON keeps the raw evidence at full precision.

The unit of a value is read from its key's suffix, the convention every rule follows
(``_bytes``, ``_mbps``, ``_percent``, ``_ratio``, ``_seconds``, ``images_per_second``, and
per step or per rank: ``_seconds_per_step``, ``_bytes_per_step``,
``images_per_second_per_rank``; ``_share``, a fraction, is shown in percent); a mapping
keyed ``<unit key>_by_<what>`` (e.g. ``storage_read_bytes_by_epoch``,
``extra_seconds_by_part``) shows each of its values in the unit of ``<unit key>``.
Fractions (``_share``, ``_share_of_peak``, ``_fraction``, ``relative_difference``, top-1)
are written in percent as every view writes them (``contract.columns.format_fraction``), a
difference of two top-1s (``top1_loss``, ``top1_difference``) in percentage points;
``_percent`` values with a %. A value that was not measured (``None``, an empty list or
mapping) is left out rather than shown as ``None`` or 0.
"""

from __future__ import annotations

import math
from typing import Any

from contract.columns import human_bytes
from contract.units import format_fraction, format_points, format_significant

# key suffix -> (what replaces it in the label, the unit written after the value); bytes
# are written as kB/MB/GB
BYTES = "bytes"
_SUFFIXES = (
    ("_bytes_per_image", " per image", " B"),
    ("_bytes_per_step", " per step", BYTES),
    ("_seconds_per_step", " time per step", " s"),
    ("_bytes_per_host", " per host", BYTES),
    ("_bytes_mean", " (mean)", BYTES),
    ("_bytes", "", BYTES),
    ("_mbps_per_node", " rate per node", " MB/s"),
    ("_mbps", " rate", " MB/s"),
    ("_percent_mean", " (mean)", "%"),
    ("_percent", "", "%"),
    ("_seconds", "", " s"),
    ("_ratio", "", ""),
)
IMAGES_PER_SECOND = "images_per_second"
IMAGES_PER_SECOND_PER_RANK = "images_per_second_per_rank"
BY = "_by_"  # <unit key>_by_<what>: a mapping whose values are in <unit key>'s unit
# a fraction, shown in percent: of a whole, of a peak (``storage_share_of_peak``), or a
# relative difference (|a - b| / b)
FRACTIONS = (
    "_share",
    "_share_of_peak",
    "_fraction",
    "_fraction_per_rank",
    "relative_difference",
    "top1",
)
POINTS = ("top1_loss", "top1_difference")  # a difference of two fractions: points


def _suffix(key: str) -> tuple[str, str, str] | None:
    return next((entry for entry in _SUFFIXES if key.endswith(entry[0])), None)


def _measured(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return not (isinstance(value, dict | list | tuple) and not value)


def label_of(key: str) -> str:
    """``first_epoch_storage_read_mbps`` -> ``first epoch storage read rate``;
    ``storage_read_bytes_by_epoch`` -> ``storage read by epoch``."""
    text = str(key)
    if BY in text:
        unit_key, _, what = text.rpartition(BY)
        return f"{label_of(unit_key)} by {what.replace('_', ' ')}"
    found = _suffix(text)
    if found is not None and not text.endswith(IMAGES_PER_SECOND):
        text = text[: -len(found[0])] + found[1]
    return text.replace("_", " ").strip()


def value_text(key: str, value: Any) -> str:
    """A value with its unit, by its key's suffix; mappings and lists item by item (the
    items of a ``<unit key>_by_<what>`` mapping in ``<unit key>``'s unit)."""
    if isinstance(value, dict):
        unit_key = str(key).rpartition(BY)[0] if BY in str(key) else None
        return "; ".join(
            f"{label_of(str(k))}: {value_text(unit_key or str(k), v)}"
            for k, v in value.items()
            if _measured(v)
        )
    if isinstance(value, list | tuple):
        return ", ".join(value_text(key, v) for v in value if _measured(v))
    if isinstance(value, str) or not isinstance(value, int | float):
        return str(value)
    key = str(key)
    if key.endswith(IMAGES_PER_SECOND):
        return f"{format_significant(value)} images/s"
    if key.endswith(IMAGES_PER_SECOND_PER_RANK):
        return f"{format_significant(value)} images/s per rank"
    if key.endswith(POINTS):
        return format_points(value)
    if key.endswith(FRACTIONS):
        return format_fraction(value)
    found = _suffix(key)
    if found is None:
        return format_significant(value)
    unit = found[2]
    return human_bytes(value) if unit == BYTES else f"{format_significant(value)}{unit}"


def evidence_items(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value with unit) for every measured item of a finding's evidence."""
    return [
        (label_of(key), value_text(key, value))
        for key, value in evidence.items()
        if _measured(value)
    ]


# (label, value with unit) or (label, its items): a mapping or a list of mappings nested
EvidenceEntry = tuple[str, "str | list[EvidenceEntry]"]


def evidence_tree(evidence: dict[str, Any]) -> list[EvidenceEntry]:
    """``evidence_items`` with each mapping (the scaling loss's ``attribution``, a
    ``<unit key>_by_<what>`` mapping) and each list of mappings given as items of its own
    rather than as one line of ``key: value;`` pairs: for a labelled list."""
    return [
        (label_of(key), _entry(str(key), value))
        for key, value in evidence.items()
        if _measured(value)
    ]


def _entry(key: str, value: Any) -> str | list[EvidenceEntry]:
    if isinstance(value, dict):
        unit_key = key.rpartition(BY)[0] if BY in key else None
        return [
            (label_of(str(k)), _entry(unit_key or str(k), v))
            for k, v in value.items()
            if _measured(v)
        ]
    if isinstance(value, list | tuple) and any(isinstance(v, dict) for v in value):
        return [
            (_item_label(item, index), _entry("", item))
            for index, item in enumerate(value, 1)
            if _measured(item)
        ]
    return value_text(key, value)


def _item_label(item: Any, index: int) -> str:
    """A list item's label: its first text value (a part, a resource), else its number."""
    if isinstance(item, dict):
        text = next((v for v in item.values() if isinstance(v, str)), None)
        if text is not None:
            return text.replace("_", " ")
    return str(index)
