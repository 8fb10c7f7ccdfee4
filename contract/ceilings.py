"""The values a measured ceiling can physically take, one rule for the agent that keeps
the ceilings file (``agent/ceilings.py``) and the collector that reads them
(``collector/analysis/epochs.py``): a value outside, or not finite, is a damaged or forged
file, not a measurement (issue 44, item 7: 1e-300 made "inf% of the ceiling").

The most each ceiling can be: 1 TB/s for any bytes/s (above a PCIe 6.0 x16 link's 128 GB/s,
an 800 Gb/s port's 100 GB/s and any disk), 100,000 JPEG decodes a second on one core (a fast
core does about 200 at 224 px); the least, 1 (a byte or a picture a second).
"""

from __future__ import annotations

import math

from contract.schema import Ceiling

MIN_CEILING = 1.0
MAX_BYTES_PER_SECOND = 1e12
MAX_CEILING = {
    name: (100_000.0 if name == str(Ceiling.JPEG_DECODE) else MAX_BYTES_PER_SECOND)
    for name in Ceiling.fields()
    if name != str(Ceiling.MEASURED_AT)
}


def ceiling_problem(field: str, value: object, measured_at: object) -> str | None:
    """Why this ceiling cannot be used, or None when it can."""
    bound = MAX_CEILING.get(field)
    if bound is None:
        return f"unknown field {field!r}"
    for name, number in (("value", value), ("measured_at", measured_at)):
        if isinstance(number, bool) or not isinstance(number, int | float):
            return f"{name} {number!r} is not a number"
        if not math.isfinite(number):
            return f"{name} {number!r} is not finite"
    if not MIN_CEILING <= value <= bound:  # type: ignore[operator]
        return f"value {value!r} is not within [{MIN_CEILING:g}, {bound:g}]"
    return None
