"""Data sets in the layouts the frameworks really read, synthetic or ILSVRC2012.

Formats (``--format``) and their layouts under the data set directory:

- ``tfrecord``: ImageNet-style shards ``train-00000-of-00016`` ... and
  ``validation-00000-of-00004`` ...; each record a ``tf.train.Example`` with
  ``image/encoded`` (JPEG bytes), ``image/class/label`` (int64, 1-based as in ImageNet:
  0 is the background class), ``image/class/text``, ``image/format``, ``image/filename``,
  ``image/height``, ``image/width``; what tf_cnn_benchmarks parses.
- ``recordio``: ``train.rec`` + ``train.idx`` and ``val.rec`` + ``val.idx`` written by
  ``mx.recordio.MXIndexedRecordIO``; each record an ``IRHeader`` (label as float, 0-based)
  packed with the JPEG bytes; what ``mx.io.ImageRecordIter`` reads.
- ``jpeg``: ``train/<class>/<name>.JPEG`` and ``val/<class>/<name>.JPEG`` (ImageNet's train
  layout for both); class index = position of the folder name in sorted order.

``manifest.json`` (written by ``workloads dataset make``) records the format, classes,
image side and, per split, images, bytes and files. A directory without one (a real
ILSVRC2012 copy) is described by scanning it.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from contract.schema import SYNTHETIC_DATA
from workloads.train.synthetic import encode_jpeg, labels_for, make_image

FORMATS = ("tfrecord", "recordio", "jpeg")
SYNTHETIC = SYNTHETIC_DATA
MANIFEST = "manifest.json"
IMAGENET_CLASSES = 1000
JPEG_SUFFIXES = (".jpeg", ".jpg", ".png")

# split -> file stem per format
TFRECORD_SPLITS = {"train": "train", "val": "validation"}
RECORDIO_SPLITS = {"train": "train", "val": "val"}
JPEG_SPLITS = {"train": "train", "val": "val"}

# Which format each framework's input pipeline reads.
FRAMEWORK_FORMAT = {"tensorflow": "tfrecord", "mxnet": "recordio", "pytorch": "jpeg"}


class DatasetError(ValueError):
    """A data set directory that cannot be used as asked."""


@dataclass
class SplitInfo:
    images: int = 0
    bytes: int = 0
    files: list[str] = field(default_factory=list)  # relative to the data set root


@dataclass
class DatasetInfo:
    root: str
    format: str
    classes: int
    image_size: int | None  # side of the stored pictures; None when unknown
    train: SplitInfo
    val: SplitInfo
    synthetic_source: bool = False  # made by ``workloads dataset make``

    def paths(self, split: str) -> list[Path]:
        info = self.train if split == "train" else self.val
        return [Path(self.root) / name for name in info.files]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> DatasetInfo:
        data = dict(data)
        data["train"] = SplitInfo(**data["train"])
        data["val"] = SplitInfo(**data["val"])
        return cls(**data)


def class_name(label: int) -> str:
    """Synset-like folder name, sorted in label order."""
    return f"n{label:08d}"


def tfrecord_shard_name(stem: str, index: int, shards: int) -> str:
    return f"{stem}-{index:05d}-of-{shards:05d}"


# --- writers ---------------------------------------------------------------------------


class _TfRecordWriter:
    """ImageNet-style TFRecord shards through TensorFlow's own writer."""

    def __init__(self, root: Path, split: str, images: int, shards: int) -> None:
        import tensorflow as tf  # heavy: only when writing this format

        self._tf = tf
        self._stem = TFRECORD_SPLITS[split]
        self._shards = max(1, min(shards, images))
        self._per_shard = -(-images // self._shards)  # ceiling
        self._root = root
        self._writer = None
        self._shard = -1
        self.files: list[str] = []

    def add(self, index: int, label: int, jpeg: bytes, size: int) -> None:
        tf = self._tf
        shard = index // self._per_shard
        if shard != self._shard:
            self.close()
            self._shard = shard
            name = tfrecord_shard_name(self._stem, shard, self._shards)
            self.files.append(name)
            self._writer = tf.io.TFRecordWriter(str(self._root / name))

        def bytes_feature(value: bytes) -> tf.train.Feature:
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

        def int_feature(value: int) -> tf.train.Feature:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "image/encoded": bytes_feature(jpeg),
                    "image/format": bytes_feature(b"JPEG"),
                    "image/class/label": int_feature(label + 1),
                    "image/class/text": bytes_feature(class_name(label).encode()),
                    "image/filename": bytes_feature(f"{self._stem}_{index:08d}.JPEG".encode()),
                    "image/height": int_feature(size),
                    "image/width": int_feature(size),
                }
            )
        )
        self._writer.write(example.SerializeToString())

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class _RecordIoWriter:
    """One indexed RecordIO file through MXNet's own writer."""

    def __init__(self, root: Path, split: str, images: int, shards: int) -> None:
        import mxnet as mx  # heavy: only when writing this format

        self._recordio = mx.recordio
        stem = RECORDIO_SPLITS[split]
        self.files = [f"{stem}.rec"]
        self._writer = mx.recordio.MXIndexedRecordIO(
            str(root / f"{stem}.idx"), str(root / f"{stem}.rec"), "w"
        )

    def add(self, index: int, label: int, jpeg: bytes, size: int) -> None:
        header = self._recordio.IRHeader(0, float(label), index, 0)
        self._writer.write_idx(index, self._recordio.pack(header, jpeg))

    def close(self) -> None:
        self._writer.close()


