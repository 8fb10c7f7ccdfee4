"""workloads without the heavy frameworks: data sets, events, throughput arithmetic,
page cache, hosts and the launcher's refusals."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contract.point import encode_line
from contract.schema import Event, Workload
from workloads.cli import build_parser
from workloads.launch import frameworks
from workloads.launch.hosts import HostError, HostSlots, check_slots, parse_hosts, placement
from workloads.launch.launcher import UsageError, plan_run
from workloads.launch.summary import ALL_HOSTS, epoch_rows, format_findings, format_profile_table
from workloads.record.events import EventWriter, FileSink, MemorySink, coerce, read_events_file
from workloads.record.spec import RunSpec
from workloads.record.timing import Recorder
from workloads.train import pagecache
from workloads.train.datasets import (
    DatasetError,
    check_format_for,
    count_tfrecords,
    describe,
    detect_format,
    jpeg_files,
    make_dataset,
    tfrecord_shard_name,
)
from workloads.train.synthetic import labels_for, make_image


def test_labels_are_balanced_and_shuffled():
    labels = labels_for(20, 4, seed=3)
    assert sorted(labels) == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5
    assert labels != sorted(labels)
    assert labels_for(20, 4, seed=3) == labels  # same seed, same order


def test_pictures_differ_by_class_more_than_within_it():
    rng = np.random.default_rng(0)
    same = [make_image(1, 4, 32, rng).astype(float).mean(axis=(0, 1)) for _ in range(4)]
    other = make_image(3, 4, 32, rng).astype(float).mean(axis=(0, 1))
    within = max(np.abs(a - b).max() for a in same for b in same)
    between = min(np.abs(a - other).max() for a in same)
    assert make_image(0, 4, 32, rng).shape == (32, 32, 3)
    assert between > within


def test_jpeg_data_set_layout_manifest_and_scan(tmp_path):
    out = tmp_path / "jpeg"
    info = make_dataset(out, "jpeg", images=12, classes=3, image_size=16, val_images=6,
                        progress=False)  # fmt: skip
    assert sorted(p.name for p in (out / "train").iterdir()) == [
        "n00000000", "n00000001", "n00000002"
    ]  # fmt: skip
    pairs = jpeg_files(out / "train")
    assert len(pairs) == 12
    assert [label for _, label in pairs] == [0] * 4 + [1] * 4 + [2] * 4  # 12 / 3 per class
    assert all(path.parent.name == f"n{label:08d}" for path, label in pairs)
    assert info.train.bytes == sum(path.stat().st_size for path, _ in pairs)
    assert info.val.images == 6 and len(jpeg_files(out / "val")) == 6
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["train"]["images"] == 12 and manifest["classes"] == 3
    assert (out / pairs[0][0].relative_to(out)).read_bytes()[:2] == b"\xff\xd8"  # JPEG SOI
    # A real ILSVRC2012 copy has no manifest: scanning finds the same.
    (out / "manifest.json").unlink()
    scanned = describe(out)
    assert (scanned.format, scanned.classes, scanned.train.images, scanned.val.images) == (
        "jpeg", 3, 12, 6
    )  # fmt: skip
    assert scanned.train.bytes == info.train.bytes


def test_make_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(DatasetError, match="not empty"):
        make_dataset(tmp_path, "jpeg", images=1, classes=1, image_size=16, progress=False)


def _tfrecord_frame(data: bytes) -> bytes:
    # uint64 length, uint32 masked CRC of the length, data, uint32 CRC (CRCs unchecked here)
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def test_tfrecords_are_counted_from_their_length_headers(tmp_path):
    shard = tmp_path / tfrecord_shard_name("train", 0, 2)
    assert shard.name == "train-00000-of-00002"
    shard.write_bytes(_tfrecord_frame(b"a" * 10) + _tfrecord_frame(b"") + _tfrecord_frame(b"bc"))
    assert count_tfrecords(shard) == 3
    (tmp_path / "train-00001-of-00002").write_bytes(_tfrecord_frame(b"xyz"))
    (tmp_path / "validation-00000-of-00001").write_bytes(_tfrecord_frame(b"v"))
    info = describe(tmp_path)
    assert info.format == "tfrecord"
    assert (info.train.images, info.val.images) == (4, 1)
    # 3 frames of 16 + 10, 16 + 0, 16 + 2 bytes, and 16 + 3
    assert info.train.bytes == (26 + 16 + 18) + 19
    shard.write_bytes(_tfrecord_frame(b"abc")[:-2])
    with pytest.raises(DatasetError, match="truncated"):
        count_tfrecords(shard)


def test_recordio_directory_is_recognised_by_its_rec_and_idx(tmp_path):
    (tmp_path / "train.rec").write_bytes(b"\0" * 100)
    (tmp_path / "train.idx").write_text("0\t0\n1\t40\n2\t70\n")
    (tmp_path / "val.rec").write_bytes(b"\0" * 30)
    (tmp_path / "val.idx").write_text("0\t0\n")
    info = describe(tmp_path)
    assert (info.format, info.train.images, info.val.images, info.train.bytes) == (
        "recordio", 3, 1, 100
    )  # fmt: skip
    with pytest.raises(DatasetError, match=r"tensorflow reads tfrecord data but .* holds recordio"):
        check_format_for("tensorflow", info)
    check_format_for("mxnet", info)


def test_an_empty_directory_is_no_data_set(tmp_path):
    assert detect_format(tmp_path) is None
    with pytest.raises(DatasetError, match="holds no data set"):
        describe(tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        describe(tmp_path / "missing")


def test_fields_keep_one_type_each():
    assert coerce(Workload.EPOCH, 2.0) == 2 and isinstance(coerce(Workload.EPOCH, 2.0), int)
    assert isinstance(coerce(Workload.DATASET_BYTES, 10), int)
    assert isinstance(coerce(Workload.SECONDS, 1), float)
    assert coerce(Workload.STATE, "finished") == "finished"
    with pytest.raises(KeyError):
        coerce("not_a_field", 1)


def test_event_points_carry_the_contract_tags_and_fields():
    sink = MemorySink()
    writer = EventWriter(sink, "r1", 3, "tensorflow", host="node07", clock_ns=lambda: 42)
    writer.emit(Event.EPOCH_END, {Workload.EPOCH: 1, Workload.SECONDS: 2, Workload.TOP1: None})
    (point,) = sink.points
    assert encode_line(point) == (
        "workload,framework=tensorflow,host=node07,rank=3,run_id=r1 "
        'event="epoch_end",epoch=1i,seconds=2.0 42'
    )


def test_file_sink_round_trips_points(tmp_path):
    path = tmp_path / "events" / "events-rank0.jsonl"
    writer = EventWriter(FileSink(path), "r1", 0, "mxnet", host="h", clock_ns=lambda: 7)
    writer.emit(Event.STEP, {Workload.STEP: 5, Workload.LOSS: 1.5, Workload.IMAGES: 32})
    writer.close()
    (point,) = read_events_file(path)
    assert point.fields == {"event": "step", "step": 5, "loss": 1.5, "images": 32}
    assert isinstance(point.fields["step"], int) and point.time_ns == 7


class FakeClock:
    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = list(durations)

    def __call__(self) -> float:
        return self.now

    def advance(self) -> None:
        self.now += self.durations.pop(0)


def test_warm_up_steps_are_excluded_from_throughput():
    sink = MemorySink()
    writer = EventWriter(sink, "r", 0, "pytorch", host="h", clock_ns=lambda: 0)
    # 5 steps of batch 8 taking 3, 1, 0.5, 0.5, 0.5 s; 2 warm-up steps; a step event every 2
    clock = FakeClock([3, 1, 0.5, 0.5, 0.5])
    recorder = Recorder(
        writer, batch_size=8, warmup_steps=2, step_every=2, clock=clock, read_io=lambda: None,
        read_cpu=lambda: None,
    )  # fmt: skip
    recorder.epoch_start(1)
    for step in range(5):
        clock.advance()
        recorder.step_done(lambda step=step: 10.0 - step)
    stats = recorder.epoch_end(loss=2.5, top1=0.25, top5=0.5)
    # all: 5 x 8 = 40 images in 5.5 s; timed: steps 3..5, 3 x 8 = 24 images in 1.5 s
    assert (stats.steps, stats.images, stats.seconds) == (5, 40, 5.5)
    assert (stats.timed_steps, stats.timed_images, stats.timed_seconds) == (3, 24, 1.5)
    assert stats.images_per_second == 16.0
    events = [p.fields for p in sink.points]
    assert [e["event"] for e in events] == ["epoch_start", "step", "epoch_end"]
    # the 2nd timed step is global step 4: 8 images in 0.5 s, loss read then (10 - 3)
    assert events[1] == {"event": "step", "epoch": 1, "step": 4, "images": 8, "seconds": 0.5,
                         "loss": 7.0}  # fmt: skip
    assert events[2] == {"event": "epoch_end", "epoch": 1, "step": 5, "images": 40,
                         "seconds": 5.5, "timed_images": 24, "timed_seconds": 1.5,
                         "loss": 2.5, "loss_not_finite": 0, "top1": 0.25,
                         "top5": 0.5}  # fmt: skip
    # per-step rates 16, 16, 16 images/s
    assert recorder.summary().startswith("images/sec: 16.0 over 3 timed steps")


def _epoch_end(host: str, rank: int, epoch: int, images: int, seconds: float, top1: float):
    writer = EventWriter(MemorySink(), "r", rank, "tensorflow", host=host, clock_ns=lambda: 0)
    return writer.emit(Event.EPOCH_END, {Workload.EPOCH: epoch, Workload.IMAGES: images,
                                         Workload.SECONDS: seconds,
                                         Workload.TIMED_IMAGES: images,
                                         Workload.TIMED_SECONDS: seconds, Workload.LOSS: 1.0,
                                         Workload.TOP1: top1})  # fmt: skip


def test_epoch_table_sums_rank_rates_per_host_and_run():
    points = [
        _epoch_end("a", 0, 1, 100, 10.0, 0.5),  # 10 images/s
        _epoch_end("a", 1, 1, 100, 5.0, 0.5),  # 20 images/s
        _epoch_end("b", 2, 1, 90, 3.0, 0.5),  # 30 images/s
        _epoch_end("a", 0, 2, 100, 4.0, 0.7),  # 25 images/s
    ]
    rows = epoch_rows(points)
    assert [(r.epoch, r.host, r.ranks, r.images, r.images_per_second) for r in rows] == [
        (1, "a", 2, 200, 30.0),
        (1, "b", 1, 90, 30.0),
        (1, ALL_HOSTS, 3, 290, 60.0),
        (2, "a", 1, 100, 25.0),
        (2, ALL_HOSTS, 1, 100, 25.0),
    ]
    assert rows[-1].top1 == 0.7


def test_hosts_parse_and_slots():
    hosts = parse_hosts("node01:4, node02:2,node03")
    assert hosts == [HostSlots("node01", 4), HostSlots("node02", 2), HostSlots("node03", 1)]
    assert [(h.name, n) for h, n in placement(hosts, 5)] == [("node01", 4), ("node02", 1)]
    check_slots(hosts, 7)
    with pytest.raises(HostError, match="--np 8 is more than the 7 slots"):
        check_slots(hosts, 8)
    for bad in ("node01:0", "node01:x", ":4", "a:1,a:2"):
        with pytest.raises(HostError):
            parse_hosts(bad)
    assert HostSlots("localhost", 1).is_local and not HostSlots("node01", 1).is_local


def test_page_cache_residency_and_eviction(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(os.urandom(3 * pagecache.PAGE_SIZE + 100))
    path.read_bytes()
    assert pagecache.file_resident_bytes(path) == path.stat().st_size  # capped at the size
    pagecache.evict([path])
    assert pagecache.file_resident_bytes(path) == 0
    with path.open("rb") as handle:
        handle.read(pagecache.PAGE_SIZE)  # the first page (readahead may bring more)
    assert pagecache.file_resident_bytes(path) >= pagecache.PAGE_SIZE
    result = pagecache.residency([path, path])
    assert result.total_bytes == 2 * path.stat().st_size and result.files == 2


def test_spec_survives_the_command_line():
    spec = RunSpec(run_id="r", framework="mxnet", batch_size=8, target_top1=0.749)
    assert RunSpec.decode(spec.encode()) == spec
    assert spec.data_format == "synthetic" and spec.synthetic


def _run_args(*argv: str):
    return build_parser().parse_args(["run", *argv])


def test_launcher_refuses_before_training(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="does not exist"):
        plan_run(_run_args("--framework", "pytorch", "--data-dir", str(tmp_path / "none")))
    data = tmp_path / "jpeg"
    make_dataset(data, "jpeg", images=4, classes=2, image_size=16, progress=False)
    with pytest.raises(DatasetError, match="tensorflow reads tfrecord data"):
        plan_run(_run_args("--framework", "tensorflow", "--data-dir", str(data)))
    with pytest.raises(HostError, match="--np 3 is more than the 2 slots"):
        plan_run(_run_args("--framework", "pytorch", "--synthetic", "--np", "3",
                           "--hosts", "localhost:2"))  # fmt: skip
    with pytest.raises(UsageError, match="--profile across hosts needs --collector"):
        plan_run(_run_args("--framework", "pytorch", "--synthetic", "--profile",
                           "--hosts", "node01:1,node02:1"))  # fmt: skip
    with pytest.raises(UsageError, match=r"MXNet 1\.9 Gluon has no bf16"):
        monkeypatch.setattr(frameworks, "check", lambda framework, processes: None)
        plan_run(_run_args("--framework", "mxnet", "--synthetic", "--precision", "bf16"))


def test_a_missing_framework_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(frameworks.MODULES, "mxnet", "mxnet_not_installed_here")
    with pytest.raises(frameworks.FrameworkError) as error:
        frameworks.check("mxnet", 1)
    assert "pip install 'epochscope[mxnet]'" in str(error.value)
    assert "make frameworks" in str(error.value)


def test_horovod_without_the_framework_extension_is_named(monkeypatch, tmp_path):
    # A Horovod install with only the TensorFlow extension (what a build without
    # HOROVOD_WITH_MXNET leaves): horovod/tensorflow/mpi_lib*.so and no mxnet one.
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / "mxnet").mkdir()
    monkeypatch.setattr(frameworks, "horovod_dir", lambda: tmp_path)
    monkeypatch.setattr(frameworks, "is_installed", lambda framework: True)
    assert frameworks.horovod_supports("tensorflow")
    assert not frameworks.horovod_supports("mxnet")
    with pytest.raises(frameworks.FrameworkError, match="horovod built without MXNet"):
        frameworks.check("mxnet", 2)
    frameworks.check("mxnet", 1)  # one process needs no Horovod


def test_cli_prints_the_refusal_and_exits_2(tmp_path, repo_env):
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "run", "--framework", "tensorflow",
         "--data-dir", str(tmp_path / "nowhere")],
        capture_output=True, text=True, env=repo_env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"workloads: data directory {tmp_path / 'nowhere'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_cache_report_counts_the_data_set(tmp_path, repo_env):
    data = tmp_path / "jpeg"
    info = make_dataset(data, "jpeg", images=4, classes=2, image_size=16, val_images=2,
                        progress=False)  # fmt: skip
    for path in info.paths("train") + info.paths("val"):
        path.read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "cache", "report", str(data), "--json"],
        capture_output=True, text=True, env=repo_env, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["total_bytes"] == info.train.bytes + info.val.bytes
    assert report["before_resident_bytes"] == report["total_bytes"]


def test_make_jpeg_from_the_command_line(tmp_path, repo_env):
    out = tmp_path / "ds"
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "dataset", "make", "--format", "jpeg",
         "--images", "6", "--classes", "2", "--image-size", "16", "--out", str(out)],
        capture_output=True, text=True, env=repo_env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "jpeg, 2 classes, train 6 images" in result.stdout
    assert "100%" in result.stderr  # tqdm progress
    assert Path(out / "manifest.json").is_file()


def _report_row(host: str, epoch: int, disk: int | None, nfs: int | None = None) -> dict:
    return {
        "host": host, "epoch": epoch, "seconds": 20.0, "images": 256,
        "images_per_second": 12.8, "disk_read_bytes": disk, "disk_read_mbps": None,
        "nfs_server_read_bytes": nfs, "page_cache_delta_bytes": 45_000_000,
        "cpu_util_percent": 99.4, "iowait_percent": 0.25,
    }  # fmt: skip


def test_profile_table_shows_the_input_columns_per_epoch():
    rows = [_report_row("vm", 1, 47_185_816), _report_row("*", 1, 47_185_816),
            _report_row("vm", 2, 608_000), _report_row("*", 2, 608_000)]  # fmt: skip
    lines = format_profile_table(rows).splitlines()

    def cells(line: str) -> list[str]:  # columns are at least two spaces apart
        return re.split(r"\s{2,}", line.strip())

    # one host: its rows only (the run's "*" rows would repeat them); no NFS column
    assert len(lines) == 3 and "NFS" not in lines[0] and "*" not in "".join(lines)
    # headed and written as `collector report` does (contract.columns)
    assert cells(lines[0]) == [
        "epoch", "host", "s", "images", "img/s", "disk read", "disk MB/s", "cache Δ", "CPU %",
        "iowait %",
    ]  # fmt: skip
    # 47,185,816 bytes = 47.2 MB; 45,000,000 = 45.0 MB; 99.4 % -> 99.4
    assert cells(lines[1]) == [
        "1", "vm", "20.0", "256", "12.8", "47.2 MB", "–", "45.0 MB", "99.4", "0.2"
    ]  # fmt: skip
    assert cells(lines[2])[5] == "608.0 kB"
    two_hosts = [_report_row("n1", 1, 1_000_000, 2_500_000), _report_row("n2", 1, 0, 0),
                 _report_row("*", 1, 1_000_000, 2_500_000)]  # fmt: skip
    lines = format_profile_table(two_hosts).splitlines()
    assert "NFS server" in lines[0]
    assert [cells(line)[1] for line in lines[1:]] == ["n1", "n2", "*"]
    assert cells(lines[1])[7] == "2.5 MB"
    # the training's own reads (/proc/<pid>/io of its ranks), where the ranks sent them
    own = [
        dict(row, training_read_bytes=value)
        for row, value in zip(rows, (9_600_000, 9_600_000, 0, 0), strict=True)
    ]
    lines = format_profile_table(own).splitlines()
    assert cells(lines[0])[7] == "own read"
    assert [cells(line)[7] for line in lines[1:]] == ["9.6 MB", "0 B"]
    assert format_findings([]) == "No findings."


def test_profile_table_shows_the_step_split_where_the_run_has_an_anatomy():
    """The step anatomy is the headline: input %, compute %, comm % and AU % (contract.columns'
    headings) close the `--profile` summary when the run's steps carried one."""
    rows = [dict(_report_row("vm", 1, 1_000), input_wait_percent=61.25, compute_percent=30.5,
                 communication_percent=0.0),
            dict(_report_row("vm", 2, 2_000), input_wait_percent=None, compute_percent=None,
                 communication_percent=None)]  # fmt: skip
    lines = format_profile_table(rows).splitlines()
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines]
    assert cells[0][-4:] == ["input %", "compute %", "comm %", "AU %"]
    # 0 is a reading: shown, not "–"; AU needs the timed steps' input wait, not sent here
    assert cells[1][-4:] == ["61.2", "30.5", "0.0", "–"]
    assert cells[2][-4:] == ["–", "–", "–", "–"]  # an epoch without the anatomy's fields
    # no step anatomy anywhere (--no-anatomy, a loop nothing timed): no step columns
    plain = format_profile_table([_report_row("vm", 1, 1_000)]).splitlines()[0]
    assert "input %" not in plain and "comm %" not in plain and "AU %" not in plain


