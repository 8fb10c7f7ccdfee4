"""The data set's page-cache residency: measured with mincore on real files, sent by a
host's first rank at run_start and every epoch_end, shown per epoch in every view, and
judged by the cache rules (a data set cached before the run was not read from storage)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collector.api.client import fetch_view
from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.store import SqliteStore
from collector.views.printers import render
from contract.columns import BY_NAME, format_cell
from contract.point import Point
from contract.schema import Event, Tag, Workload
from dashboard import columns as dashboard_columns
from dashboard.pages import epoch_table
from tests.support.run_builder import RunBuilder
from workloads.record.events import EventWriter, MemorySink
from workloads.record.spec import RunSpec
from workloads.record.timing import Recorder
from workloads.train.datasets import make_dataset
from workloads.train.pagecache import (
    PAGE_SIZE,
    DatasetResidency,
    evict,
    file_resident_bytes,
    resident_bytes_of,
)
from workloads.train.placement import Placement
from workloads.train.worker import residency_probe

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1_000_000


# --- measuring ---------------------------------------------------------------------------


def test_a_mincore_vector_counts_its_lowest_bits_and_stops_at_the_file_end():
    assert resident_bytes_of(bytes([1, 0, 1, 1]), 4 * 4096, 4096) == 3 * 4096
    assert resident_bytes_of(bytes([3, 0xFE, 0]), 3 * 4096, 4096) == 4096  # reserved bits
    assert resident_bytes_of(bytes([1, 1]), 4096 + 10, 4096) == 4096 + 10  # a partial page
    assert resident_bytes_of(b"", 0, 4096) == 0


def _read(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(1 << 20):
            pass


def test_mincore_sees_a_read_file_whole_and_an_evicted_one_gone(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(8 * MB + 123))  # not a whole number of pages
    size = path.stat().st_size
    evict([path])  # fdatasync, then posix_fadvise(DONTNEED)
    assert file_resident_bytes(path) <= 0.02 * size
    _read(path)
    assert file_resident_bytes(path) >= 0.98 * size
    assert file_resident_bytes(path) <= size
    evict([path])
    assert file_resident_bytes(path) <= 0.02 * size


def test_a_large_set_is_measured_on_an_even_sample_and_scaled_to_its_bytes(tmp_path):
    paths = []
    for index in range(10):
        path = tmp_path / f"{index:02}.bin"
        path.write_bytes(os.urandom(16 * PAGE_SIZE))
        paths.append(path)
    evict(paths)
    for path in paths[:5]:
        _read(path)
    whole = DatasetResidency(paths).measure()  # 10 files: every one of them
    assert (whole.files, whole.total_bytes) == (10, 160 * PAGE_SIZE)
    assert whole.resident_bytes == pytest.approx(80 * PAGE_SIZE, abs=2 * PAGE_SIZE)
    sampled = DatasetResidency(paths, sample_files=5)  # files 0, 2, 4, 6, 8: 3 of 5 cached
    assert [p.name for p in sampled.sample] == ["00.bin", "02.bin", "04.bin", "06.bin", "08.bin"]
    measured = sampled.measure()
    assert measured.total_bytes == 160 * PAGE_SIZE
    assert measured.fraction == pytest.approx(0.6, abs=0.02)
    # a manifest's byte count spares stat-ing every file of a large set
    assert DatasetResidency(paths, sample_files=5, total_bytes=10**6).measure().total_bytes == 10**6


def test_a_host_first_rank_sends_the_residency_at_run_start_and_every_epoch_end(tmp_path):
    sink = MemorySink()
    readings = iter([(0, 100), (60, 100), (100, 100)])
    recorder = Recorder(EventWriter(sink, "r", 0, "pytorch", "h"), batch_size=2, warmup_steps=0,
                        dataset_residency=lambda: next(readings))  # fmt: skip
    recorder.run_start({Workload.MODEL: "resnet50"})
    for epoch in (1, 2):
        recorder.epoch_start(epoch)
        recorder.step_done(1.0)
        recorder.epoch_end()
    sent = [
        (p.fields[Workload.EVENT], p.fields.get(Workload.DATASET_CACHED_BYTES))
        for p in sink.points
        if Workload.DATASET_FILES_BYTES in p.fields
    ]
    assert sent == [(Event.RUN_START, 0), (Event.EPOCH_END, 60), (Event.EPOCH_END, 100)]
    # only local rank 0 of a host with a data set measures
    data = tmp_path / "set"
    (data / "train").mkdir(parents=True)
    (data / "train" / "a.jpeg").write_bytes(b"x" * 5000)
    dataset = {"root": str(data), "format": "jpeg", "classes": 1, "image_size": 8,
               "train": {"images": 1, "bytes": 5000, "files": ["train/a.jpeg"]},
               "val": {"images": 0, "bytes": 0, "files": []}}  # fmt: skip
    spec = RunSpec(run_id="r", framework="pytorch", dataset=dataset, data_dir=str(data))
    assert residency_probe(spec, Placement(1, 2, 1, 2)) is None
    assert residency_probe(RunSpec(run_id="r", framework="pytorch"), Placement(0, 1, 0, 1)) is None
    probe = residency_probe(spec, Placement(0, 2, 0, 2))
    assert probe is not None and probe()[1] == 5000


# --- the per-epoch columns and every view ------------------------------------------------


def with_residency(
    points: list[Point], files: int, before: dict[str, float], ends: dict[str, list[float]]
) -> list[Point]:
    """``points`` with each host's first rank's residency added, as the workloads send it:
    ``before`` (its share cached at run_start) and ``ends`` (at each epoch_end)."""
    first_rank = {}
    for point in points:
        if point.measurement == Workload.NAME:
            host, rank = point.tags[Tag.HOST], int(point.tags[Tag.RANK])
            first_rank[host] = min(rank, first_rank.get(host, rank))
    for point in points:
        if point.measurement != Workload.NAME:
            continue
        host, rank = point.tags[Tag.HOST], int(point.tags[Tag.RANK])
        event = point.fields[Workload.EVENT]
        if rank != first_rank[host] or event not in (Event.RUN_START, Event.EPOCH_END):
            continue
        share = before[host] if event == Event.RUN_START else ends[host][point.fields["epoch"] - 1]
        point.fields[Workload.DATASET_CACHED_BYTES] = round(share * files)
        point.fields[Workload.DATASET_FILES_BYTES] = files
    return points


def two_host_run(run_id: str = "cold") -> RunBuilder:
    run = RunBuilder(run_id, hosts=("n1", "n2"), ranks_per_host=2, dataset_bytes=40 * MB,
                     data_format="jpeg")  # fmt: skip
    for _ in range(3):
        run.epoch(30, 600)
    return run


def test_each_epoch_shows_the_share_cached_at_its_start_and_end_and_all_hosts_pool_bytes(
    make_store,
):
    points = with_residency(two_host_run().points(), 50 * MB, {"n1": 0.0, "n2": 0.5},
                            {"n1": [1.0, 1.0, 1.0], "n2": [0.9, 1.0, 1.0]})  # fmt: skip
    store = make_store(points)
    rows = json.loads(cli(store, "report", "cold", "--format", "json"))["rows"]
    shown = {
        (r["host"], r["epoch"]): (
            r["dataset_cached_start_percent"],
            r["dataset_cached_end_percent"],
        )
        for r in rows
    }
    assert shown[("n1", 1)] == (0.0, 100.0)
    assert shown[("n2", 1)] == (50.0, 90.0)
    assert shown[("n2", 2)] == (90.0, 100.0)  # an epoch starts where the one before ended
    assert shown[("*", 1)] == (25.0, 95.0)  # all hosts' cached bytes over all their bytes
    assert shown[("*", 3)] == (100.0, 100.0)


def cli(store, *argv: str) -> str:
    return render(build_parser().parse_args(list(argv)), store)


def test_the_cached_share_is_one_value_every_view_writes_alike(tmp_path):
    """The CLI's table, its JSON, the read API (a real ``collector serve`` on loopback) and
    the dashboard's per-epoch table show the one value the report computes."""
    from bench.reliability import harness

    points = with_residency(two_host_run().points(), 50 * MB, {"n1": 0.0, "n2": 0.5},
                            {"n1": [0.996, 1.0, 1.0], "n2": [0.9, 1.0, 1.0]})  # fmt: skip
    db = tmp_path / "c.sqlite"
    store = SqliteStore(db)
    store.write_points(points)
    rows = json.loads(cli(store, "report", "cold", "--format", "json"))["rows"]
    row = next(r for r in rows if (r["host"], r["epoch"]) == ("*", 1))
    value = row["dataset_cached_start_percent"]
    assert value == 25.0 and row["dataset_cached_end_percent"] == 94.8
    column = BY_NAME["dataset_cached_end_percent"]
    text = cli(store, "report", "cold", "--columns", "epoch,dataset_cached_end_percent")
    assert format_cell(column, 94.8) == "94.8" and "94.8" in text and "99.6" in text
    # the read API answers what the collector computes
    collector = harness.Collector(db=db, token_file=None, log=tmp_path / "collector.log")
    collector.start()
    try:
        remote = json.loads(fetch_view(collector.url, "report", {"run_id": "cold"}, None))
    finally:
        collector.stop()
    assert remote["rows"] == rows
    # the dashboard: the same numbers in its table, written as the CLI writes them
    table = epoch_table(rows)
    cell = next(
        d for d in table.data if d["host"] != "n1" and d["host"] != "n2" and d["epoch"] == 1
    )
    assert cell["dataset_cached_end_percent"] == 94.8
    (dash_column,) = [c for c in dashboard_columns.EPOCH_COLUMNS if c.key == column.name]
    assert dashboard_columns.format_value(94.8, dash_column.kind) == format_cell(column, 94.8)
    assert dash_column.label == column.label


