"""Named causes on real runs (issue 27, items 3, 5 and 11): a user's PyTorch script
(tests/scripts/cause_train.py, reading the scenario JPEG tree) under ``workloads profile``,
alone or under torchrun (2 gloo DDP ranks on this 2-core machine), with the cause produced
for real: compute threads past the cores, a rank sleeping before its update, a rank under a
cgroup v1 CPU quota, loader workers started again every epoch.

Thresholds: the sleep (150 ms) and the quota (5% of a CPU) make the slow rank's extra part
30% of the step and more, against the rule's 15%; other trainings on this shared machine
slow both ranks alike, so they move the step time, not the gap between the ranks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from collector.findings.base import CPU_SATURATED_PERCENT
from collector.findings.input import EPOCH_START_WAIT_SHARE
from tests.scenarios.conftest import REPO, ScenarioRun, collector_report

SCRIPT = REPO / "tests" / "scripts" / "cause_train.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
IMAGES = 128  # of the scenario data set's 256: 8 steps per rank and epoch with 2 ranks
# A quota binds only below the CPU a rank would get anyway: with ~17 runnable threads from
# other sessions on these 2 cores a rank got ~12% of a core, so 25% changed nothing; 5%
# binds loaded or quiet (911 of 938 periods throttled, the rank 20x slower per step).
QUOTA_CPUS = 0.05

pytestmark = pytest.mark.timeout(600)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scenario_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def profile_script(
    tmp_path: Path,
    run_id: str,
    data: Path,
    *args: str,
    ranks: int = 1,
    step_every: int = 1,
    env: dict[str, str],
) -> ScenarioRun:
    """``workloads profile -- [torchrun --nproc-per-node RANKS] cause_train.py DATA ARGS``."""
    runs = tmp_path / "runs"
    script = [str(SCRIPT), str(data), "--images", str(IMAGES), *args]
    if ranks > 1:
        launcher = [str(TORCHRUN), "--nproc-per-node", str(ranks),
                    "--master-port", str(free_port())]  # fmt: skip
    else:
        launcher = [sys.executable]
    command = [sys.executable, "-m", "workloads", "profile", "--runs-dir", str(runs),
               "--run-id", run_id, "--data-dir", str(data), "--step-every", str(step_every), "--",
               *launcher, *script]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    db = runs / f"{run_id}.sqlite"
    run = ScenarioRun(run_id, db, result.stdout, result.stderr)
    run.report = collector_report(db, run_id, env)
    return run


def cpu_finding(run: ScenarioRun, verdict: str) -> dict:
    """The run's cpu_oversubscription finding with ``verdict`` (a host may have two)."""
    (found,) = [
        f for f in run.findings
        if f["rule"] == "cpu_oversubscription" and f["evidence"]["verdict"] == verdict
    ]  # fmt: skip
    return found


def ranks_of(found: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in found["evidence"]["ranks"]}


def test_two_ranks_of_two_threads_and_two_workers_on_two_cores_are_oversubscribed(
    tmp_path, scenario_data
):
    """2 ranks x (2 compute threads, from OMP_NUM_THREADS=2 in the launcher's environment,
    + 2 loader workers) on 2 cores; on a host of more cores each rank gets as many threads
    as the cores this test may use (os.sched_getaffinity), so the two ranks still ask for
    twice the cores."""
    cores = len(os.sched_getaffinity(0))
    run = profile_script(tmp_path, "oversubscribed", scenario_data("pytorch"), "--workers", "2",
                         ranks=2, env=scenario_env(OMP_NUM_THREADS=str(cores)))  # fmt: skip
    found = run.finding("cpu_oversubscription")  # the only one: oversubscribed says it all
    evidence = found["evidence"]
    assert evidence["verdict"] == "oversubscribed"
    assert (evidence["threads"], evidence["loader_workers"], evidence["cores"]) == (
        2 * cores, 4, cores
    )  # fmt: skip
    assert found["severity"] == "warning"
    for rank in ranks_of(found).values():
        assert rank["threads"] == cores and rank["loader_workers"] == 2
        assert rank["threads_source"] == f"OMP_NUM_THREADS={cores} from the environment"
    assert found["title"].startswith("CPU oversubscribed on ")
    assert f"{2 * cores} compute threads on {cores} cores" in found["title"]


