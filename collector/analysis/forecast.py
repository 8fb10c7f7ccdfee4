"""What the measured run would do at other sizes (a forecast), and what each fix is worth on
the run as measured (what-if gain ceilings). The model is stated in ``docs/forecast.md``.

Every part is measured on the run and read through the existing analysis: each rank's step
anatomy (``anatomy.rank_epochs``: input wait, compute, exposed communication, the rest, and
the communication hidden under compute where the rank measured it), the run's images/s by
the one throughput definition (``analysis.throughput``), and the per-epoch report's fabric
bytes, storage reads and ceilings (``epochs.build_report``). Steady-state parts come from
the epochs after the first (the first compiles and reads from storage) where there are any.

The all-reduce at ``n`` nodes is the ring's ``2(n-1)/n x gradient bytes`` per node over the
link; the model is calibrated on the measured size: the exposed communication measured
there is kept, and only the ring's extra (or missing) bytes at another size are added,
hidden under compute in the share the run measured.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from collector.analysis.anatomy import RankEpoch, rank_epochs
from collector.analysis.epochs import EpochReport
from collector.analysis.memory_limit import run_memory_limit, usable_memory
from collector.analysis.throughput import rank_epoch_work, run_throughput

BOUND_COMPUTE = "compute"
BOUND_ALLREDUCE = "all-reduce"
BOUND_INPUT = "input"
BOUND_STORAGE = "storage while uncached"


@dataclass(frozen=True)
class ForecastError:
    """How far the forecast missed on real runs (docs/forecast.md#validation): what every
    view prints beside a forecast figure. Kept in step with the latest results of
    ``bench/forecast/netns.py`` (bench/forecast/results/netns.json; a unit test holds it)."""

    source: str  # the kind of measured run forecast from
    median_percent: float  # |forecast / measured images/s - 1|, median over held-out sizes
    worst_percent: float
    efficiency_median_points: float  # efficiency against the 1-node run, percentage points
    efficiency_worst_points: float
    cases: int
    validated_on: str = (
        "DDP over gloo on 1-4 network-namespace hosts behind tc-shaped links of 200, 500 and"
        " 1,000 Mbit/s, 3 and 4 hosts forecast (bench/forecast/netns.py)"
    )

    def text(self) -> str:
        return (
            f"error on real runs {self.source}: median {self.median_percent:.1f}%, worst "
            f"{self.worst_percent:.1f}% of images/s ({self.cases} held-out sizes)"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# bench/forecast/results/netns.json, 2026-11-29 (2 vCPUs of an AMD EPYC Zen 3, load 9-16)
VALIDATION_FROM_ONE_NODE = ForecastError(
    source="from 1 node with the link given",
    median_percent=9.2,
    worst_percent=12.8,
    efficiency_median_points=3.5,
    efficiency_worst_points=7.3,
    cases=6,
)
VALIDATION_FROM_NODES = ForecastError(
    source="from 2 nodes, the link measured on the run",
    median_percent=2.5,
    worst_percent=4.7,
    efficiency_median_points=1.0,
    efficiency_worst_points=1.8,
    cases=6,
)


def validation_for(nodes: int) -> ForecastError:
    """The validated error of a forecast from a run on ``nodes`` nodes: a 1-node run sent no
    gradients over a fabric, so its all-reduce's fixed costs are not in it."""
    return VALIDATION_FROM_ONE_NODE if nodes <= 1 else VALIDATION_FROM_NODES


def ring_allreduce_bytes(nodes: int, gradient_bytes: float) -> float:
    """Bytes each node sends (and receives) in one ring all-reduce: 2(n-1)/n x gradients."""
    return 2.0 * (nodes - 1) / nodes * gradient_bytes


def allreduce_seconds(nodes: int, gradient_bytes: float, link_bytes_per_second: float) -> float:
    """The ring all-reduce's time at ``nodes`` over a link of that rate (0 on one node)."""
    return ring_allreduce_bytes(nodes, gradient_bytes) / link_bytes_per_second


@dataclass(frozen=True)
class StepParts:
    """One rank's mean step (seconds): the anatomy's four parts and the hidden all-reduce."""

    input_wait: float
    compute: float
    communication: float  # exposed: not hidden under compute
    other: float
    hidden: float  # communication hidden under compute (0 where the run did not measure it)

    @property
    def seconds(self) -> float:
        return self.input_wait + self.compute + self.communication + self.other

    @property
    def overlap_share(self) -> float | None:
        """The share of the all-reduce hidden under compute, as measured; None without
        any communication."""
        total = self.communication + self.hidden
        return self.hidden / total if total > 0 else None


@dataclass(frozen=True)
class MeasuredRun:
    """What the forecast is built from: the measured run's parts."""

    run_id: str
    nodes: int
    gpus_per_node: int
    images_per_second: float  # the one throughput definition, over the steady epochs
    images_per_rank_step: float
    step: StepParts  # mean over ranks of the steady epochs
    overlap_measured: bool
    gradient_bytes: float | None  # per step, one copy of the gradients
    gradient_source: str
    link_bytes_per_second: float | None
    link_source: str
    storage_bytes_per_second: float | None  # the shared storage's ceiling
    storage_source: str
    epoch1_storage_bytes_per_second: float | None  # all nodes' storage reads in epoch 1
    dataset_bytes: float | None
    dataset_images: float | None
    host_memory_bytes: float | None
    memory_limit_bytes: float | None = None  # the run's memory cgroup limit (the tightest host's)
    # epoch 1's received less sent on the gradients' fabric per image: storage read over it
    storage_fabric_bytes_per_image: float | None = None

    @property
    def usable_memory_bytes(self) -> float | None:
        """What a node's page cache and processes may fill: its RAM or the run's limit."""
        return usable_memory(self.host_memory_bytes, self.memory_limit_bytes)

    @property
    def per_rank_rate(self) -> float:
        return self.images_per_second / (self.nodes * self.gpus_per_node)

    @property
    def bytes_per_image(self) -> float | None:
        if not self.dataset_bytes or not self.dataset_images:
            return None
        return self.dataset_bytes / self.dataset_images


@dataclass(frozen=True)
class ForecastRow:
    """A forecast for one size: never a measurement."""

    nodes: int
    gpus: int
    images_per_second: float
    efficiency: float  # against the measured run's per-rank rate
    efficiency_vs_baseline: float | None  # against the group's 1-GPU run, where there is one
    step_seconds: float
    input_wait: float
    compute: float
    allreduce: float  # exposed
    other: float
    bound: str
    epoch1_images_per_second: float | None  # while uncached, capped by shared storage
    epoch1_bound: str | None
    storage_need_bytes_per_second: float | None  # all nodes' reads in epoch 1 at full speed
    fabric_gradient_bytes_per_second: float | None  # per node, each way
    # per node, received in epoch 1: the gradients and the storage reads that cross that fabric
    fabric_epoch1_receive_bytes_per_second: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"forecast": True} | asdict(self)