# --- the rules ---------------------------------------------------------------------------


def issue_run(run_id: str, before: float, ends: list[float]) -> list[Point]:
    """The issue's case: a 0.5 MB data set, and 55.7 MB of storage reads in epoch 1 that were
    the libraries the rank loaded (its own /proc/<pid>/io), nothing later."""
    run = RunBuilder(run_id, framework="pytorch", dataset_bytes=500_000, data_format="jpeg",
                     host_memory_bytes=25 * 10**9, gpus=False, nfs=False)  # fmt: skip
    run.epoch(30, 128, reads=(55_700_000, 60_000_000), disk_read=55_700_000 / 30)
    run.epoch(20, 128, reads=(0, 600_000))
    run.epoch(20, 128, reads=(0, 600_000))
    return with_residency(run.points(), 600_000, {"node1": before}, {"node1": ends})


def rules(store, run_id: str) -> dict[str, object]:
    return {f.rule: f for f in run_findings(store, run_id)}


def test_a_data_set_cached_before_the_run_was_not_read_from_storage(make_store):
    store = make_store(issue_run("cached", 1.0, [1.0, 1.0, 1.0]))
    found = rules(store, "cached")
    assert "cache_warmup" not in found and "storage_bound" not in found
    cached = found["dataset_cached_before_run"]
    assert cached.severity == "info" and cached.chart == "dataset_cached_start_percent"
    assert cached.evidence["dataset_cached_before_run_percent"] == 100.0
    assert cached.evidence["first_epoch_storage_read_bytes"] == 55_700_000
    assert cached.evidence["dataset_cached_start_percent_by_epoch"] == {
        1: 100.0,
        2: 100.0,
        3: 100.0,
    }
    assert "read it from memory" in cached.explanation
    assert "55.7 MB" in cached.explanation and "not the data set" in cached.explanation
    assert "--drop-caches" in cached.explanation