def test_a_rank_sleeping_between_backward_and_the_update_is_named(tmp_path, scenario_data):
    """The issue's run: rank 1 sleeps 150 ms between backward() and optimizer.step(); rank 0
    waits for it in DDP's buffer broadcast at the start of its next forward. torchrun sets
    OMP_NUM_THREADS=1 for both ranks, which is named too (2 ranks sharing 2 cores)."""
    run = profile_script(tmp_path, "sleeper", scenario_data("pytorch"), "--sleep-rank", "1",
                         "--sleep-ms", "150", ranks=2, env=scenario_env())  # fmt: skip
    straggler = run.finding("straggler")
    hits = straggler["evidence"]["epochs"]
    assert straggler["evidence"]["same_rank"] is True
    assert {(h["rank"], h["slow_part"]) for h in hits} == {(1, "other")}
    for hit in hits:
        extra = hit["part_seconds_per_step"] - hit["others_part_seconds_per_step"]
        assert 0.12 <= extra <= 0.25, hit  # the 150 ms sleep, give or take the machine
        assert [w["rank"] for w in hit["waits"]] == [0]
    assert "rank 1 on" in straggler["title"]
    assert "oversubscribed" not in {f["evidence"].get("verdict") for f in run.findings}
    for rank in ranks_of(cpu_finding(run, "cores_shared")).values():
        assert rank["threads"] == 1
        assert rank["threads_source"] == "OMP_NUM_THREADS=1 set by torchrun"


@contextlib.contextmanager
def cpu_quota_cgroup(share: float):
    """A cgroup v1 CPU cgroup allowed ``share`` of one CPU, removed afterwards (once the
    processes moved into it have exited)."""
    if not os.access(CGROUP_CPU, os.W_OK):
        pytest.skip(f"{CGROUP_CPU} is not writable here")
    path = CGROUP_CPU / f"epochscope-scenario-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        period = int((path / "cpu.cfs_period_us").read_text())
        (path / "cpu.cfs_quota_us").write_text(str(int(period * share)))
        yield path
    finally:
        for _ in range(50):  # the ranks' exit may still be under way
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_rank_under_a_cgroup_cpu_quota_is_named(tmp_path, scenario_data):
    """Rank 1 moves itself into a cgroup allowed ``QUOTA_CPUS`` of a CPU before it trains;
    its wait for the CPU lands in every part of its step (decoding its batch in its own
    process, compute, the update), rank 0's wait for it in the all-reduce and forward."""
    with cpu_quota_cgroup(QUOTA_CPUS) as cgroup:
        run = profile_script(tmp_path, "quota", scenario_data("pytorch"), "--cgroup-rank", "1",
                             ranks=2, env=scenario_env(CAUSE_CGROUP=str(cgroup)))  # fmt: skip
    straggler = run.finding("straggler")
    hits = straggler["evidence"]["epochs"]
    assert {h["rank"] for h in hits} == {1}
    assert "rank 1 on" in straggler["title"]
    # its own run_start says why: the quota its cgroup gives it
    cpus = cpu_finding(run, "rank_quota")
    assert ranks_of(cpus)[1]["quota_cpus"] == QUOTA_CPUS
    assert ranks_of(cpus)[0]["quota_cpus"] is None
    assert "Rank 1 on" in cpus["title"] and f"held to {QUOTA_CPUS:g} CPUs" in cpus["title"]


