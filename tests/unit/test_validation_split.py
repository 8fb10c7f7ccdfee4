"""A data set's validation split (issue 45, item 6): `workloads dataset make` writes one by
default (a tenth of the training images), and `workloads infer` on a data set without one
stops before any work with one line naming the missing split and how to make it."""

from __future__ import annotations

import time

import pytest

from workloads.cli import default_val_images, main
from workloads.train.datasets import describe, make_dataset

pytest.importorskip("PIL")  # JPEG pictures: the workloads extra's Pillow, not the dev extra's


def test_dataset_make_writes_a_tenth_for_validation_by_default(tmp_path):
    pytest.importorskip("tqdm")  # the maker's progress bar: the workloads extra, not dev's
    assert [default_val_images(n) for n in (1, 4, 256, 12800)] == [1, 1, 26, 1280]
    out = tmp_path / "jpeg"
    args = ["dataset", "make", "--format", "jpeg", "--images", "40", "--classes", "4",
            "--image-size", "8", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    assert describe(out).val.images == 4
    none = tmp_path / "none"
    assert main([*args[:-1], str(none), "--val-images", "0"]) == 0
    assert describe(none).val.images == 0


def test_infer_without_a_validation_split_stops_up_front(tmp_path, capsys):
    data = tmp_path / "jpeg"
    make_dataset(data, "jpeg", images=8, classes=2, image_size=8, val_images=0, progress=False)
    started = time.monotonic()
    code = main(["infer", "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs")])
    assert code == 2
    assert time.monotonic() - started < 2  # before torch is imported or a model exported
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "has no validation split" in line and str(data / "val") in line
    assert "--val-images N" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("val_images", [3])
def test_a_data_set_with_its_split_passes_the_check(tmp_path, val_images):
    from workloads.infer.images import check_splits

    data = tmp_path / "jpeg"
    make_dataset(data, "jpeg", images=8, classes=2, image_size=8, val_images=val_images,
                 progress=False)  # fmt: skip
    check_splits(describe(data))  # no error