def test_a_cold_data_set_warms_up_in_epoch_1_as_measured(make_store):
    store = make_store(issue_run("cold", 0.0, [1.0, 1.0, 1.0]))
    found = rules(store, "cold")
    assert "dataset_cached_before_run" not in found
    warm = found["cache_warmup"]
    assert warm.chart == "dataset_cached_start_percent"
    assert warm.title.startswith("Epoch 1 read the data set from storage")
    assert warm.evidence["dataset_cached_before_run_percent"] == 0.0
    assert warm.evidence["dataset_cached_after_first_epoch_percent"] == 100.0
    assert "0% in the page cache before the run and 100% at the end of epoch 1" in warm.explanation
    # a data set the page cache never held whole: no warm-up, whatever the reads did
    store = make_store(issue_run("partial", 0.0, [0.4, 0.7, 0.8]))
    assert "cache_warmup" not in rules(store, "partial")


def test_without_a_measured_residency_the_reads_still_decide(make_store):
    run = RunBuilder("unmeasured", framework="pytorch", dataset_bytes=500_000, gpus=False,
                     nfs=False)  # fmt: skip
    run.epoch(30, 128, reads=(55_700_000, 60_000_000))
    run.epoch(20, 128, reads=(0, 600_000))
    found = rules(make_store(run.points()), "unmeasured")
    assert "dataset_cached_before_run" not in found
    assert found["cache_warmup"].title.startswith("Storage reads stop after epoch 1")


