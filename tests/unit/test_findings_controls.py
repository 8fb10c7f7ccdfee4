"""The memory and contention rules on runs built from the facts of real controls of the
findings matrix (bench/findings, issue 42): trainings with nothing injected, whose stores
are under runs/findings-eval-2 and runs/findings-eval-3 (not in git). Each test says which
run its numbers come from; a healthy control must get no warning from these rules unless
the run measured what the warning says."""

from __future__ import annotations

import pytest

from collector.findings.engine import Finding, run_findings
from contract.point import Point
from contract.schema import Event, Process, Tag, Workload
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

NS = 1_000_000_000

# the matrix's small PyTorch data set (bench/findings/matrix.py Data("pytorch"): 256 JPEGs
# of 128 px) on the 2-vCPU machine, as the controls' reports give them
DATASET_BYTES = 2_075_332  # the run's configuration (training pictures)
DATASET_FILES_BYTES = 2_334_169  # its files, as the ranks measured them (train and val)
HOST_MEMORY_BYTES = 25_276_514_304


def rules(store, run_id: str) -> dict[str, Finding]:
    return {f.rule: f for f in run_findings(store, run_id)}


def with_residency(
    points: list[Point], files: int, before: float, ends: list[float]
) -> list[Point]:
    """``points`` with the one rank's data set residency as the workloads send it: the
    share cached at ``run_start`` and at each ``epoch_end``."""
    for point in points:
        if point.measurement != Workload.NAME:
            continue
        event = point.fields[Workload.EVENT]
        if event == Event.RUN_START:
            share = before
        elif event == Event.EPOCH_END:
            share = ends[int(point.fields[Workload.EPOCH]) - 1]
        else:
            continue
        point.fields[Workload.DATASET_CACHED_BYTES] = round(share * files)
        point.fields[Workload.DATASET_FILES_BYTES] = files
    return points


def control_run(run_id: str, **kw: object) -> RunBuilder:
    return RunBuilder(run_id, framework="pytorch", data_format="jpeg", cpus=2, gpus=False,
                      nfs=False, dataset_bytes=DATASET_BYTES, dataset_images=256,
                      host_memory_bytes=HOST_MEMORY_BYTES, **kw)  # fmt: skip


# --------------------------------------------------------------------------------------
# dataset_fits_in_memory and cache_warmup
# --------------------------------------------------------------------------------------


def quiet_pytorch_control(limit_bytes: int | None = None) -> list[Point]:
    """control-pytorch r1 of runs/findings-eval-3 (2026-11-29 07:16 UTC, the quiet
    machine): the bundled ResNet-50, 1 rank, epochs of 1.86 and 1.56 s of 32 pictures, the
    2.1 MB set 100% cached before the run and after each epoch. ``limit_bytes``: the same
    run under a memory limit of its own."""
    fields = {} if limit_bytes is None else {Workload.MEMORY_LIMIT_BYTES: limit_bytes}
    run = control_run("control-pytorch-r1", run_start_fields=fields)
    run.epoch(1.86, 32, reads=(0, DATASET_FILES_BYTES))
    run.epoch(1.56, 32, reads=(0, DATASET_FILES_BYTES))
    return with_residency(run.points(), DATASET_FILES_BYTES, 1.0, [1.0, 1.0])


def test_a_control_whose_set_fits_in_ram_is_told_so_at_info(make_store):
    # its report of 07:16 said "WARNING The data set fits in a host's RAM": true, and the
    # healthy case of most trainings; the matrix counted it a control's false alarm
    found = rules(make_store(quiet_pytorch_control()), "control-pytorch-r1")
    fits = found["dataset_fits_in_memory"]
    assert fits.severity == "info"
    assert fits.title == "The data set fits in a host's RAM"
    assert fits.evidence["dataset_to_memory_ratio"] == 0.0  # 2.1 MB of 25.3 GB
    assert fits.evidence["dataset_cached_at_end_percent"] == 100.0
    assert "measures memory, not storage" in fits.explanation
    assert found["dataset_cached_before_run"].severity == "info"
    assert not [f.rule for f in found.values() if f.severity != "info"]


def test_a_limit_below_a_set_the_ram_holds_is_a_warning_when_no_eviction_says_it(make_store):
    # the same control under a 1 MB memory limit of its own: the 2.1 MB set fits the host's
    # RAM, not the limit, so it is read from storage again every epoch; the ranks measured
    # no eviction (a 2 MB set is under dataset_evicted's 20 MB floor), so this is the one
    # finding that says so
    found = rules(make_store(quiet_pytorch_control(limit_bytes=1_000_000)), "control-pytorch-r1")
    fits = found["dataset_fits_in_memory"]
    assert fits.severity == "warning"
    assert fits.title == (
        "The data set fits in the host's RAM but not in the run's 1.0 MB memory limit"
    )
    assert "dataset_evicted" not in found


