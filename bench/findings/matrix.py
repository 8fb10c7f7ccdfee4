"""The labelled matrix: each case a real training with one cause injected for real, the
findings that must fire (with the cause they must state, where a rule states one) and those
that must not. Data, not code: the runner (bench/findings/runner.py) turns a case's
``training``/``script`` and ``inject`` into commands and context managers from
tests/support/real_runs.py.

Sizes are small so a run takes about 30-90 s on 2 cores. A third of the cases are held out
(``HELD_OUT``, drawn with ``SPLIT_SEED`` over the case names): no threshold is fitted on
them."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

SPLIT_SEED = 42
HELD_OUT_SHARE = 1 / 3
LIGHTNING_VENV = "~/.cache/epochscope/venvs/torch2.14.1-tv0.29.1-py311"


@dataclass(frozen=True)
class Expect:
    """A finding that must fire; where the rule states a cause, the evidence key holding it
    and the values that are right (``causes``) or wrong (``wrong_causes``)."""

    rule: str
    cause_key: str | None = None
    causes: frozenset[str] = frozenset()
    wrong_causes: frozenset[str] = frozenset()

    def cause_is_right(self, value: object) -> bool:
        if value in self.wrong_causes:
            return False
        return not self.causes or value in self.causes


@dataclass(frozen=True)
class Data:
    """A small data set in a framework's native format."""

    framework: str
    images: int = 256
    val_images: int = 32
    image_size: int = 128
    pad_bytes: int = 0  # each JPEG grown by this much (slow to read, cheap to decode)


@dataclass(frozen=True)
class Case:
    name: str
    framework: str  # tensorflow | pytorch | mxnet | script (a user's script, PyTorch)
    inject: str  # a name in bench/findings/runner.py's INJECTIONS ("none" for a control)
    must_fire: tuple[Expect, ...] = ()
    must_not: tuple[str, ...] = ()
    training: tuple[str, ...] = ()  # `workloads run` arguments (bundled trainers)
    script: tuple[str, ...] = ()  # `workloads profile -- python SCRIPT ARGS` ({data}: the set)
    ranks: int = 1  # > 1: the script under torchrun
    python: str = ""  # the script's interpreter ("" this venv's; LIGHTNING_VENV for Lightning)
    data: Data | None = None
    env: dict[str, str] = field(default_factory=dict)
    inject_options: dict[str, float] = field(default_factory=dict)
    requires: str = ""  # what the machine must offer beyond cgroup v1 ("netns")
    # a rule that may fire but must not state these causes (``Expect.wrong_causes``): a
    # fired finding stating one counts as a false alarm
    must_not_cause: tuple[Expect, ...] = ()

    @property
    def control(self) -> bool:
        return self.inject == "none"


def bundled(framework: str, *more: str) -> tuple[str, ...]:
    """A bundled ResNet-50 training, small: 1 rank, 2 epochs of 4 steps at 32 px."""
    return ("--framework", framework, "--np", "1", "--epochs", "2", "--steps-per-epoch", "4",
            "--batch-size", "8", "--image-size", "32", "--loader-workers", "1",
            "--no-validate", *more)  # fmt: skip


# 16 pictures at 64 px padded to 2.5 MB each (45 MB): 30 s of reads at 1.5 MB/s, cheap to
# decode (tests/scenarios/test_residency.py's set)
PADDED = Data("pytorch", 16, 2, 64, pad_bytes=2_500_000)
# 48 of them (120 MB): a third is more than the noise of the run's own memory
PADDED_LARGER = Data("pytorch", 48, 2, 64, pad_bytes=2_500_000)
READ_BOUND_TRAINING = ("--framework", "pytorch", "--np", "1", "--epochs", "2",
                       "--image-size", "32", "--batch-size", "2", "--loader-workers", "2",
                       "--warmup-steps", "2", "--step-every", "1", "--no-validate",
                       "--drop-caches")  # fmt: skip
CAUSE_TRAIN = "tests/scripts/cause_train.py"
SLOW_LOADER = "bench/findings/scripts/slow_loader.py"
LIGHTNING = "tests/scripts/lightning_train.py"

STORAGE = Expect("input_wait", "cause", frozenset({"storage"}))
NOT_STORAGE_NOR_DECODE = Expect(
    "input_wait", "cause", wrong_causes=frozenset({"storage", "decode"})
)
# the scaling loss's all-reduce against the measured link, as bench.findings.evaluate
# derives it from the finding's evidence: bound, not_shown or under
LINK_VERDICT = "attribution.link_verdict"
# what no healthy small run may be told
QUIET = ("divergence", "contention", "straggler", "dataset_evicted", "storage_bound")