def test_a_profiled_script_with_a_data_dir_measures_it_too(tmp_path):
    from workloads.autoprofile.config import ProfileConfig
    from workloads.autoprofile.session import Session

    data = tmp_path / "set"
    make_dataset(data, "jpeg", images=4, classes=2, image_size=16, progress=False)
    config = ProfileConfig("r", "http://127.0.0.1:1", str(tmp_path / "spool"), data_dir=str(data))
    fields = Session(config).residency_fields()
    assert fields[Workload.DATASET_FILES_BYTES] == sum(
        p.stat().st_size for p in (data / "train").rglob("*") if p.is_file()
    )
    assert Session(ProfileConfig("r", "u", str(tmp_path))).residency_fields() == {}


def test_every_host_must_have_had_it_cached_before_the_run(make_store):
    points = with_residency(two_host_run("mixed").points(), 50 * MB, {"n1": 1.0, "n2": 0.0},
                            {"n1": [1.0, 1.0, 1.0], "n2": [1.0, 1.0, 1.0]})  # fmt: skip
    found = rules(make_store(points), "mixed")
    assert "dataset_cached_before_run" not in found  # n2 read it from storage in epoch 1
    assert found["cache_warmup"].evidence["dataset_cached_before_run_percent"] == 0.0
    points = with_residency(two_host_run("both").points(), 50 * MB, {"n1": 1.0, "n2": 0.97},
                            {"n1": [1.0, 1.0, 1.0], "n2": [1.0, 1.0, 1.0]})  # fmt: skip
    cached = rules(make_store(points), "both")["dataset_cached_before_run"]
    assert cached.evidence["hosts_cached_before_run_percent"] == {"n1": 100.0, "n2": 97.0}
    assert "every host's page cache" in cached.explanation


def evicted_run(
    run_id: str,
    later_read: int,
    ends: list[float],
    jobs: dict[str, float] | None = None,
    *,
    memory_limit_bytes: int | None = None,
    **later_rates: float,
) -> list[Point]:
    """A 45 MB data set read whole in epoch 1 (0% cached before it), and ``later_read``
    bytes of the ranks' own reads in each of epochs 2 and 3, with the data set's share
    cached at each epoch's end ``ends``; ``later_rates``: the host's rates in them;
    ``jobs``: Slurm jobs on the host over the whole run, by id, with their refaults per
    second (the first is the run's own); ``memory_limit_bytes``: the run's own memory
    cgroup limit, as its ranks send it in run_start."""
    files = 45_000_000
    limit = {} if memory_limit_bytes is None else {Workload.MEMORY_LIMIT_BYTES: memory_limit_bytes}
    run = RunBuilder(run_id, framework="pytorch", dataset_bytes=files, data_format="jpeg",
                     host_memory_bytes=25 * 10**9, gpus=False, nfs=False,
                     run_start_fields=limit)  # fmt: skip
    for number, (job, refaults) in enumerate((jobs or {}).items()):
        run.job(job, start_s=-5, seconds=200, refault_bytes_per_s=refaults, of_run=number == 0)
    run.epoch(30, 128, reads=(files, files), **dict.fromkeys(later_rates, 0.0))
    run.epoch(30, 128, reads=(later_read, files), **later_rates)
    run.epoch(30, 128, reads=(later_read, files), **later_rates)
    return with_residency(run.points(), files, {"node1": 0.0}, {"node1": ends})