def _steady(ranks: list[RankEpoch]) -> list[RankEpoch]:
    epochs = sorted({r.epoch for r in ranks})
    if len(epochs) > 1:
        return [r for r in ranks if r.epoch != epochs[0]]
    return ranks


def mean_step(ranks: list[RankEpoch]) -> tuple[StepParts, bool, float]:
    """The ranks' mean step parts over their epochs, whether every rank measured the overlap,
    and the images per rank per step."""
    steps = sum(r.steps for r in ranks)
    if steps <= 0:
        raise ValueError("the run's epochs carry no step counts: no per-step parts to forecast")
    measured_overlap = all(r.overlap is not None for r in ranks)
    parts = StepParts(
        input_wait=sum(r.input_wait for r in ranks) / steps,
        compute=sum(r.compute for r in ranks) / steps,
        communication=sum(r.communication for r in ranks) / steps,
        other=sum(r.other for r in ranks) / steps,
        hidden=sum(r.overlap or 0.0 for r in ranks) / steps if measured_overlap else 0.0,
    )
    return parts, measured_overlap, sum(r.images for r in ranks) / steps


def _config_number(config: dict[str, Any], key: str) -> float | None:
    value = config.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measured_run(
    report: EpochReport,
    *,
    gradient_bytes: float | None = None,
    link_bytes_per_second: float | None = None,
    link_from_ceilings: bool = False,
    storage_bytes_per_second: float | None = None,
    storage_from_ceilings: bool = False,
) -> MeasuredRun:
    """The forecast's inputs from a run's report; the given rates override measured ones."""
    model = report.model
    ranks = _steady(rank_epochs(model))
    if not ranks:
        raise ValueError(f"run {report.run_id} has no step anatomy: nothing to forecast from")
    steady_epochs = {r.epoch for r in ranks}
    step, overlap_measured, images_per_step = mean_step(ranks)
    works = [w for w in rank_epoch_work(model) if w.epoch in steady_epochs]
    rate = run_throughput(works).images_per_second
    if rate is None:
        raise ValueError(f"run {report.run_id} has no timed steps: no images/s to forecast from")
    hosts = sorted({r.host for r in ranks})
    nodes = len(hosts)
    gpus_per_node = max(1, round(len({(r.host, r.rank) for r in ranks}) / nodes))
    config = dict(model.run.config) if model.run else {}

    host_rows = [row for row in report.host_rows() if row.epoch in steady_epochs]
    gradient_source = "given" if gradient_bytes else ""
    if gradient_bytes is None and nodes > 1:
        gradient_bytes = _gradient_bytes_from_fabric(host_rows, ranks, nodes)
        gradient_source = "fabric bytes sent per step" if gradient_bytes else ""

    link_source = "given" if link_bytes_per_second else ""
    if link_bytes_per_second is None and link_from_ceilings:
        ceilings = [r.fabric_ceiling_mbps for r in host_rows if r.fabric_ceiling_mbps]
        if ceilings:
            link_bytes_per_second = min(ceilings) * 1e6
            link_source = "measured ceiling (agent ceilings)"
    if link_bytes_per_second is None and gradient_bytes and nodes > 1:
        total = step.communication + step.hidden
        if total > 0:
            link_bytes_per_second = ring_allreduce_bytes(nodes, gradient_bytes) / total
            link_source = "the run's all-reduce (bytes over communication time)"

    first_epoch = min(r.epoch for r in rank_epochs(model))
    first_total = [r for r in report.total_rows() if r.epoch == first_epoch]
    first_hosts = [r for r in report.host_rows() if r.epoch == first_epoch]
    epoch1_rate = first_total[0].storage_read_mbps if first_total else None
    storage_source = "given" if storage_bytes_per_second else ""
    if storage_bytes_per_second is None and storage_from_ceilings:
        storage_bytes_per_second = _storage_ceiling(report, first_epoch)
        storage_source = "measured ceiling (agent ceilings)" if storage_bytes_per_second else ""

    return MeasuredRun(
        run_id=report.run_id,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        images_per_second=rate,
        images_per_rank_step=images_per_step,
        step=step,
        overlap_measured=overlap_measured,
        gradient_bytes=gradient_bytes,
        gradient_source=gradient_source,
        link_bytes_per_second=link_bytes_per_second,
        link_source=link_source,
        storage_bytes_per_second=storage_bytes_per_second,
        storage_source=storage_source,
        epoch1_storage_bytes_per_second=epoch1_rate * 1e6 if epoch1_rate else None,
        dataset_bytes=_config_number(config, "dataset_bytes"),
        dataset_images=_config_number(config, "dataset_images"),
        host_memory_bytes=_config_number(config, "host_memory_bytes"),
        memory_limit_bytes=run_memory_limit(model),
        storage_fabric_bytes_per_image=_storage_over_fabric(
            first_hosts,
            _config_number(config, "dataset_bytes"),
            _config_number(config, "dataset_images"),
        ),
    )