CASES: tuple[Case, ...] = (
    # controls: nothing injected, across frameworks and launchers
    Case(
        "control-pytorch",
        "pytorch",
        "none",
        must_not=QUIET,
        training=bundled("pytorch"),
        data=Data("pytorch"),
    ),
    Case(
        "control-tensorflow",
        "tensorflow",
        "none",
        must_not=QUIET,
        training=bundled("tensorflow"),
        data=Data("tensorflow"),
    ),
    Case(
        "control-mxnet",
        "mxnet",
        "none",
        must_not=QUIET,
        training=bundled("mxnet"),
        data=Data("mxnet"),
    ),
    Case(
        "control-script",
        "script",
        "none",
        must_not=(*QUIET, "epoch_restart"),
        script=(
            CAUSE_TRAIN,
            "{data}",
            "--images",
            "128",
            "--workers",
            "1",
            "--persistent-workers",
            "--epochs",
            "2",
        ),
        data=Data("pytorch"),
    ),
    Case(
        "control-torchrun",
        "script",
        "none",
        must_not=QUIET,
        ranks=2,
        script=(CAUSE_TRAIN, "{data}", "--images", "128", "--epochs", "2"),
        data=Data("pytorch"),
    ),
    Case(
        "control-lightning",
        "script",
        "none",
        must_not=(*QUIET, "epoch_restart"),
        python=LIGHTNING_VENV,
        script=(LIGHTNING, "{data}", "--max-epochs", "2", "--persistent-workers"),
        data=Data("pytorch"),
    ),
    # storage: cold data through a read throttle, on its own loop device and on the root disk
    Case(
        "cold-throttled-loop",
        "pytorch",
        "cold_throttled_loop",
        must_fire=(Expect("storage_bound"), STORAGE),
        must_not=("dataset_cached_before_run", "contention", "divergence"),
        training=READ_BOUND_TRAINING,
        data=PADDED,
        inject_options={"read_bytes_per_second": 1_500_000},
    ),
    Case(
        "cold-throttled-root",
        "pytorch",
        "cold_throttled_root",
        must_fire=(Expect("storage_bound"), STORAGE),
        must_not=("dataset_cached_before_run", "contention", "divergence"),
        training=READ_BOUND_TRAINING,
        data=PADDED,
        inject_options={"read_bytes_per_second": 1_500_000},
    ),
    Case(
        "cached-pytorch",
        "pytorch",
        "cached",
        must_fire=(Expect("dataset_cached_before_run"),),
        must_not=("storage_bound", "cache_warmup", "dataset_evicted"),
        training=bundled("pytorch"),
        data=Data("pytorch"),
    ),
    Case(
        "cached-mxnet",
        "mxnet",
        "cached",
        must_fire=(Expect("dataset_cached_before_run"),),
        must_not=("storage_bound", "cache_warmup", "dataset_evicted"),
        training=bundled("mxnet"),
        data=Data("mxnet"),
    ),
    # a container's memory limit a third of the data set: re-read every epoch
    Case(
        "memory-limit",
        "pytorch",
        "memory_limit",
        must_fire=(
            Expect("dataset_evicted", "worst.cause", frozenset({"memory_limit"})),
            # said to fit the host's RAM but not the run's limit (bench.findings.evaluate
            # reads the rule's word for its evidence)
            Expect("dataset_fits_in_memory", "fit", frozenset({"fits_host_memory_only"})),
        ),
        must_not=("dataset_cached_before_run",),
        training=READ_BOUND_TRAINING,
        data=PADDED_LARGER,
        inject_options={"data_share": 1 / 3},
    ),
    # others' work on the node
    Case(
        "cpu-hog-pytorch",
        "pytorch",
        "cpu_hog",
        must_fire=(Expect("contention"),),
        must_not=("divergence", "storage_bound"),
        training=bundled("pytorch"),
        data=Data("pytorch"),
    ),
    Case(
        "cpu-hog-tensorflow",
        "tensorflow",
        "cpu_hog",
        must_fire=(Expect("contention"),),
        must_not=("divergence", "storage_bound"),
        training=bundled("tensorflow"),
        data=Data("tensorflow"),
    ),
    Case(
        "two-trainings",
        "pytorch",
        "second_training",
        must_fire=(Expect("contention"),),
        must_not=("divergence", "storage_bound"),
        training=bundled("pytorch"),
        data=Data("pytorch"),
    ),
    # the input pipeline
    Case(
        "slow-loader",
        "script",
        "none_labelled",
        must_fire=(NOT_STORAGE_NOR_DECODE,),
        must_not=("storage_bound", "contention"),
        script=(SLOW_LOADER, "--item-sleep-ms", "25"),
    ),
    Case(
        "slow-loader-torchrun",
        "script",
        "none_labelled",
        ranks=2,
        must_fire=(NOT_STORAGE_NOR_DECODE,),
        must_not=("storage_bound", "contention"),
        script=(SLOW_LOADER, "--item-sleep-ms", "25"),
    ),
    # JPEG decode under a CPU quota on the loader workers only (the ranks outside it), so
    # that decoding, not compute, is what is slowed: 256-px JPEGs decoded, then resized to 32
    Case(
        "decode-quota",
        "script",
        "worker_cpu_quota",
        must_fire=(Expect("input_wait", "cause", frozenset({"decode"})),),
        must_not=("storage_bound", "dataset_evicted"),
        script=(
            CAUSE_TRAIN,
            "{data}",
            "--epochs",
            "3",
            "--workers",
            "2",
            "--persistent-workers",
            "--cgroup-workers",
        ),
        data=Data("pytorch", 64, 8, 256),
        inject_options={"cpus": 0.25},
    ),
    Case(
        "loader-restart",
        "script",
        "none_labelled",
        must_fire=(
            Expect("epoch_restart"),
            Expect("input_wait", "cause", frozenset({"epoch_start"})),
        ),
        must_not=("storage_bound",),
        script=(
            CAUSE_TRAIN,
            "{data}",
            "--images",
            "128",
            "--workers",
            "2",
            "--epochs",
            "3",
            "--threads",
            "1",
            "--batch-size",
            "4",
            "--worker-start-ms",
            "500",
        ),
        data=Data("pytorch"),
    ),
    # the CPUs and the ranks
    Case(
        "oversubscribed",
        "script",
        "none_labelled",
        ranks=2,
        env={"OMP_NUM_THREADS": "2"},
        must_fire=(Expect("cpu_oversubscription", "verdict", frozenset({"oversubscribed"})),),
        must_not=("divergence",),
        script=(CAUSE_TRAIN, "{data}", "--images", "128", "--workers", "2"),
        data=Data("pytorch"),
    ),
    Case(
        "rank-quota",
        "script",
        "rank_cpu_quota",
        ranks=2,
        must_fire=(
            Expect("straggler"),
            Expect("cpu_oversubscription", "verdict", frozenset({"rank_quota"})),
        ),
        must_not=("divergence",),
        script=(CAUSE_TRAIN, "{data}", "--images", "128", "--cgroup-rank", "1"),
        data=Data("pytorch"),
        inject_options={"cpus": 0.05},
    ),
    Case(
        "rank-sleep",
        "script",
        "none_labelled",
        ranks=2,
        must_fire=(Expect("straggler"),),
        must_not=("divergence", "contention"),
        script=(CAUSE_TRAIN, "{data}", "--images", "128", "--sleep-rank", "1", "--sleep-ms", "150"),
        data=Data("pytorch"),
    ),
    # learning
    Case(
        "divergence-pytorch",
        "pytorch",
        "none_labelled",
        must_fire=(Expect("divergence"),),
        training=bundled("pytorch", "--epochs", "3", "--learning-rate", "1.25"),
        data=Data("pytorch"),
    ),
    Case(
        "divergence-tensorflow",
        "tensorflow",
        "none_labelled",
        must_fire=(Expect("divergence"),),
        training=bundled("tensorflow", "--epochs", "3", "--learning-rate", "1.25"),
        data=Data("tensorflow"),
    ),
    # the network between two hosts (network namespaces, tc): bench/findings/netns_cases.py,
    # bench/forecast/ddp_sleep.py's DDP over gloo, a 1-host reference run then 2 hosts
    Case(
        "allreduce-limited-link",
        "script",
        "netns_limited_link",
        must_fire=(Expect("scaling_loss", LINK_VERDICT, frozenset({"bound"})),),
        must_not=("divergence", "storage_bound"),
        requires="netns",
        inject_options={"rate_mbit": 100},
    ),
    Case(
        "allreduce-open-link",
        "script",
        "netns_open_link",
        must_not=("divergence", "storage_bound"),
        must_not_cause=(Expect("scaling_loss", LINK_VERDICT, wrong_causes=frozenset({"bound"})),),
        requires="netns",
    ),
)


def held_out_draw(names: list[str], seed: int = SPLIT_SEED, share: float = HELD_OUT_SHARE):
    """The held-out case names: a seeded draw of ``ceil(share * n)`` over the sorted names
    (the same names whatever order the cases are listed in)."""
    ordered = sorted(names)
    return frozenset(random.Random(seed).sample(ordered, math.ceil(share * len(ordered))))


# recorded, so a reader sees the split without running anything; a unit test keeps it equal
# to the draw
HELD_OUT = frozenset(
    {
        "allreduce-limited-link",
        "cached-mxnet",
        "cached-pytorch",
        "cold-throttled-loop",
        "control-mxnet",
        "control-pytorch",
        "rank-quota",
        "slow-loader-torchrun",
        "two-trainings",
    }
)


def split_of(name: str) -> str:
    return "held_out" if name in HELD_OUT else "fit"


def case_named(name: str) -> Case:
    (case,) = [case for case in CASES if case.name == name]
    return case