def test_a_data_set_read_again_after_epoch_1_was_evicted_whatever_its_edges_say(make_store):
    # every edge after epoch 1 says 100% cached, yet epochs 2 and 3 read 40 MB each: the
    # pages left the cache inside the epochs and were read again
    store = make_store(evicted_run("evicted", 40_000_000, [1.0, 1.0, 1.0]))
    found = rules(store, "evicted")
    evicted = found["dataset_evicted"]
    assert evicted.severity == "warning" and evicted.chart == "training_read_bytes"
    assert evicted.evidence["epochs"] == [2, 3]
    assert evicted.evidence["worst"]["evicted_bytes"] == 40_000_000
    assert evicted.evidence["worst"]["evicted_percent"] == 88.9
    assert evicted.title == "The data set left the page cache during epochs 2, 3, after the first"
    assert (
        "100% of the data set's 45.0 MB was in the page cache as epoch 2 began"
        in evicted.explanation
    )
    assert "at least 40.0 MB (88.9% of the data set) left the cache" in evicted.explanation
    assert "fits in a host's RAM (0.0018x)" in evicted.explanation
    assert "cache_warmup" not in found  # the later epochs were not served from memory

    # a cache that loses what each epoch brings in: 80% at the start, 90% read, 70% at the end
    store = make_store(evicted_run("leaking", 40_500_000, [0.8, 0.7, 0.7]))
    leaking = rules(store, "leaking")["dataset_evicted"]
    assert leaking.evidence["host_epochs"][0]["evicted_bytes"] == 40_500_000 + 0.1 * 45_000_000

    # a neighbour evicting all the time: pages read ahead leave before the loader takes them,
    # and the epoch reads the 45 MB set twice (as a real run here did)
    store = make_store(evicted_run("thrashing", 90_000_000, [1.0, 0.0, 0.0]))
    thrashing = rules(store, "thrashing")["dataset_evicted"]
    assert thrashing.evidence["worst"]["evicted_percent"] == 300.0
    assert "(300% of the data set: some pages left more than once)" in thrashing.explanation

    # libraries a rank pages in after epoch 1 are not an eviction: the warm-up stands
    store = make_store(evicted_run("warm", 1_700_000, [1.0, 1.0, 1.0]))
    found = rules(store, "warm")
    assert "dataset_evicted" not in found and "cache_warmup" in found