class _JpegWriter:
    """One JPEG file per picture in one folder per class."""

    def __init__(self, root: Path, split: str, images: int, shards: int) -> None:
        self._root = root
        self._split = JPEG_SPLITS[split]
        self.files: list[str] = []

    def add(self, index: int, label: int, jpeg: bytes, size: int) -> None:
        folder = self._root / self._split / class_name(label)
        folder.mkdir(parents=True, exist_ok=True)
        prefix = class_name(label) if self._split == "train" else "ILSVRC2012_val"
        relative = f"{self._split}/{class_name(label)}/{prefix}_{index:08d}.JPEG"
        (self._root / relative).write_bytes(jpeg)
        self.files.append(relative)

    def close(self) -> None:
        pass


WRITERS = {"tfrecord": _TfRecordWriter, "recordio": _RecordIoWriter, "jpeg": _JpegWriter}


def make_dataset(
    out: Path,
    data_format: str,
    images: int,
    classes: int,
    image_size: int,
    val_images: int = 0,
    shards: int = 16,
    seed: int = 0,
    progress: bool = True,
) -> DatasetInfo:
    """Write a synthetic data set and its manifest; returns what was written."""
    if data_format not in WRITERS:
        raise DatasetError(f"unknown format {data_format!r}: choose one of {', '.join(FORMATS)}")
    if images < 1 or classes < 1 or image_size < 8:
        raise DatasetError("need --images >= 1, --classes >= 1 and --image-size >= 8")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise DatasetError(f"{out} is not empty: choose a new --out directory")
    splits = {}
    for split, count, split_seed in (("train", images, seed), ("val", val_images, seed + 1)):
        if count <= 0:
            splits[split] = SplitInfo()
            continue
        writer = WRITERS[data_format](out, split, count, shards)
        rng = np.random.default_rng(split_seed)
        labels = labels_for(count, classes, split_seed)
        for index, label in _progress(enumerate(labels), count, f"{split} {data_format}", progress):
            pixels = make_image(label, classes, image_size, rng)
            writer.add(index, label, encode_jpeg(pixels), image_size)
        writer.close()
        total = sum((out / name).stat().st_size for name in writer.files)
        splits[split] = SplitInfo(images=count, bytes=total, files=list(writer.files))
    info = DatasetInfo(
        root=str(out),
        format=data_format,
        classes=classes,
        image_size=image_size,
        train=splits["train"],
        val=splits["val"],
        synthetic_source=True,
    )
    manifest = info.to_json()
    manifest.pop("root")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return info


def _progress(items: Iterator, total: int, label: str, enabled: bool) -> Iterator:
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, desc=label, unit="img", leave=True)


# --- reading what a directory holds ------------------------------------------------------


def count_tfrecords(path: Path) -> int:
    """Records in one TFRecord file, by walking the length headers (no TensorFlow).

    Each record is: uint64 length, uint32 masked CRC of the length, data, uint32 CRC.
    """
    count = 0
    size = path.stat().st_size
    with path.open("rb") as handle:
        offset = 0
        while offset < size:
            header = handle.read(8)
            if len(header) < 8:
                raise DatasetError(f"{path}: truncated record header at byte {offset}")
            (length,) = struct.unpack("<Q", header)
            offset += 8 + 4 + length + 4
            handle.seek(offset)
            count += 1
    if offset != size:
        raise DatasetError(f"{path}: truncated last record")
    return count


def count_idx_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def detect_format(root: Path) -> str | None:
    """The format a directory holds, from its file names; None when it holds none."""
    manifest = root / MANIFEST
    if manifest.is_file():
        try:
            return json.loads(manifest.read_text())["format"]
        except (ValueError, KeyError):
            pass
    if any(root.glob("train-*-of-*")):
        return "tfrecord"
    if any(root.glob("*.rec")):
        return "recordio"
    train = root / "train"
    if train.is_dir() and any(child.is_dir() for child in train.iterdir()):
        return "jpeg"
    return None


