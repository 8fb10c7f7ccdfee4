"""How numbers are written, in one place: every table, sentence and chart label of
epochscope formats a value through one of these. Missing data is ``MISSING`` ("–"), never 0.
JSON keeps the values themselves."""

from __future__ import annotations

import math

MISSING = "–"
FRACTION_DIGITS = 1  # a fraction's percent: one decimal in every view
POINTS_DIGITS = 2  # a difference of two fractions, in percentage points
_BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def no_negative_zero(text: str) -> str:
    """ "-0.0" (a tiny negative rounded away) reads as a sign that is not there."""
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def byte_unit(value: float) -> tuple[str, float]:
    """The largest SI unit that keeps ``value`` bytes >= 1, and its size: (MB, 1e6)."""
    return next(((u, size) for u, size in _BYTE_UNITS if abs(value) >= size), ("B", 1.0))


def human_bytes(value: float, digits: int = 1) -> str:
    """Bytes in the largest SI unit that keeps them >= 1 (MB = 10^6 bytes): 45.0 MB, 4.1 kB."""
    unit, size = byte_unit(value)
    if size == 1.0:
        return f"{value:,.0f} B"
    return f"{value / size:,.{digits}f} {unit}"


def format_number(value: float | None, digits: int = 1) -> str:
    """A number to ``digits`` decimals with thousands separators; ``MISSING`` when absent."""
    return MISSING if missing(value) else f"{value:,.{digits}f}"


def format_significant(value: float | int | bool) -> str:
    """A measured value in a sentence: integers whole, large numbers without decimals,
    small ones to three significant digits (0.0123), others to two decimals, zeros dropped."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}".rstrip("0").rstrip(".")


def format_fraction(value: float) -> str:
    """A fraction of a whole (top-1, a share of the step, a lost fraction: 0..1) as every
    view writes it, in percent to ``FRACTION_DIGITS`` decimals, a trailing zero dropped
    (d3's ``.1~%``, the dashboard's tables): 0.7491 -> "74.9%", 0.1 -> "10%"."""
    text = no_negative_zero(f"{100 * value:,.{FRACTION_DIGITS}f}")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text + "%"


def format_points(value: float) -> str:
    """A difference of two fractions in percentage points: -0.0123 -> "-1.23 points"."""
    return no_negative_zero(f"{100 * value:+,.{POINTS_DIGITS}f}") + " points"


def whole_percent(fraction: float) -> int:
    """Half-up rounding to a whole percent, as the studies print (96.85% -> 97%)."""
    return math.floor(fraction * 100.0 + 0.5)


def format_efficiency(percent: float | None) -> str:
    """How tables and sentences print ``efficiency_percent``: whole, half up (``97%``)."""
    return MISSING if percent is None else f"{whole_percent(percent / 100.0)}%"


def format_clock_duration(seconds: float | None) -> str:
    """A duration as a clock reads it, ``H:MM:SS`` (tables of times to a target)."""
    if seconds is None:
        return MISSING
    hours, rest = divmod(round(float(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def format_short_duration(seconds: float) -> str:
    """A duration in the fewest words: ``2h 05m``, ``3m 07s``, ``41s`` (the dashboard's runs)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