STORAGE_OVER_FABRIC_SHARE = 0.1  # of the data set's bytes per image, to count as its reads


def _storage_over_fabric(
    rows, dataset_bytes: float | None, dataset_images: float | None
) -> float | None:
    """Bytes per image of epoch 1 that the nodes received over the gradients' fabric beyond
    what they sent (the studies' rx - tx: the all-reduce is symmetric, so the rest is storage
    read over that fabric). None unless that is at least a tenth of the data set's bytes per
    image (less is other traffic: the agents' pushes, a launcher's): a run without the data
    set's size cannot tell. The fabric is InfiniBand where the hosts counted it, else the
    NIC."""
    if not dataset_bytes or not dataset_images:
        return None
    received = sent = images = 0.0
    for row in rows:
        infiniband = row.ib_rcv_bytes is not None and row.ib_xmit_bytes is not None
        rx = row.ib_rcv_bytes if infiniband else row.net_rx_bytes
        tx = row.ib_xmit_bytes if infiniband else row.net_tx_bytes
        if rx is None or tx is None or not row.images:
            continue
        received, sent, images = received + rx, sent + tx, images + row.images
    if images <= 0:
        return None
    per_image = (received - sent) / images
    if per_image < STORAGE_OVER_FABRIC_SHARE * dataset_bytes / dataset_images:
        return None
    return per_image


