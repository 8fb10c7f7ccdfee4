"""Named causes, decided on numbers worked out by hand: where a rank's thread count came
from (the parsers over /proc text), the cpu_oversubscription verdicts, and the straggler
compared part by part (issue 27, items 3 and 11). The real runs are
tests/scenarios/test_causes.py."""

from __future__ import annotations

import dataclasses

import pytest

from collector.analysis.anatomy import RankEpoch
from collector.findings.base import evidence_json, words
from collector.findings.contention import (
    CORES_IDLE,
    CORES_SHARED,
    OVERSUBSCRIBED,
    RANK_QUOTA,
    WORKERS_COMPETE,
    RankCpus,
    judge_host,
)
from collector.findings.scaling import PartChange, ScalingAttribution, threads_text
from collector.findings.stragglers import detect_stragglers
from contract.cpulist import format_cpu_list, parse_cpu_list
from contract.procfs import parse_environ
from workloads.record.cpus import (
    cgroup_v1_cpu_path,
    launcher_name,
    quota_cpus,
    threads_source,
)

# --------------------------------------------------------------------------------------
# where the numbers come from
# --------------------------------------------------------------------------------------


def test_cpu_lists_round_trip():
    assert parse_cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert format_cpu_list({5}) == "5"


def test_the_launcher_that_set_omp_num_threads_is_named():
    torchrun = b"/venv/bin/python3\0/venv/bin/torchrun\0--nproc-per-node\x002\0train.py\0"
    assert launcher_name(torchrun) == "torchrun"
    assert launcher_name(b"python\0-m\0torch.distributed.run\0train.py\0") == "torchrun"
    assert launcher_name(b"/usr/bin/mpirun\0-np\x002\0") == "mpirun"
    parent = parse_environ(b"PATH=/bin\0HOME=/root\0")
    rank = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    assert threads_source(1, rank, parent, "torchrun", 2) == "OMP_NUM_THREADS=1 set by torchrun"
    inherited = parse_environ(b"OMP_NUM_THREADS=1\0")
    assert threads_source(1, rank, inherited, "torchrun", 2) == (
        "OMP_NUM_THREADS=1 from the environment"
    )
    assert threads_source(2, rank, parent, "torchrun", 2) == "set in the program"
    assert threads_source(2, {}, parent, "python", 2) == "the framework's default (one per CPU)"
    assert threads_source(1, {}, parent, "python", 2) == "set in the program"


def test_cgroup_v1_quota():
    text = "5:cpuacct,cpu:/scenario/slow\n4:memory:/x\n0::/\n"
    assert cgroup_v1_cpu_path(text) == "/scenario/slow"
    assert cgroup_v1_cpu_path("0::/user.slice\n") is None
    assert quota_cpus("25000\n", "100000\n") == 0.25
    assert quota_cpus("-1\n", "100000\n") is None


# --------------------------------------------------------------------------------------
# cpu_oversubscription
# --------------------------------------------------------------------------------------


def rank(number: int, threads: int, workers: int = 0, source: str = "set in the program",
         cpus: str = "0-1", quota: float | None = None) -> RankCpus:  # fmt: skip
    return RankCpus(number, threads, source, workers, cpus, quota)


def test_two_ranks_of_two_threads_on_two_cores_are_oversubscribed():
    (found,) = judge_host("n1", [rank(0, 2, 2), rank(1, 2, 2)], 98.0, on_gpus=False)
    assert (found.verdict, found.cores, found.threads, found.loader_workers) == (
        OVERSUBSCRIBED, 2.0, 4, 4)  # fmt: skip
    finding = words(found)
    assert finding.severity == "warning"
    assert finding.title == "CPU oversubscribed on n1: 4 compute threads on 2 cores"
    assert "rank 1: 2 threads (set in the program) + 2 loader workers" in finding.explanation
    assert "CPUs 0-1 allowed (sched_getaffinity)" in finding.explanation