def test_the_hosts_vmstat_counters_name_how_the_data_set_left(make_store):
    # 40 MB read again in each of epochs 2 and 3 (30 s each)
    def worst(run_id: str, **rates: float):
        evicted = rules(make_store(evicted_run(run_id, 40_000_000, [1.0, 1.0, 1.0], **rates)),
                        run_id)["dataset_evicted"]  # fmt: skip
        return evicted.evidence["worst"], evicted.explanation

    # one drop_caches per epoch: named, whatever the refaults
    cause, words = worst("dropped", cache_drops=1 / 30, file_refault=0.0)
    assert (cause["cause"], cause["page_cache_drops"]) == ("drop_caches", 1)
    assert "page cache was dropped 1 time during that epoch (vm.drop_caches" in words
    assert "DAMON" not in words  # the cause is known: no list of candidates

    # 36 MB of file refaults against 40 MB read again: the kernel's reclaim took them
    cause, words = worst("reclaimed", cache_drops=0.0, file_refault=1_200_000)
    assert (cause["cause"], cause["file_refault_bytes"]) == ("reclaim", 36_000_000)
    assert cause["refaults_judged"] == "host"  # no Slurm job sampled: the host's counter
    assert (
        "The kernel's reclaim took them: of the 40.0 MB the ranks read, 36.0 MB were file "
        "pages it had evicted, read back on the host (vmstat workingset_refault_file" in words
    )
    assert "memory cgroup limit" in words

    # neither counted (a neighbour's posix_fadvise DONTNEED, vmtouch -e)
    cause, words = worst("invalidated", cache_drops=0.0, file_refault=100_000)
    assert cause["cause"] == "invalidated"
    assert "Neither a drop_caches (none counted on the host) nor the kernel's reclaim " in words
    assert "(of the 40.0 MB the ranks read, only 3.0 MB were pages it had evicted" in words
    assert "they were invalidated, as posix_fadvise DONTNEED, vmtouch -e" in words

    # an agent that counted neither (an older agent, a kernel without the counters)
    cause, words = worst("uncounted")
    assert cause["cause"] == "unknown" and "page_cache_drops" not in cause
    assert "the kernel's proactive reclaim (DAMON pageout)" in words


def test_the_jobs_whose_pages_came_back_are_named_with_the_runs_own_marked(make_store):
    # 36 MB of the host's refaults in each 30 s epoch; the run's own job 41 had 33 MB of
    # them, job 7 (a neighbour) 3 MB
    def evicted(run_id: str, jobs: dict[str, float]):
        points = evicted_run(run_id, 40_000_000, [1.0, 1.0, 1.0], jobs, cache_drops=0.0,
                             file_refault=1_200_000)  # fmt: skip
        return rules(make_store(points), run_id)["dataset_evicted"]

    found = evicted("shared", {"41": 1_100_000, "7": 100_000})
    assert found.evidence["run_job_id"] == "41"
    assert found.evidence["worst"]["refaults_by_job"] == {"41": 33_000_000, "7": 3_000_000}
    assert (
        "Whose pages came back on node1, by Slurm job: job 41 (this run's) 33.0 MB, "
        "job 7 3.0 MB." in found.explanation
    )
    assert "Only this run's job" not in found.explanation
    # judged by the run's own job's refaults (33 of the 40 MB its ranks read), not the host's
    worst = found.evidence["worst"]
    assert (worst["refaults_judged"], worst["refault_bytes_judged"]) == ("job", 33_000_000)
    assert worst["cause"] == "reclaim"
    assert "read back by this run's job (its memory cgroup's workingset_refault_file)" in (
        found.explanation
    )

    # only the run's own job refaulted: its own memory limit
    found = evicted("alone", {"41": 1_100_000, "7": 0.0})
    assert found.evidence["worst"]["refaults_by_job"] == {"41": 33_000_000, "7": 0}
    assert "Only this run's job lost pages: its own memory limit, most likely" in found.explanation

    # the host's 36 MB of refaults were another job's pages; the run's own job read its
    # data set back with none: invalidated, which the host's counter alone would have
    # taken for reclaim
    found = evicted("neighbours", {"41": 0.0, "7": 1_200_000})
    worst = found.evidence["worst"]
    assert (worst["refaults_judged"], worst["refault_bytes_judged"]) == ("job", 0)
    assert worst["cause"] == "invalidated"
    assert "Whose pages came back" not in found.explanation