def _gradient_bytes_from_fabric(rows, ranks: list[RankEpoch], nodes: int) -> float | None:
    """One copy of the gradients per step: a node's fabric bytes sent per step over the
    ring's 2(n-1)/n (``ib_xmit``, else the NIC's ``net_tx``)."""
    steps_by_host: dict[str, dict[int, int]] = defaultdict(dict)
    for r in ranks:
        steps_by_host[r.host][r.epoch] = max(r.steps, steps_by_host[r.host].get(r.epoch, 0))
    per_step = []
    for row in rows:
        sent = row.ib_xmit_bytes if row.ib_xmit_bytes else row.net_tx_bytes
        steps = steps_by_host.get(row.host, {}).get(row.epoch)
        if sent and steps:
            per_step.append(sent / steps)
    if not per_step:
        return None
    return statistics.mean(per_step) / (2.0 * (nodes - 1) / nodes)


def _storage_ceiling(report: EpochReport, epoch: int) -> float | None:
    """The shared storage's ceiling (bytes/s): the NFS read rate over its share of the
    measured ceiling, in the all-hosts row of ``epoch``."""
    for row in report.total_rows():
        if row.epoch == epoch and row.nfs_server_read_mbps and row.nfs_read_ceiling_percent:
            return row.nfs_server_read_mbps / (row.nfs_read_ceiling_percent / 100.0) * 1e6
    return None


