"""``agent ceilings`` under real cgroup v1 limits (issue 29, "a CPU quota sets a known decode
ceiling"): the decode rate per core is what a core decodes per CPU second, so a quota of
half a core on the measuring command halves what it decodes by the clock and leaves the
rate per core alone, and the command says which CPUs and quota it ran under. A run's own
quota is what caps its decode ceiling (tests/unit/test_decode_ceiling.py).

The machine is shared with other trainings: they take clock time from the command, never
the quota's share of it upwards, so the clock's rate is bounded above by the quota (with
the CFS period's slack). The rate per CPU second is not the same under a quota here: a
process the quota throttles every period decodes more pictures per CPU second than one
running free (quiet: 177 against 116 and 116 before and after it; at load 4-5, 1.4-1.8x),
and the rate moves by a quarter within a minute under others' load. So the quota's rate is
compared with free ones taken just before and just after it, every measurement with the
largest ``cpu.shares``, within bounds that say what matters: the quota's clock time does
not bring it down towards the quota's share (a rate by the clock would read 0.5x)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from contract.schema import Ceiling

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
QUOTA_CPUS = 0.5
# the quota's rate per CPU second over the free ones' (see above for why it reads higher)
PER_CORE_LOW, PER_CORE_HIGH = 0.75, 2.0
SHARES = 262144  # cpu.shares' largest: the measurements get their CPU before others' work
QUOTA_SLACK = 0.10  # clock rate over rate per CPU second may exceed the quota by this
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # two real 2-second decode passes each, in subprocesses


@contextmanager
def cpu_quota(share: float | None, shares: int | None = None):
    """A cgroup v1 CPU cgroup allowed ``share`` of one CPU (no burst; None: no quota), with
    ``cpu.shares`` set when given, removed afterwards."""
    if not os.access(CGROUP_CPU, os.W_OK):
        pytest.skip(f"{CGROUP_CPU} is not writable here")
    path = CGROUP_CPU / f"epochscope-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        if share is not None:
            period = int((path / "cpu.cfs_period_us").read_text())
            (path / "cpu.cfs_quota_us").write_text(str(int(period * share)))
        if shares is not None:
            (path / "cpu.shares").write_text(str(shares))
        yield path
    finally:
        for _ in range(50):  # the moved process's exit may still be under way
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def python_in(cgroup: Path | None, *argv: str) -> str:
    """``python argv`` run from the repository, moved into ``cgroup`` before it starts."""
    procs = None if cgroup is None else str(cgroup / "cgroup.procs")

    def enter() -> None:
        if procs is not None:
            Path(procs).write_text(str(os.getpid()))

    result = subprocess.run(
        [sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=120,
        preexec_fn=enter,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


RATES = (
    "import json; from agent.ceilings import decode_rates; r = decode_rates({seconds});"
    "print(json.dumps([r.per_cpu_second, r.per_wall_second]))"
)


def free_rate_per_cpu_second(seconds: float) -> float:
    with cpu_quota(None, SHARES) as cgroup:
        return json.loads(python_in(cgroup, "-c", RATES.format(seconds=seconds)))[0]


def assert_within_free(held: float, before: float, after: float) -> None:
    """``held`` (under the quota) within the tolerance of the free rates around it."""
    low, high = min(before, after), max(before, after)
    assert low * PER_CORE_LOW <= held <= high * PER_CORE_HIGH, (
        f"{held:.0f} pictures per CPU second under the quota; free: {before:.0f}, {after:.0f}"
    )


def test_a_cpu_quota_takes_clock_time_not_the_rate_per_core():
    before = free_rate_per_cpu_second(2.0)
    with cpu_quota(QUOTA_CPUS, SHARES) as cgroup:
        held_cpu, held_wall = json.loads(python_in(cgroup, "-c", RATES.format(seconds=2.0)))
    assert_within_free(held_cpu, before, free_rate_per_cpu_second(2.0))
    # by the clock, the quota's half a core at most: the known decode ceiling it sets. (Not
    # compared with the free run's clock rate: on this loaded machine a free process gets
    # about a quarter of a core, no more than the quota's share.)
    assert held_wall / held_cpu <= QUOTA_CPUS + QUOTA_SLACK


def test_agent_ceilings_under_a_quota_keeps_the_rate_per_core_and_says_so(tmp_path):
    out = tmp_path / "ceilings.json"
    before = free_rate_per_cpu_second(1.5)
    with cpu_quota(QUOTA_CPUS, SHARES) as cgroup:
        printed = python_in(
            cgroup, "-m", "agent", "ceilings", "--data-dir", str(tmp_path), "--disk-mib", "4",
            "--disk-seconds", "0.2", "--cpu-seconds", "1.5", "--out", str(out),
        )  # fmt: skip
    after = free_rate_per_cpu_second(1.5)
    (decode,) = [c for c in json.loads(out.read_text())["ceilings"] if c["kind"] == "cpu"]
    assert decode["field"] == str(Ceiling.JPEG_DECODE)
    assert_within_free(decode["value"], before, after)
    assert f"a cgroup CPU quota of {QUOTA_CPUS:g} CPUs" in printed
    assert "pictures/s per core (per CPU second)" in printed
