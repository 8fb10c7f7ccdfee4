"""The run model (collector.analysis.run): a run's events read once, each rank's epoch_end
decoded once, and every analysis (windows, anatomy, throughput, scaling, findings) reading
that one model."""

from __future__ import annotations

from collector.analysis import anatomy, throughput
from collector.analysis.epochs import build_report, epoch_windows
from collector.analysis.run import read_run, run_model
from collector.analysis.scaling import run_facts
from collector.findings.context import run_context
from contract.point import Point
from contract.schema import Event, RunState, Tag, Workload
from tests.support.memory_store import MemoryStore
from tests.support.run_builder import NS, T0_NS

RUN = "r-model"


def event(host: str, rank: int, t: float, kind: str, **fields) -> Point:
    tags = {Tag.HOST: host, Tag.RUN_ID: RUN, Tag.RANK: str(rank), Tag.FRAMEWORK: "pytorch"}
    return Point(Workload.NAME, tags, {Workload.EVENT: kind, **fields}, T0_NS + round(t * NS))


def epoch_end(host: str, rank: int, t: float, epoch: int | None, **fields) -> Point:
    anatomy_fields = {
        Workload.SECONDS: 8.0,
        Workload.INPUT_WAIT_SECONDS: 2.0,
        Workload.COMPUTE_SECONDS: 5.0,
        Workload.COMMUNICATION_SECONDS: 0.5,
        Workload.OTHER_STEP_SECONDS: 0.5,
        Workload.IMAGES: 640,
        Workload.TIMED_IMAGES: 512,
        Workload.TIMED_SECONDS: 4.0,
        Workload.PROCESS_READ_BYTES: 1000,
        Workload.PROCESS_RCHAR_BYTES: 3000,
    }
    if epoch is not None:
        anatomy_fields[Workload.EPOCH] = epoch
    return event(host, rank, t, Event.EPOCH_END, **(anatomy_fields | fields))


class CountingStore(MemoryStore):
    """A ``MemoryStore`` that counts its event reads."""

    def __init__(self) -> None:
        super().__init__()
        self.event_reads = 0

    def events(self, *args, **kwargs):
        self.event_reads += 1
        return super().events(*args, **kwargs)


def stored(*points: Point) -> CountingStore:
    store = CountingStore()
    store.write(list(points))
    return store


def finished_run() -> CountingStore:
    return stored(
        event("a", 0, 0.0, Event.RUN_START, world_size=2, model="resnet50"),
        event("a", 0, 0.0, Event.EPOCH_START, epoch=1),
        event("a", 1, 0.5, Event.EPOCH_START, epoch=1),
        epoch_end("a", 0, 10.0, 1, step=10),
        epoch_end("a", 1, 10.5, 1, step=10),
        event("a", 0, 10.0, Event.EPOCH_START, epoch=2),
        event("a", 1, 10.5, Event.EPOCH_START, epoch=2),
        # rank 1 leaves the epoch out of its epoch_end: its latest epoch_start's
        epoch_end("a", 0, 20.0, 2, step=20),
        epoch_end("a", 1, 20.5, None, step=20),
        event("a", 0, 21.0, Event.RUN_END, state=RunState.FINISHED),
        event("a", 1, 21.0, Event.RUN_END, state=RunState.FINISHED),
    )


def test_one_record_per_rank_epoch_decoded_from_its_epoch_end():
    model = read_run(finished_run(), RUN)
    assert not model.live
    assert model.ranks == {("a", 0), ("a", 1)}
    assert [(r.host, r.rank, r.epoch) for r in model.records] == [
        ("a", 0, 1),
        ("a", 1, 1),
        ("a", 0, 2),
        ("a", 1, 2),
    ]
    record = model.records[1]
    assert (record.start_ns, record.end_ns) == (T0_NS + NS // 2, T0_NS + 21 * NS // 2)
    assert (record.images, record.seconds, record.global_step) == (640.0, 8.0, 10.0)
    assert (record.timed_images, record.timed_seconds) == (512.0, 4.0)
    assert (record.read_bytes, record.rchar) == (1000.0, 3000.0)
    assert record.ended and record.has_anatomy
    assert model.open_since_ns is None


def test_every_analysis_assigns_an_epoch_end_without_an_epoch_the_same_epoch():
    model = read_run(finished_run(), RUN)
    windows = epoch_windows(model)
    assert [(w.epoch, w.ranks, w.complete, w.images) for w in windows] == [
        (1, (0, 1), True, 1280.0),
        (2, (0, 1), True, 1280.0),
    ]
    ranks = anatomy.rank_epochs(model)
    assert [(r.epoch, r.rank, r.steps) for r in ranks] == [
        (1, 0, 10),
        (1, 1, 10),
        (2, 0, 10),
        (2, 1, 10),
    ]
    assert anatomy.epoch_reads(model)[("a", 2)] == {
        anatomy.PROCESS_READ: 2000.0,
        anatomy.PROCESS_RCHAR: 6000.0,
    }
    works = throughput.rank_epoch_work(model)
    assert [(w.epoch, w.rank, w.work.images, w.source) for w in works] == [
        (1, 0, 512.0, throughput.EPOCH_END_SOURCE),
        (1, 1, 512.0, throughput.EPOCH_END_SOURCE),
        (2, 0, 512.0, throughput.EPOCH_END_SOURCE),
        (2, 1, 512.0, throughput.EPOCH_END_SOURCE),
    ]


def test_an_open_epoch_reads_its_steps_into_the_model():
    store = stored(
        event("a", 0, 0.0, Event.RUN_START, world_size=1),
        event("a", 0, 0.0, Event.EPOCH_START, epoch=1),
        epoch_end("a", 0, 10.0, 1, step=10),
        event("a", 0, 10.0, Event.EPOCH_START, epoch=2),
        event("a", 0, 12.0, Event.STEP, step=12, images=64, seconds=1.0),
        event("a", 0, 13.0, Event.STEP, step=13, images=64),  # not timed
    )
    model = read_run(store, RUN)
    assert model.live and model.open_since_ns == T0_NS + 10 * NS
    open_epoch = model.records[-1]
    assert (open_epoch.epoch, open_epoch.ended) == (2, False)
    assert open_epoch.step_times_ns == (T0_NS + 12 * NS, T0_NS + 13 * NS)
    assert open_epoch.step_images == 128.0
    assert open_epoch.timed_step_work == throughput.TimedWork(64.0, 1.0)
    assert read_run(store, RUN) == run_model(store.events(RUN), run=store.run(RUN))


def test_the_report_the_findings_and_the_scaling_facts_share_one_read():
    store = finished_run()
    report = build_report(store, RUN)
    assert store.event_reads == 1  # the run and epoch events; a finished run's steps never
    context = run_context(store, RUN, report)
    assert context.model is report.model
    run = store.run(RUN)
    assert run is not None
    facts = run_facts(store, run, context.model)
    assert facts.model is report.model and facts.gpus == 2
    assert store.event_reads == 1
