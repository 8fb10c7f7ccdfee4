"""Final means final: before ``workloads run --collector`` and ``workloads profile
--collector`` print a run's per-epoch table, they wait (bounded) until every host's agent
has pushed node samples up to that host's ``run_end``.

The ranks' events arrive before the command ends; the agents push their samples every
``batch_seconds`` (5 s by default, ``agent.config``), so a table printed at once has node
columns blank or too small for the last epoch. The read API's ``dashboard/node_samples``
question (``collector.queries.questions.node_samples``) says, per host, its run_end and the
latest sample held around it; the wait asks it every ``POLL_SECONDS`` for at most
``--samples-wait`` seconds (default 3 x the agent's default push interval). A table
printed without every host's samples is marked provisional, with the command that prints
the final one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable

DEFAULT_AGENT_BATCH_SECONDS = 5.0  # agent.config's push.batch_seconds default
DEFAULT_SAMPLES_WAIT_SECONDS = 3 * DEFAULT_AGENT_BATCH_SECONDS
POLL_SECONDS = 0.5
QUESTION = "dashboard/node_samples"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, e.g. 15") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be 0..3600 seconds (got {text})")
    return value


def add_samples_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--samples-wait",
        type=_seconds,
        default=DEFAULT_SAMPLES_WAIT_SECONDS,
        metavar="SECONDS",
        help="with --collector (and --profile, for run): wait at most this long for every "
        "host's node samples up to "
        f"its run_end before printing the table (default {DEFAULT_SAMPLES_WAIT_SECONDS:g}: "
        "3 x the agent's push interval; 0: ask once, print at once)",
    )


Missing = dict[str, dict[str, int | None]]  # host -> {"run_end_ns", "latest_sample_ns"}


def missing_hosts(answer: Missing | None) -> Missing:
    """The hosts whose node samples do not yet reach their run_end."""
    if answer is None:
        return {}
    return {
        host: times
        for host, times in answer.items()
        if times.get("run_end_ns") is None
        or times.get("latest_sample_ns") is None
        or times["latest_sample_ns"] < times["run_end_ns"]
    }


def wait_for_node_samples(
    url: str,
    run_id: str,
    token: str | None,
    seconds: float,
    poll: float = POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Missing | None:
    """Ask until every host's samples reach its run_end, for at most ``seconds``: the hosts
    still short then ({} when none), or None when the collector cannot say (an older one
    without the question, or unreachable: the table is then printed as it comes)."""
    from collector.api.client import RemoteError, fetch_view

    deadline = clock() + seconds
    while True:
        try:
            answer = json.loads(fetch_view(url, QUESTION, {"run_id": run_id}, token))
        except (RemoteError, ValueError):
            return None
        missing = missing_hosts(answer)
        left = deadline - clock()
        if not missing or left <= 0:
            return missing
        sleep(min(poll, left))


def _when(time_ns: int | None) -> str:
    if time_ns is None:
        return "none"
    moment = datetime.datetime.fromtimestamp(time_ns / 1e9, datetime.UTC)
    return moment.strftime("%H:%M:%S UTC")


def provisional_line(missing: Missing, final_command: str) -> str:
    """What heads a table printed before every host's samples were in."""
    hosts = "; ".join(
        f"{host} (latest {_when(times.get('latest_sample_ns'))}, "
        f"run_end {_when(times.get('run_end_ns'))})"
        for host, times in sorted(missing.items())
    )
    return f"provisional: node samples from {hosts} not yet in; the final table: {final_command}"