def describe(root: Path) -> DatasetInfo:
    """What a data set directory holds (from its manifest, else by scanning it)."""
    if not root.is_dir():
        raise DatasetError(f"data directory {root} does not exist")
    manifest = root / MANIFEST
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        data["root"] = str(root)
        return DatasetInfo.from_json(data)
    data_format = detect_format(root)
    if data_format == "tfrecord":
        return _scan_tfrecord(root)
    if data_format == "recordio":
        return _scan_recordio(root)
    if data_format == "jpeg":
        return _scan_jpeg(root)
    raise DatasetError(
        f"{root} holds no data set: expected TFRecord shards (train-00000-of-01024), "
        "a RecordIO train.rec + train.idx, or train/<class>/*.JPEG folders"
    )


def _split_info(root: Path, files: list[Path], images: int) -> SplitInfo:
    return SplitInfo(
        images=images,
        bytes=sum(path.stat().st_size for path in files),
        files=[str(path.relative_to(root)) for path in files],
    )


def _scan_tfrecord(root: Path) -> DatasetInfo:
    splits = {}
    for split, stem in TFRECORD_SPLITS.items():
        files = sorted(root.glob(f"{stem}-*-of-*"))
        splits[split] = _split_info(root, files, sum(count_tfrecords(path) for path in files))
    return DatasetInfo(
        str(root), "tfrecord", IMAGENET_CLASSES, None, splits["train"], splits["val"]
    )


def _scan_recordio(root: Path) -> DatasetInfo:
    splits = {}
    recs = sorted(root.glob("*.rec"))
    for split in ("train", "val"):
        files = [path for path in recs if split in path.stem]
        if split == "train" and not files and len(recs) == 1:
            files = recs  # a lone .rec is the training set
        images = 0
        for path in files:
            index = path.with_suffix(".idx")
            if not index.is_file():
                raise DatasetError(f"{path} has no index {index.name}: rebuild it with im2rec")
            images += count_idx_lines(index)
        splits[split] = _split_info(root, files, images)
    return DatasetInfo(
        str(root), "recordio", IMAGENET_CLASSES, None, splits["train"], splits["val"]
    )


def jpeg_classes(split_dir: Path) -> list[str]:
    return sorted(child.name for child in split_dir.iterdir() if child.is_dir())


def jpeg_files(split_dir: Path) -> list[tuple[Path, int]]:
    """(file, class index) for every picture under split_dir/<class>/, in sorted order."""
    pairs = []
    for label, name in enumerate(jpeg_classes(split_dir)):
        for entry in sorted(os.scandir(split_dir / name), key=lambda e: e.name):
            if entry.is_file() and entry.name.lower().endswith(JPEG_SUFFIXES):
                pairs.append((Path(entry.path), label))
    return pairs


def _scan_jpeg(root: Path) -> DatasetInfo:
    splits = {}
    for split, folder in JPEG_SPLITS.items():
        files = [path for path, _ in jpeg_files(root / folder)] if (root / folder).is_dir() else []
        splits[split] = _split_info(root, files, len(files))
    classes = len(jpeg_classes(root / "train"))
    return DatasetInfo(str(root), "jpeg", classes, None, splits["train"], splits["val"])


def check_format_for(framework: str, info: DatasetInfo) -> None:
    """Raise a clear error when the framework's pipeline cannot read this format."""
    wanted = FRAMEWORK_FORMAT[framework]
    if info.format != wanted:
        raise DatasetError(
            f"{framework} reads {wanted} data but {info.root} holds {info.format}: make one "
            f"with `workloads dataset make --format {wanted} ...` or use --synthetic"
        )
    if info.train.images == 0:
        raise DatasetError(f"{info.root} holds no training images")


# --- checking the files before a run ------------------------------------------------------

RECORDIO_MAGIC = 0xCED7230A
JPEG_TAIL_BYTES = 4096  # where a complete JPEG's end-of-image marker must be
OTHER_PICTURE_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")  # PIL reads them
VERIFY_PROGRESS_FILES = 2000  # a progress bar from this many files on
VERIFY_SAMPLE_FILES = 100  # files whose page-cache residency says cold or warm


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset ("masked")."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _no_readahead(handle) -> None:
    """Read only the pages asked for: readahead would pull whole pictures and records into
    the page cache, and epoch 1 would then not read them from storage."""
    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_RANDOM)


def _opened(path: Path, evict_after: bool):
    """``path`` opened for a check without readahead; with ``evict_after`` its pages leave
    the page cache when it is closed (the data set was cold: keep it so)."""
    handle = path.open("rb")
    _no_readahead(handle)
    if evict_after:
        original_close = handle.close

        def close() -> None:
            with contextlib.suppress(OSError, ValueError):
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            original_close()

        handle.close = close
    return handle


