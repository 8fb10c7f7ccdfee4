"""The input wait's cause chosen from measured evidence (issue 42, item 2): storage only where
the ranks' own storage reads are their data set, decode only for a JPEG data set whose decoding
filled the CPUs, else "not known" with what was measured and what was not sent."""

from __future__ import annotations

import pytest

from collector.findings.engine import run_findings
from collector.findings.input import (
    DATASET_READ_SHARE,
    MIN_READ_BYTES_PER_IMAGE,
    _reads_are_the_data_set,
)
from contract.schema import Workload
from tests.support.run_builder import RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

IMAGES_PER_EPOCH = 6400


def loader_run(run_id: str, *, data_format: str, cpu_busy: float, reads: tuple[int, int],
               start: dict[str, object] | None = None) -> RunBuilder:  # fmt: skip
    """Three 100 s epochs of 6,400 images, 45% of each step waiting for input."""
    run = RunBuilder(
        run_id, steps_per_epoch=5, data_format=data_format, run_start_fields=start or {}
    )
    for _ in range(3):
        run.epoch(100, IMAGES_PER_EPOCH, shares=(0.45, 0.45, 0.0), cpu_busy=cpu_busy, reads=reads)
    return run


def input_wait_of(make_store, run: RunBuilder):
    store = make_store(run.points())
    (finding,) = [f for f in run_findings(store, run.run_id) if f.rule == "input_wait"]
    return finding


def test_a_slow_loader_over_tensors_in_memory_is_neither_storage_nor_decode(make_store):
    """The issue's case: 2.8 MB from storage of 1.0 MB read in all (libraries paged in), the
    host's CPUs busy (a torchrun script's ranks spinning): not storage, not decode."""
    run = loader_run("sleepy", data_format="synthetic", cpu_busy=0.95, reads=(2_800_000, 1_000_000))
    finding = input_wait_of(make_store, run)
    evidence = finding.evidence
    assert evidence["cause"] == "undetermined"
    assert evidence["read_bytes_per_image"] == pytest.approx(2_800_000 / IMAGES_PER_EPOCH, abs=1)
    assert evidence["data_format"] == "synthetic"
    assert "loader_workers" not in evidence  # not sent
    assert "not known from what the run sent" in finding.explanation
    assert "438 B per image trained, too few to be its data set" in finding.explanation
    assert "its data format is synthetic, not pictures it decodes" in finding.explanation
    assert "Not sent: the loader's worker count, the training's own CPU time." in (
        finding.explanation
    )
    assert "Storage-bound" not in finding.explanation
    assert "DALI" not in finding.explanation


def test_the_loader_workers_sent_are_named_as_measured(make_store):
    run = loader_run("named", data_format="synthetic", cpu_busy=0.3, reads=(0, 1_000_000),
                     start={Workload.LOADER_WORKERS: 2})  # fmt: skip
    finding = input_wait_of(make_store, run)
    assert finding.evidence["cause"] == "undetermined"
    assert finding.evidence["loader_workers"] == 2
    assert "its loader ran 2 worker processes" in finding.explanation
    assert "the loader's worker count" not in finding.explanation


def test_reads_that_are_the_data_set_are_still_storage(make_store):
    # 40 MB per 6,400 images: 6.2 KB each, over 5% of the data set's 111.6 KB per image
    run = loader_run("disk", data_format="tfrecord", cpu_busy=0.3, reads=(40_000_000, 50_000_000))
    finding = input_wait_of(make_store, run)
    assert finding.evidence["cause"] == "storage"
    assert finding.evidence["training_read_bytes"] == 80_000_000  # the 2 settled epochs
    assert "Storage-bound" in finding.explanation
    assert "Not sent" not in finding.explanation


def test_jpeg_decoding_that_fills_the_cpus_is_still_decode(make_store):
    run = loader_run("jpeg", data_format="jpeg", cpu_busy=0.95, reads=(0, 50_000_000))
    finding = input_wait_of(make_store, run)
    assert finding.evidence["cause"] == "decode"
    assert "Decode-bound" in finding.explanation


def test_records_of_jpeg_pictures_are_decoded_too(make_store):
    """The bundled trainings' TFRecord files hold JPEG bytes their loader decodes."""
    run = loader_run("records", data_format="tfrecord", cpu_busy=0.95, reads=(0, 50_000_000))
    assert input_wait_of(make_store, run).evidence["cause"] == "decode"


def test_saturated_cpus_over_a_format_not_sent_are_not_decode(make_store):
    run = loader_run("unsent", data_format="", cpu_busy=0.95, reads=(0, 50_000_000))
    finding = input_wait_of(make_store, run)
    assert finding.evidence["cause"] == "undetermined"
    assert "data_format" not in finding.evidence
    assert "the data format" in finding.explanation


def test_the_reads_per_image_floor():
    data_set = 111_600.0  # bytes per image of the builder's data set
    assert _reads_are_the_data_set(6_000.0, 10_000.0, 6_000.0, data_set)
    assert not _reads_are_the_data_set(
        5_000.0, 10_000.0, DATASET_READ_SHARE * data_set - 1, data_set
    )
    assert not _reads_are_the_data_set(2.8e6, 1.0e6, 437.5, None)  # under 1 KB per image
    assert _reads_are_the_data_set(2.8e6, 1.0e6, MIN_READ_BYTES_PER_IMAGE, None)
    assert not _reads_are_the_data_set(4_000.0, 10_000.0, 6_000.0, data_set)  # 40% of rchar
    assert not _reads_are_the_data_set(None, 10_000.0, None, data_set)
    # the matrix's cold throttled loop device: its loader read each 2.5 MB file twice, the
    # second time from the page cache, so storage gave 48% of rchar, but the whole data set
    assert _reads_are_the_data_set(40_053_760.0, 82_693_924.0, 2_503_360.0, 2_500_000.0)