@pytest.mark.parametrize(
    ("framework", "setting"),
    [
        ("pytorch", "torch.set_num_threads(N)"),
        ("tensorflow", "tf.config.threading.set_intra_op_parallelism_threads(N)"),
        ("mxnet", "OMP_NUM_THREADS=N in each rank's environment before mxnet is imported"),
        ("jax", "OMP_NUM_THREADS=N in each rank's environment"),
    ],
)
def test_the_advice_names_the_runs_own_framework_setting(framework, setting):
    (found,) = judge_host("n1", [rank(0, 2, 2), rank(1, 2, 2)], 98.0, on_gpus=False)
    explanation = words(dataclasses.replace(found, framework=framework)).explanation
    assert f"at most cores / ranks threads: {setting}" in explanation
    assert (framework == "pytorch") == ("torch.set_num_threads" in explanation)


def test_torchruns_one_thread_per_rank_is_named_as_the_cores_shared():
    source = "OMP_NUM_THREADS=1 set by torchrun"
    (found,) = judge_host("n1", [rank(0, 1, 0, source), rank(1, 1, 0, source)], 99.0, False)
    assert found.verdict == CORES_SHARED
    finding = words(found)
    assert finding.title == "2 ranks share 2 cores on n1: 1 thread each"
    assert "rank 0: 1 thread (OMP_NUM_THREADS=1 set by torchrun)" in finding.explanation
    assert "grows about 2x" in finding.explanation
    # on GPUs the CPU threads are no compute: nothing to say
    assert judge_host("n1", [rank(0, 1, 0, source), rank(1, 1, 0, source)], 99.0, True) == []


def test_workers_compete_only_while_the_trainings_own_processes_saturate_the_cores():
    ranks = [rank(0, 1, 2), rank(1, 1, 2)]
    (found,) = judge_host("n1", ranks, 97.0, on_gpus=True, training_cores_busy=1.9)
    assert found.verdict == WORKERS_COMPETE
    assert "kept 1.90 of them busy" in words(found).explanation
    assert judge_host("n1", ranks, 40.0, on_gpus=True, training_cores_busy=0.8) == []
    # a host saturated by other processes while the training's own used 0.3 of its 2
    # cores: its workers were idle, the contention finding names the others
    assert judge_host("n1", ranks, 100.0, on_gpus=True, training_cores_busy=0.3) == []
    # the training's CPU seconds unknown: whose the host's CPU time was is unknown too
    assert judge_host("n1", ranks, 100.0, on_gpus=True) == []
    # on CPUs the ranks also divide the cores: both are said
    verdicts = [f.verdict for f in judge_host("n1", ranks, 97.0, False, training_cores_busy=1.9)]
    assert verdicts == [WORKERS_COMPETE, CORES_SHARED]


def test_a_quota_caps_the_cores_and_one_thread_on_two_cores_is_idle_cores():
    (found,) = judge_host("n1", [rank(0, 2, quota=0.5)], 50.0, on_gpus=False)
    assert (found.verdict, found.cores) == (OVERSUBSCRIBED, 0.5)
    assert "a cgroup CPU quota of 0.5 CPUs" in words(found).explanation
    (idle,) = judge_host(
        "n1", [rank(0, 1, source="OMP_NUM_THREADS=1 set by torchrun")], 50.0, False
    )
    assert idle.verdict == CORES_IDLE
    assert judge_host("n1", [rank(0, 2)], 99.0, on_gpus=False) == []  # 2 threads, 2 cores
    # one thread on two cores, the other core busy decoding: nothing idle
    assert judge_host("n1", [rank(0, 1, 1)], 95.0, on_gpus=False) == []


# --------------------------------------------------------------------------------------
# the straggler, part by part
# --------------------------------------------------------------------------------------

STEPS = 10


def rank_epoch(number: int, input_wait: float, compute: float, communication: float,
               other: float, host: str = "n1", epoch: int = 2) -> RankEpoch:  # fmt: skip
    """Parts in seconds per step."""
    parts = (input_wait, compute, communication, other)
    return RankEpoch(host, number, epoch, STEPS, sum(parts) * STEPS,
                     *(p * STEPS for p in parts), None, 40.0, None, None, None, None)  # fmt: skip