def forecast(
    run: MeasuredRun,
    nodes_list: list[int],
    gpus_per_node: int | None = None,
    baseline_rate: float | None = None,
) -> list[ForecastRow]:
    """The forecast at each size (see the module docstring and docs/forecast.md)."""
    gpus_per_node = gpus_per_node or run.gpus_per_node
    step = run.step
    overlap = step.overlap_share if run.overlap_measured and step.overlap_share is not None else 0.0
    measured_allreduce = _allreduce(run, run.nodes)
    rows = []
    for nodes in nodes_list:
        if nodes < 1:
            raise ValueError(f"a size of {nodes} nodes")
        predicted = _allreduce(run, nodes)
        if predicted is None or measured_allreduce is None:
            if nodes != run.nodes and nodes > 1:
                raise ValueError(
                    "no gradient bytes or link rate: give --gradient-mb and --link-gbps "
                    "(a 1-node run sends no gradients over the fabric)"
                )
            predicted = measured_allreduce = 0.0
        extra = predicted - measured_allreduce
        # the ring's extra bytes hide under compute in the share measured, up to the compute
        hidden_extra = min(overlap * max(extra, 0.0), max(step.compute - step.hidden, 0.0))
        exposed = max(step.communication + extra - hidden_extra, 0.0)
        seconds = step.input_wait + step.compute + exposed + step.other
        gpus = nodes * gpus_per_node
        rate = gpus * run.images_per_rank_step / seconds
        bound = max(
            (
                (step.compute, BOUND_COMPUTE),
                (exposed, BOUND_ALLREDUCE),
                (step.input_wait, BOUND_INPUT),
            ),
        )[1]
        need = None
        epoch1_rate, epoch1_bound = None, None
        if run.bytes_per_image:
            need = rate * run.bytes_per_image
            if run.storage_bytes_per_second:
                epoch1_rate = min(rate, run.storage_bytes_per_second / run.bytes_per_image)
                epoch1_bound = BOUND_STORAGE if epoch1_rate < rate else bound
        fabric = (
            ring_allreduce_bytes(nodes, run.gradient_bytes) / seconds
            if run.gradient_bytes and nodes > 1
            else None
        )
        receive = _epoch1_receive(run, nodes, fabric, epoch1_rate or rate)
        rows.append(
            ForecastRow(
                nodes=nodes,
                gpus=gpus,
                images_per_second=rate,
                efficiency=rate / (gpus * run.per_rank_rate),
                efficiency_vs_baseline=rate / (gpus * baseline_rate) if baseline_rate else None,
                step_seconds=seconds,
                input_wait=step.input_wait,
                compute=step.compute,
                allreduce=exposed,
                other=step.other,
                bound=bound,
                epoch1_images_per_second=epoch1_rate,
                epoch1_bound=epoch1_bound,
                storage_need_bytes_per_second=need,
                fabric_gradient_bytes_per_second=fabric,
                fabric_epoch1_receive_bytes_per_second=receive,
            )
        )
    return rows


def _epoch1_receive(
    run: MeasuredRun, nodes: int, gradients: float | None, epoch1_rate: float
) -> float | None:
    """A node's receive rate in epoch 1: its gradients plus its share of the storage reads
    that cross the same fabric (None where neither is known)."""
    storage = None
    if run.storage_fabric_bytes_per_image:
        storage = epoch1_rate / nodes * run.storage_fabric_bytes_per_image
    if gradients is None and storage is None:
        return None
    return (gradients or 0.0) + (storage or 0.0)


def _allreduce(run: MeasuredRun, nodes: int) -> float | None:
    if nodes == 1:
        return 0.0
    if run.gradient_bytes is None or run.link_bytes_per_second is None:
        return None
    return allreduce_seconds(nodes, run.gradient_bytes, run.link_bytes_per_second)


