"""One side of ``jobs_before_after.py``: the jobs sampler of the tree it is run from.

Run with that tree first on ``sys.path`` (``PYTHONPATH``). Reads one command a line on
stdin: ``tick`` samples once (``sample()`` and the line-protocol encoding, timed with
``time.thread_time``) and answers one JSON line ``{"cpu": seconds, "shape": [...]}``
(``shape`` only when asked, ``tick shape``); ``quit`` ends it.
"""

from __future__ import annotations

import json
import sys
import time

from agent.samplers.base import Roots
from agent.samplers.jobs import JobsSampler
from contract.point import encode_lines


def main() -> int:
    sampler = JobsSampler(Roots())
    for command in sys.stdin:
        words = command.split()
        if not words or words[0] == "quit":
            return 0
        started = time.thread_time()
        points = sampler.sample(time.time_ns())
        encode_lines(points)
        cpu = time.thread_time() - started
        answer: dict = {"cpu": cpu}
        if "shape" in words:
            answer["shape"] = sorted(
                [p.measurement, sorted(p.tags.items()), sorted(p.fields)] for p in points
            )
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