def test_a_rank_sleeping_before_the_update_is_named_though_the_wait_lands_in_forward():
    """The issue's run: rank 1 sleeps 150 ms between backward and the optimizer step; rank 0
    waits for it in DDP's buffer broadcast at the start of its next forward. Busy time
    (step - all-reduce) is 0.42 s against 0.44: the old rule saw nothing."""
    ranks = [rank_epoch(0, 0.01, 0.40, 0.01, 0.02), rank_epoch(1, 0.01, 0.25, 0.01, 0.17)]
    found = detect_stragglers(ranks)
    (hit,) = found.epochs
    assert (hit.rank, hit.slow_part) == (1, "other")
    assert hit.part_seconds_per_step == pytest.approx(0.17)
    assert hit.others_part_seconds_per_step == pytest.approx(0.02)
    ((waited,),) = [hit.waits]
    assert (waited.rank, waited.part) == (0, "compute")
    assert waited.extra_seconds_per_step == pytest.approx(0.15)
    finding = words(found)
    assert (
        finding.title == "Straggler: rank 1 on n1, slow in the rest of the step (update, callbacks)"
    )
    assert "spent 170 ms/step in the rest of the step" in finding.explanation
    assert "against 20 on the other ranks (+150 ms)" in finding.explanation
    assert "rank 0 on n1 in its compute (forward + backward) (+150 ms)" in finding.explanation


def test_a_rank_slow_in_compute_is_named_and_the_others_wait_in_the_all_reduce():
    ranks = [rank_epoch(0, 0.01, 0.20, 0.20, 0.02), rank_epoch(1, 0.01, 0.40, 0.0, 0.02)]
    (hit,) = detect_stragglers(ranks).epochs
    assert (hit.rank, hit.slow_part, hit.waits[0].part) == (1, "compute", "communication")


def test_with_three_ranks_the_odd_one_out_is_named_wherever_the_wait_lands():
    # rank 2 waits for input; ranks 0 and 1 wait for it in their compute (forward)
    ranks = [rank_epoch(0, 0.01, 0.40, 0.01, 0.02), rank_epoch(1, 0.01, 0.41, 0.01, 0.02),
             rank_epoch(2, 0.16, 0.25, 0.01, 0.02)]  # fmt: skip
    (hit,) = detect_stragglers(ranks).epochs
    assert (hit.rank, hit.slow_part) == (2, "input_wait")


def test_alike_ranks_have_no_straggler():
    ranks = [rank_epoch(0, 0.01, 0.40, 0.02, 0.02), rank_epoch(1, 0.02, 0.36, 0.05, 0.03)]
    assert detect_stragglers(ranks) is None


def test_a_rank_under_its_own_cpu_quota_is_named():
    found, shared = judge_host("n1", [rank(0, 1), rank(1, 1, quota=0.25)], 90.0, on_gpus=False)
    assert (found.verdict, shared.verdict) == (RANK_QUOTA, CORES_SHARED)
    finding = words(found)
    assert finding.title == "Rank 1 on n1 held to 0.25 CPUs by a cgroup quota"
    assert (
        "rank 1: 1 thread (set in the program) + 0 loader workers, a cgroup CPU quota of 0.25"
        in (finding.explanation)
    )


def test_the_scaling_loss_names_fewer_threads_per_rank_as_why_compute_grew():
    """The issue's 'mostly compute': 2 ranks with torchrun's 1 thread each against the
    1-rank run's 2 threads."""
    compute = PartChange("compute", 0.20, 0.40, 1.0, 24.6)
    found = ScalingAttribution(
        reference_run="one", reference_ranks=1, ranks=2, epochs=[2], reference_epochs=[2],
        reference_images_per_second_per_rank=40.1, images_per_second_per_rank=20.0,
        lost_images_per_second=24.6, lost_fraction_per_rank=0.5,
        reference_seconds_per_step=0.2, seconds_per_step=0.4, parts=[compute],
        reference_fabric_bytes_per_step=None, fabric_bytes_per_step=None,
        threads_per_rank=1, threads_source="OMP_NUM_THREADS=1 set by torchrun",
        reference_threads_per_rank=2,
        reference_threads_source="the framework's default (one per CPU)",
    )  # fmt: skip
    assert threads_text(found) == (
        " Compute grew as each rank computed with 1 thread (OMP_NUM_THREADS=1 set by "
        "torchrun) where the reference's ranks had 2 threads (the framework's default (one "
        "per CPU)): the ranks divided the cores (see cpu_oversubscription)."
    )
    assert "threads_per_rank" in evidence_json(found)