def test_the_eviction_counters_are_one_value_every_view_writes_alike(make_store):
    from tests.support.views import assert_views_agree

    points = evicted_run("counted", 40_000_000, [1.0, 1.0, 1.0], cache_drops=1 / 30,
                         file_refault=1_200_000)  # fmt: skip
    store = make_store(points)
    # epoch 3's 30 s: one drop, 36 MB read back after reclaim
    assert assert_views_agree(store, "counted", ["page_cache_drops"]) == {"page_cache_drops": 1}
    args = build_parser().parse_args(["report", "counted", "--format", "json"])
    rows = json.loads(render(args, store))["rows"]
    assert rows[-1]["file_refault_bytes"] == 36_000_000
    table = render(build_parser().parse_args(["report", "counted", "--columns", "all"]), store)
    assert format_cell(BY_NAME["file_refault_bytes"], 36_000_000) == "36.0 MB"
    assert "36.0 MB" in table
    # the dashboard's table holds the number itself (the browser formats it)
    cells = {d["host"]: d["file_refault_bytes"] for d in epoch_table(rows).data if d["epoch"] == 3}
    assert cells == {"node1": 36_000_000}


def test_the_runs_own_memory_limit_is_named_with_its_size_before_other_causes(make_store):
    # issue 42 item 4: a plain memory cgroup (a container's) whose 60 MB limit leaves the
    # page cache room for part of the 45 MB data set beside the processes; the kernel's
    # reclaim inside the group took the pages, which the host's counters show as refaults
    points = evicted_run("limited", 40_000_000, [1.0, 1.0, 1.0], cache_drops=0.0,
                         file_refault=1_200_000, memory_limit_bytes=60_000_000)  # fmt: skip
    found = rules(make_store(points), "limited")
    evicted = found["dataset_evicted"]
    worst = evicted.evidence["worst"]
    assert (worst["cause"], worst["memory_limit_bytes"]) == ("memory_limit", 60_000_000)
    assert "The run's own memory limit took them: its ranks on node1 may use 60.0 MB" in (
        evicted.explanation
    )
    assert "DAMON" not in evicted.explanation  # the cause is known: no list of candidates
    # the 45 MB set is smaller than 60 MB but was evicted by the limit: it did not fit
    # beside the processes, so it is not said to fit the limit (nor the RAM)
    fits = found["dataset_fits_in_memory"]
    assert fits.title == (
        "The data set fits in the host's RAM but not in the run's 60.0 MB memory limit"
    )
    assert fits.severity == "info"
    assert fits.evidence["memory_limit_bytes"] == 60_000_000
    assert fits.evidence["dataset_to_memory_ratio"] == 0.75
    assert fits.evidence["evicted_by_limit_epoch"] == worst["epoch"]
    assert fits.evidence["evicted_by_limit_percent"] == worst["evicted_percent"]
    assert "not beside the ranks' own memory" in fits.explanation


def test_a_data_set_larger_than_the_runs_limit_does_not_fit_it(make_store):
    # the data set alone exceeds the run's 30 MB limit: named even without the counters
    points = evicted_run("small", 40_000_000, [0.6, 0.6, 0.6], memory_limit_bytes=30_000_000)
    found = rules(make_store(points), "small")
    fits = found["dataset_fits_in_memory"]
    assert fits.title == (
        "The data set fits in the host's RAM but not in the run's 30.0 MB memory limit"
    )
    assert fits.severity == "info"
    assert fits.evidence["dataset_to_memory_ratio"] == 1.5
    assert fits.evidence["dataset_to_host_memory_ratio"] == 0.002
    assert "fits in a host's RAM" not in fits.explanation
    worst = found["dataset_evicted"].evidence["worst"]
    assert worst["cause"] == "memory_limit"
    assert "the data set's files alone (45.0 MB) exceed it" in found["dataset_evicted"].explanation


def test_a_limit_above_the_hosts_ram_changes_nothing(make_store):
    points = evicted_run("loose", 40_000_000, [1.0, 1.0, 1.0], cache_drops=1 / 30,
                         file_refault=0.0, memory_limit_bytes=10**12)  # fmt: skip
    found = rules(make_store(points), "loose")
    assert found["dataset_evicted"].evidence["worst"]["cause"] == "drop_caches"
    assert found["dataset_fits_in_memory"].title == "The data set fits in a host's RAM"
    assert "memory_limit_bytes" not in found["dataset_fits_in_memory"].evidence