def nodes_at_full_speed(run: MeasuredRun, rows: list[ForecastRow]) -> int | None:
    """The most nodes whose epoch-1 reads the shared storage's ceiling serves at full speed
    (per-node need taken from the forecast's largest size)."""
    if not run.storage_bytes_per_second or not rows or not rows[-1].storage_need_bytes_per_second:
        return None
    per_node = rows[-1].storage_need_bytes_per_second / rows[-1].nodes
    return int(run.storage_bytes_per_second // per_node)


def requirements(run: MeasuredRun, rows: list[ForecastRow]) -> list[str]:
    """One sentence per requirement at each size: storage in epoch 1, whether the data set
    stays cached, the fabric rate per node."""
    out = []
    holds = nodes_at_full_speed(run, rows)
    for row in rows:
        if row.storage_need_bytes_per_second is not None:
            sentence = (
                f"{row.nodes} nodes need {_rate(row.storage_need_bytes_per_second)} of reads in"
                " epoch 1 (forecast)"
            )
            if run.storage_bytes_per_second and holds is not None:
                sentence += (
                    f"; the storage's {run.storage_source or 'given'}"
                    f" {_rate(run.storage_bytes_per_second)} holds {holds} nodes at full speed"
                )
            out.append(sentence + ".")
        if row.fabric_gradient_bytes_per_second is not None:
            sentence = (
                f"{row.nodes} nodes send and receive {_rate(row.fabric_gradient_bytes_per_second)}"
                " of gradients per node (forecast)"
            )
            if run.link_bytes_per_second:
                share = row.fabric_gradient_bytes_per_second / run.link_bytes_per_second
                sentence += f", {share:.0%} of the link's {_rate(run.link_bytes_per_second)}"
            out.append(sentence + ".")
        receive = row.fabric_epoch1_receive_bytes_per_second
        if run.storage_fabric_bytes_per_image and receive is not None:
            sentence = (
                f"{row.nodes} nodes receive {_rate(receive)} per node in epoch 1 (forecast):"
                " gradients and the storage reads that cross the same fabric (epoch 1's"
                f" rx - tx, {_rate(run.storage_fabric_bytes_per_image, per_second=False)}"
                " per image)"
            )
            if run.link_bytes_per_second:
                share = receive / run.link_bytes_per_second
                sentence += f", {share:.0%} of the link"
            out.append(sentence + ".")
    cached = cache_sentence(run)
    if cached:
        out.append(cached)
    return out


def cache_sentence(run: MeasuredRun) -> str | None:
    """Whether the data set stays cached after epoch 1: its bytes against what a node may
    fill (its RAM, and the run's memory limit where the ranks reported one)."""
    usable = run.usable_memory_bytes
    if not run.dataset_bytes or not usable:
        return None
    limited = run.memory_limit_bytes is not None and usable == run.memory_limit_bytes
    against = (
        f"the run's memory limit ({_rate(run.memory_limit_bytes, per_second=False)})"
        if limited
        else f"a node's RAM ({_rate(usable, per_second=False)})"
    )
    if limited and run.host_memory_bytes:
        against += f", under the node's RAM ({_rate(run.host_memory_bytes, per_second=False)})"
    fits = run.dataset_bytes <= usable
    return (
        f"The data set ({_rate(run.dataset_bytes, per_second=False)}) "
        f"{'fits' if fits else 'does not fit'} in {against}: "
        + (
            "it stays cached after epoch 1 at every size."
            if fits
            else "every epoch reads it from storage, at epoch 1's rate."
        )
    )


def _rate(value: float, per_second: bool = True) -> str:
    unit = "/s" if per_second else ""
    if value >= 1e9:
        return f"{value / 1e9:.2f} GB{unit}"
    if value < 1e6:
        return f"{value / 1e3:.1f} kB{unit}"
    return f"{value / 1e6:.1f} MB{unit}"


@dataclass(frozen=True)
class WhatIf:
    """A fix's gain ceiling on the measured run: images/s were it made, and the gain."""

    fix: str
    images_per_second: float
    gain: float  # images_per_second over the measured rate

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


NO_STRAGGLER = "no straggler"
NO_INPUT_WAIT = "no input wait"
ALLREDUCE_OVERLAPPED = "all-reduce fully overlapped"


def what_if(report: EpochReport) -> list[WhatIf]:
    """The gain ceilings of three fixes on the measured run's steady epochs: every rank at
    the median rank's busy time (its step less the exposed communication, plus the least
    exposed communication of any rank, as that rank waited for nobody); no input wait; the
    exposed all-reduce hidden entirely. Each scales the measured images/s by the mean step
    over the fixed one."""
    ranks = _steady(rank_epochs(report.model))
    steady = {r.epoch for r in ranks}
    rate = run_throughput(
        [w for w in rank_epoch_work(report.model) if w.epoch in steady]
    ).images_per_second
    if not ranks or rate is None:
        return []
    step, _, _ = mean_step(ranks)
    per_rank: dict[tuple[str, int], list[RankEpoch]] = defaultdict(list)
    for r in ranks:
        per_rank[(r.host, r.rank)].append(r)
    parts = [mean_step(members)[0] for members in per_rank.values()]
    busy = statistics.median(p.input_wait + p.compute + p.other for p in parts)
    no_straggler = busy + min(p.communication for p in parts)
    fixed = {
        NO_STRAGGLER: min(no_straggler, step.seconds),
        NO_INPUT_WAIT: step.seconds - step.input_wait,
        ALLREDUCE_OVERLAPPED: step.seconds - step.communication,
    }
    return [
        WhatIf(fix, rate * step.seconds / seconds, step.seconds / seconds)
        for fix, seconds in fixed.items()
        if seconds > 0
    ]