def test_a_controls_partly_cold_set_warming_in_epoch_1_is_info(make_store):
    # control-lightning r1 of runs/findings-eval-2 (05:25 UTC): the set was 57.6% cached
    # before the run (it had been read 3 minutes before; part of it left the page cache
    # meanwhile), 100% at the end of epoch 1; the rank read 2.4 MB in epoch 1 and nothing
    # in epoch 2, epochs of 0.80 and 0.83 s. The report said "WARNING Epoch 1 read the
    # data set from storage; later epochs ran from the page cache": true, and how a
    # healthy training on a set that fits in RAM runs
    run = control_run("control-lightning-r1")
    run.epoch(0.80, 256, reads=(2_424_832, DATASET_FILES_BYTES))
    run.epoch(0.83, 256, reads=(0, DATASET_FILES_BYTES))
    points = with_residency(run.points(), DATASET_FILES_BYTES, 0.576, [1.0, 1.0])
    found = rules(make_store(points), "control-lightning-r1")
    warm = found["cache_warmup"]
    assert warm.severity == "info"
    assert warm.evidence["dataset_cached_before_run_percent"] == 57.6
    assert warm.evidence["dataset_cached_after_first_epoch_percent"] == 100.0
    assert warm.evidence["first_epoch_storage_read_bytes"] == 2_424_832
    # the caveat for a storage measurement is still stated
    assert "the epochs after the first measure memory, not storage" in warm.explanation
    assert found["dataset_fits_in_memory"].severity == "info"


# --------------------------------------------------------------------------------------
# contention: the named processes against the others' share
# --------------------------------------------------------------------------------------

RANK_PID, LOADER_PID, LAUNCHER_PID, SIBLING_PID = 30721, 30754, 30706, 30716
ANSIBLE_PID, ANSIBLE_WORKER_PID = 30733, 30737


def script_control(
    training_share: float, busy: float, others: dict[tuple[int, int, str], float]
) -> list[Point]:
    """A 1-rank script control on 2 CPUs, two epochs of 20 s (the real ones lasted about
    1 s: stretched so the agent's 1 s samples resolve them; the shares are the facts):
    the host ``busy``, the rank and its loader ``training_share`` of the host's CPU time,
    and ``others`` ((pid, ppid, command) -> CPUs busy) among the agent's busiest."""
    run = control_run("control-script")
    for _ in range(2):
        run.epoch(20.0, 128, cpu_busy=busy)
    points = []
    for point in run.points():
        event = point.fields.get(Workload.EVENT)
        if event == Event.RUN_START:
            point.fields[Workload.PID] = RANK_PID
        elif event == Event.EPOCH_END:
            point.fields[Workload.CPU_SECONDS] = training_share * 2 * 20.0
        points.append(point)
    start, end = run.t0_ns - 5 * NS, run.end_true_ns() + 5 * NS
    for (pid, ppid, command), cpus in others.items():
        points += [
            Point(
                Process.NAME,
                {Tag.HOST: "node1", Tag.PID: str(pid), Tag.COMMAND: command, Tag.USER: "root"},
                {Process.CPU_SECONDS: cpus * (t - start) / NS, Process.PPID: float(ppid)},
                t,
            )
            for t in range(start, end, NS)
        ]
    return points


# control-script r2 of runs/findings-eval-2, epoch 1 (05:25 UTC, load 1.2): 1.01 s, the
# host 99.0% busy, the rank and its loader worker 1.20 CPU s of 2.01 (59.7%); among the
# agent's busiest an ansible-playbook and its worker (0.08 and 0.15 s), the run's own
# launcher's other child (0.01 s), and the rank's loader (counted as the training's)
LOAD_1_2 = {
    (ANSIBLE_WORKER_PID, ANSIBLE_PID, "ansible-playboo"): 0.15 / 1.01,
    (ANSIBLE_PID, 26847, "ansible-playboo"): 0.08 / 1.01,
    (SIBLING_PID, LAUNCHER_PID, "python"): 0.01 / 1.01,
    (LOADER_PID, RANK_PID, "pt_data_worker"): 0.13 / 1.01,
}


def test_contention_says_how_much_of_the_others_share_it_could_not_name(make_store):
    store = make_store(script_control(1.20 / 2.01, 0.99, LOAD_1_2))
    found = rules(store, "control-script")["contention"]
    evidence = found.evidence
    # others: 99.0 - 59.7 = 39.3% of the host's CPU time; the named ones (ansible x2 and
    # the launcher's child, not the rank's loader) (0.15 + 0.08 + 0.01) / 1.01 / 2 = 11.9%
    assert evidence["other_cpu_percent_mean"] == pytest.approx(39.3, abs=0.3)
    assert evidence["named_cpu_percent"] == pytest.approx(11.9, abs=0.3)
    assert evidence["unnamed_cpu_percent"] == pytest.approx(27.4, abs=0.5)
    assert LOADER_PID not in [p["pid"] for p in evidence["processes"]]
    assert "The processes the agent saw used 12% of the host's CPU time" in found.explanation
    assert "the other 27% was taken by processes it never saw" in found.explanation
    assert "children their parents reaped" in found.explanation


def test_the_quiet_control_gets_no_contention(make_store):
    # control-script r1 of runs/findings-eval-3 (07:17 UTC, nothing else on the machine):
    # the host 87.6% busy in epoch 1 and the rank with its loader 87.6% of it, the launcher
    # and its child 0.5% and 0.3%: the others took nothing (0% of the host's CPU time)
    quiet = {
        (SIBLING_PID, LAUNCHER_PID, "python"): 0.005 * 2,
        (LAUNCHER_PID, 1, "python"): 0.003 * 2,
        (LOADER_PID, RANK_PID, "pt_data_worker"): 0.17 * 2,
    }
    store = make_store(script_control(0.876, 0.876, quiet))
    assert "contention" not in rules(store, "control-script")