def check_tfrecord_file(path: Path, evict_after: bool = False) -> int:
    """Walk a TFRecord file's framing: every length header with its checksum, every record
    ending inside the file, the file ending on a record boundary; the records counted. The
    records' contents are not read (TensorFlow checks their CRCs as it reads them)."""
    size = path.stat().st_size
    count = 0
    offset = 0
    with _opened(path, evict_after) as handle:
        while offset < size:
            header = handle.read(12)
            if len(header) < 12:
                raise DatasetError(
                    f"{path}: truncated: record {count + 1} header cut at byte {offset} of {size}"
                )
            length, crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != crc:
                raise DatasetError(
                    f"{path}: damaged: record {count + 1} at byte {offset} has a bad length "
                    "checksum (not a TFRecord file, or overwritten)"
                )
            end = offset + 12 + length + 4
            if end > size:
                raise DatasetError(
                    f"{path}: truncated: record {count + 1} at byte {offset} needs {end} bytes, "
                    f"the file has {size}"
                )
            offset = end
            handle.seek(offset)
            count += 1
    return count


def check_picture_file(path: Path, evict_after: bool = False) -> None:
    """A cheap look at one picture: a JPEG must start with its start-of-image marker and
    end with its end-of-image marker (a cut file has none in its tail: inside compressed
    data 0xFF is always followed by 0x00 or a restart marker); PNG, GIF and BMP pass on
    their signature (ImageNet holds a few such files named .JPEG)."""
    with _opened(path, evict_after) as handle:
        start = handle.read(8)
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - JPEG_TAIL_BYTES))
        tail = handle.read()
    if start.startswith(b"\xff\xd8\xff"):
        if b"\xff\xd9" not in tail:
            raise DatasetError(f"{path}: truncated JPEG: no end-of-image marker ({size} bytes)")
        return
    if start.startswith(OTHER_PICTURE_SIGNATURES):
        return
    raise DatasetError(
        f"{path}: not a picture: it starts with {start[:4].hex(' ')}, not a JPEG's ff d8 ff"
    )


def check_recordio_file(rec: Path, evict_after: bool = False) -> None:
    """Every offset of the .idx points at a record header inside the .rec (magic number,
    length within the file)."""
    index = rec.with_suffix(".idx")
    size = rec.stat().st_size
    with index.open("rb") as lines, _opened(rec, evict_after) as handle:
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                offset = int(fields[-1])
            except ValueError:
                raise DatasetError(f"{index}: line {number} is not 'INDEX OFFSET'") from None
            handle.seek(offset)
            header = handle.read(8)
            if len(header) < 8:
                raise DatasetError(f"{rec}: truncated: record at byte {offset} is cut")
            magic, packed = struct.unpack("<II", header)
            length = packed & ((1 << 29) - 1)
            if magic != RECORDIO_MAGIC:
                raise DatasetError(
                    f"{rec}: damaged: no record at byte {offset} ({index.name} line {number})"
                )
            if offset + 8 + length > size:
                raise DatasetError(
                    f"{rec}: truncated: record at byte {offset} needs {offset + 8 + length} "
                    f"bytes, the file has {size}"
                )


def verify_files(info: DatasetInfo, progress: bool = True) -> None:
    """Check every file of the data set cheaply before a run, naming the first bad one
    (DatasetError): TFRecord framing and length checksums, JPEG start and end markers,
    RecordIO index offsets. With many files, a progress bar.

    Reads go without readahead (a few pages per file). When the data set is cold (under 1 %
    of a sample of its files in the page cache) each file is evicted again after its check,
    so epoch 1 still reads it from storage; a warm data set keeps what it had, plus those
    few pages."""
    from workloads.train.pagecache import residency

    paths = info.paths("train") + info.paths("val")
    if not paths:
        return
    check = {
        "tfrecord": check_tfrecord_file,
        "jpeg": check_picture_file,
        "recordio": check_recordio_file,
    }[info.format]
    sample = paths[:: max(1, len(paths) // VERIFY_SAMPLE_FILES)]
    try:
        cold = residency(sample).fraction < 0.01
    except OSError as error:
        raise DatasetError(f"{info.root}: cannot read its files: {error}") from None
    shown = progress and len(paths) >= VERIFY_PROGRESS_FILES
    items = _progress(iter(paths), len(paths), "checking files", shown)
    for path in items:
        try:
            check(path, evict_after=cold)
        except FileNotFoundError:
            raise DatasetError(f"{path}: listed in the data set but missing") from None
        except OSError as error:
            raise DatasetError(f"{path}: cannot be read: {error.strerror}") from None