def test_cache_drop_evicts_the_data_set_only_and_says_so(tmp_path, repo_env):
    """The default drop leaves the rest of the page cache alone (libraries, other jobs'
    files): `--drop-caches` as root used to empty the whole node's cache."""
    data = tmp_path / "jpeg"
    info = make_dataset(data, "jpeg", images=4, classes=2, image_size=16, val_images=2,
                        progress=False)  # fmt: skip
    bystander = tmp_path / "someone-elses-file"
    bystander.write_bytes(os.urandom(8 * pagecache.PAGE_SIZE))
    for path in [*info.paths("train"), *info.paths("val"), bystander]:
        path.read_bytes()
    assert pagecache.file_resident_bytes(bystander) == bystander.stat().st_size
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "cache", "drop", str(data), "--json"],
        capture_output=True, text=True, env=repo_env, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["after_resident_bytes"] == 0
    assert report["method"].startswith("data set evicted (posix_fadvise DONTNEED on 6 files")
    assert pagecache.file_resident_bytes(bystander) == bystander.stat().st_size  # untouched
    text = subprocess.run(
        [sys.executable, "-m", "workloads", "cache", "drop", str(data)],
        capture_output=True, text=True, env=repo_env, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "the rest of the page cache untouched" in text


def test_drop_caches_takes_dataset_by_default_and_node_when_asked():
    from workloads.cli import build_parser

    def parsed(*extra: str):
        return build_parser().parse_args(["run", "--framework", "pytorch", "--synthetic", *extra])

    assert parsed().drop_caches is None
    assert parsed("--drop-caches").drop_caches == "dataset"
    assert parsed("--drop-caches", "--epochs", "2").drop_caches == "dataset"
    assert parsed("--drop-caches", "node").drop_caches == "node"


def test_pytorch_ranks_make_openmp_threads_sleep_unless_the_user_chose():
    """torch's OpenMP threads wait passively (bench/anatomy/openmp_wait.py: spinning made a
    1-process step 10x slower on a shared machine); a policy the user set is kept, and once
    torch is loaded the policy can no longer change, so nothing is claimed. (A real rank's
    libgomp reports the policy in tests/system/test_workloads_frameworks.py.)"""
    from workloads.train.torch_train import openmp_threads_sleep

    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert not openmp_threads_sleep(chosen)
    assert chosen == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert openmp_threads_sleep({"OMP_WAIT_POLICY": "passive"})
    script = (
        "import sys, os\n"
        "from workloads.train.torch_train import openmp_threads_sleep\n"
        "env = {}\n"
        "sys.modules.setdefault('torch', None) if sys.argv[1] == 'loaded' else None\n"
        "print(openmp_threads_sleep(env), env)\n"
    )
    for state, expected in (
        ("fresh", "True {'OMP_WAIT_POLICY': 'PASSIVE'}"),
        ("loaded", "False {}"),
    ):
        result = subprocess.run(
            [sys.executable, "-c", script, state], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert result.stdout.strip() == expected