def test_loader_workers_started_again_every_epoch(tmp_path, scenario_data):
    """One rank, 2 loader workers without persistent_workers, 3 epochs: each epoch's first
    step waits for 2 fresh workers to start (0.5 s each, as workers that import libraries
    or open files do: on a quiet machine a bare fork starts in tens of ms, no more than
    the first batch's prefetch that every epoch pays) and decode their first batches. One
    compute thread and batches of 4 keep a step short beside that start-up. The same loop
    with persistent workers as the contrast: its epochs' first steps have no workers to
    start (the profiler sees none start at those epochs' passes), only the first batch to
    prefetch, so no restart is reported. Its workers start once, in epoch 1, which the
    startup finding puts on the input pipeline, not on storage.

    Both run with ``workloads profile``'s default ``--step-every 10``: each epoch's first
    step is sent besides every tenth (on a real H200 a user's loader restarting every epoch
    waited 24% of the step time, all in first steps that no step event showed). The input
    wait is then put on the epochs' start, where more workers would not help."""
    args = ("--workers", "2", "--epochs", "3", "--threads", "1", "--batch-size", "4",
            "--worker-start-ms", "500")  # fmt: skip
    run = profile_script(tmp_path, "restart", scenario_data("pytorch"), *args,
                         step_every=10, env=scenario_env())  # fmt: skip
    restart = run.finding("epoch_restart")
    evidence = restart["evidence"]
    assert [hit["epoch"] for hit in evidence["epochs"]] == [2, 3]
    assert (evidence["loader_workers"], evidence["persistent_workers"]) == (2, False)
    assert evidence["loader_workers_started"] == 4  # 2 at each of epochs 2 and 3
    assert "persistent_workers=True" in restart["explanation"]
    assert "2 workers, persistent_workers=False" in restart["explanation"]
    wait = run.finding("input_wait")
    assert wait["evidence"]["cause"] == "epoch_start", wait
    assert wait["evidence"]["first_step_wait_share"] >= EPOCH_START_WAIT_SHARE
    assert "more workers would not" in wait["explanation"]
    assert "(epoch start)" in wait["title"]
    kept = profile_script(tmp_path, "kept", scenario_data("pytorch"), *args,
                          "--persistent-workers", step_every=10, env=scenario_env())  # fmt: skip
    assert "epoch_restart" not in kept.rules, kept.findings
    causes = [f["evidence"]["cause"] for f in kept.findings if f["rule"] == "input_wait"]
    assert "epoch_start" not in causes, kept.findings
    # its workers start once, in epoch 1, from a data set the page cache held: the start-up
    # is the input pipeline's, not storage's
    startup = kept.finding("startup")
    assert startup["evidence"]["cause"] == "input_start", startup
    assert startup["evidence"]["first_read_bytes"] < 0.5 * kept.rows[0]["training_cache_read_bytes"]
    assert "not storage" in startup["explanation"]


def test_loader_workers_past_the_cores_by_count_but_idle_are_not_named(tmp_path, sized_data):
    """1 compute thread + 2 loader workers on 2 cores: oversubscribed by count, but the
    workers decode 32-px pictures the page cache holds, so they idle and cost nothing. The
    rule judges the training's own CPU (ranks and loaders, not the host's: other sessions
    on this shared machine saturate it, which made every run with workers "compete"), so
    it stays silent. Load only lowers the training's own CPU share, never raises it, so the
    silence holds on a loaded machine as on a quiet one."""
    cores = len(os.sched_getaffinity(0))
    if cores != 2:
        pytest.skip(f"sized for 2 cores, this machine gives {cores}")
    data = sized_data("pytorch", 128, 32, 32)
    run = profile_script(tmp_path, "idle-workers", data, "--threads", "1", "--workers", "2",
                         "--persistent-workers", "--epochs", "3", env=scenario_env())  # fmt: skip
    verdicts = {
        f["evidence"]["verdict"] for f in run.findings if f["rule"] == "cpu_oversubscription"
    }
    assert not verdicts & {"workers_compete", "oversubscribed"}, run.findings
    # the measurement the rule judged: the training's own CPU pooled over the settled
    # epochs (their CPU seconds over their wall time), under the 85% of the cores that
    # "compete" needs (one compute thread is 50%; the workers' collating of a 0.4 s epoch
    # added up to 20.6 points on a quiet machine). Not each epoch's own: on a quiet
    # machine an epoch took 77 ms, where one 10 ms CPU tick is 6.5 points, and one read
    # 92.3%.
    settled = [r for r in run.rows if r["host"] != "*" and r["epoch"] >= 2]
    assert settled and all(r["training_cpu_percent"] is not None for r in settled)
    pooled = sum(r["training_cpu_percent"] * r["seconds"] for r in settled) / sum(
        r["seconds"] for r in settled
    )
    assert pooled < CPU_SATURATED_PERCENT, settled
