"""``workloads infer``: the command line, the run and its events.

    workloads infer --data-dir DIR [--checkpoint RUN_DIR|FILE] [--precision fp32,int8]
                    [--batch-sizes 1,8,32] [--min-seconds 3] [--timed-batches 50]
                    [--profile | --collector URL --token-file F]

Events (``contract.schema.Workload``, framework tag ``onnxruntime``, rank 0): ``run_start``
with the configuration (model, image size, weights, execution provider, INT8 format,
validation and calibration images), one ``inference`` event per precision and batch size
(``timed_images``, ``timed_seconds``, ``timed_batches``, latency percentiles and their
spread p90/p10, ``top1``), ``run_end``. Each measurement times at least ``--timed-batches``
batches and at least ``--min-seconds`` seconds, whichever takes longer. They go
where a training's go: ``--profile`` starts a collector and an agent for the run (the
agent samples the node beside it), ``--collector`` sends them through the disk-spooled
shipper, and with neither they are written to ``<runs-dir>/<run-id>/events/`` for
``workloads resend``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contract.schema import INFERENCE_FRAMEWORK, Event, InferencePrecision, RunState, Workload
from workloads.record.spec import (
    MODELS,
    run_id_arg,
    run_spool_root,
    token_or_exit,
    token_source,
)

DEFAULT_BATCH_SIZES = (1, 8, 32)
DEFAULT_CALIBRATION_IMAGES = 64
DEFAULT_WARMUP_BATCHES = 3
DEFAULT_TIMED_BATCHES = 50  # the least; as many more as --min-seconds takes
DEFAULT_MIN_SECONDS = 3.0
INITIALISED = "initialised"  # the weights field when no checkpoint was given


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give batch sizes as 1,8,32") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes must be >= 1")
    return sizes


def _precisions(text: str) -> tuple[str, ...]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if names == ["both"]:
        return InferencePrecision.ALL
    unknown = [name for name in names if name not in InferencePrecision.ALL]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: precisions are fp32, int8, fp32,int8 or both")
    return tuple(p for p in InferencePrecision.ALL if p in names)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, e.g. 3") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds (got {text})")
    return value


def add_parser(commands) -> None:
    infer = commands.add_parser(
        "infer", help="FP32 vs INT8 inference of the PyTorch ResNet-50 with ONNX Runtime"
    )
    infer.add_argument("--model", default="resnet50", choices=MODELS)
    infer.add_argument("--data-dir", required=True, type=Path, help="JPEG data set (train, val)")
    infer.add_argument(
        "--checkpoint",
        type=Path,
        help="a PyTorch run's directory (runs/RUN) or its checkpoint.pt; "
        "default: freshly initialised weights (top-1 is then chance)",
    )
    infer.add_argument(
        "--precision",
        type=_precisions,
        default=InferencePrecision.ALL,
        help="fp32, int8, or both (default both)",
    )
    infer.add_argument(
        "--batch-sizes", type=_batch_sizes, default=DEFAULT_BATCH_SIZES, help="default 1,8,32"
    )
    infer.add_argument(
        "--image-size",
        type=_positive,
        help="default: the checkpoint's, else the data set's, else 224",
    )
    infer.add_argument("--warmup-batches", type=int, default=DEFAULT_WARMUP_BATCHES)
    infer.add_argument(
        "--timed-batches",
        type=_positive,
        default=DEFAULT_TIMED_BATCHES,
        help=f"the least batches each measurement times (default {DEFAULT_TIMED_BATCHES})",
    )
    infer.add_argument(
        "--min-seconds",
        type=_seconds,
        default=DEFAULT_MIN_SECONDS,
        help="the least time each measurement times, going round the pictures "
        f"(default {DEFAULT_MIN_SECONDS:g}); with --timed-batches, whichever takes longer",
    )
    infer.add_argument(
        "--calibration-images",
        type=_positive,
        default=DEFAULT_CALIBRATION_IMAGES,
        help="training pictures the INT8 ranges are calibrated on",
    )
    infer.add_argument(
        "--val-images", type=_positive, help="validation pictures for top-1 (default: all)"
    )
    infer.add_argument(
        "--int8-format",
        choices=("auto", "qdq", "qoperator"),
        default="auto",
        help="auto: time both briefly, keep the faster (reported)",
    )
    infer.add_argument("--threads", type=_positive, help="ONNX Runtime threads (default: all)")
    infer.add_argument("--profile", action="store_true", help="collect node metrics beside it")
    infer.add_argument("--collector", help="collector URL (InfluxDB v2 write API)")
    infer.add_argument("--token-file", type=Path, help="file holding the collector token")
    infer.add_argument("--run-id", type=run_id_arg, help="default: infer-<UTC time>")
    infer.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default ./runs")
    infer.add_argument("--seed", type=int, default=0)


@dataclass
class Prepared:
    """The models and pictures of a run, made before anything is timed."""

    paths: dict[str, Path]  # precision -> ONNX file
    int8_format: str
    format_trial_seconds: dict[str, float]
    weights: str
    image_size: int
    validation: object  # images.Images
    calibration_images: int
    model_name: str  # resnet50, or a narrowed network's shape (a checkpoint's)


def new_run_id() -> str:
    return "infer-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def _log(message: str) -> None:
    print(f"workloads infer: {message}", file=sys.stderr, flush=True)


def prepare(args: argparse.Namespace, workdir: Path) -> Prepared:
    import torch

    from workloads.infer import images, model
    from workloads.train.checkpoint import Architecture, load_checkpoint
    from workloads.train.datasets import describe

    info = describe(args.data_dir)
    images.split_dir(info, "train")  # a clear error for a TFRecord / RecordIO data set now
    if args.checkpoint is not None:
        checkpoint = load_checkpoint(args.checkpoint)
        architecture = checkpoint.architecture
        if architecture.num_classes != info.classes:
            raise ValueError(
                f"{checkpoint.path} classifies {architecture.num_classes} classes but "
                f"{info.root} has {info.classes}"
            )
        network = architecture.build()
        network.load_state_dict(checkpoint.state_dict)
        model_name = architecture.name
        weights = f"{checkpoint.path} (epoch {checkpoint.epoch})"
        image_size = args.image_size or architecture.image_size
    else:
        torch.manual_seed(args.seed)
        network = Architecture(num_classes=info.classes).build()
        model_name = args.model
        weights = INITIALISED
        image_size = args.image_size or info.image_size or Architecture.image_size
        _log(
            "no --checkpoint: freshly initialised weights, so top-1 is chance "
            f"(1/{info.classes}); give --checkpoint runs/RUN of a `workloads run "
            "--framework pytorch` for a trained model"
        )
    paths = {InferencePrecision.FP32: model.export_onnx(network, image_size, workdir / "fp32.onnx")}
    validation = images.load_split(info, "val", image_size, limit=args.val_images, seed=args.seed)
    calibration_images = 0
    int8_format, trial = "", {}
    if InferencePrecision.INT8 in args.precision:
        calibration = images.load_split(
            info, "train", image_size, limit=args.calibration_images, seed=args.seed
        )
        calibration_images = len(calibration)
        formats = model.INT8_FORMATS if args.int8_format == "auto" else (args.int8_format,)
        candidates = {
            name: model.quantize_int8(
                paths[InferencePrecision.FP32],
                calibration.pixels,
                name,
                workdir / f"int8-{name}.onnx",
            )
            for name in formats
        }
        int8_format = formats[0]
        if len(candidates) > 1:
            trial_batch = validation.pixels[: max(args.batch_sizes)]
            int8_format, trial = model.faster_int8_format(candidates, trial_batch)
            _log(
                "INT8 as QDQ vs QOperator, 3 batches of "
                f"{len(trial_batch)}: {trial['qdq']:.3f} s vs {trial['qoperator']:.3f} s; "
                f"keeping {int8_format}"
            )
        paths[InferencePrecision.INT8] = candidates[int8_format]
    return Prepared(
        paths, int8_format, trial, weights, image_size, validation, calibration_images, model_name
    )


def _sink(args: argparse.Namespace, run_id: str, runs_dir: Path, profile):
    from workloads.record.events import FileSink, ShipperSink

    spool = run_spool_root(runs_dir, run_id) / "rank0"
    if profile is not None:
        return ShipperSink(profile.url, None, spool)
    if args.collector:
        return ShipperSink(args.collector, token_or_exit(args.token_file), spool)
    return FileSink(runs_dir / run_id / "events" / "events-rank0.jsonl")


def run(args: argparse.Namespace) -> int:
    from workloads.train.datasets import DatasetError

    run_id = args.run_id or new_run_id()
    runs_dir = args.runs_dir.resolve()
    workdir = runs_dir / run_id
    if args.profile and args.collector:
        _log("give --profile (a collector for this run) or --collector URL, not both")
        return 2
    try:
        from workloads.infer.images import check_splits
        from workloads.train.datasets import describe

        check_splits(describe(args.data_dir))
    except DatasetError as error:
        _log(str(error))
        return 2
    if args.collector:
        from workloads.launch.preflight import CollectorUnusable, check_collector

        try:
            check_collector(
                args.collector,
                token_or_exit(args.token_file),
                token_source(args.token_file),
                socket.gethostname(),
            )
        except CollectorUnusable as error:
            _log(str(error))
            return 2
    try:
        _log("exporting to ONNX, quantising, reading the pictures")
        prepared = prepare(args, workdir)
        from workloads.infer.model import skipped_providers  # after torch loaded CUDA's libs

        for name, why in skipped_providers().items():
            _log(f"{name} is in this onnxruntime but does not load here, left out: {why}")
    except (DatasetError, ValueError, OSError) as error:
        _log(str(error))
        return 2
    profile = None
    if args.profile:
        from workloads.launch.local_stack import EmbeddedProfile

        profile = EmbeddedProfile(run_id, runs_dir).start()
    try:
        delivered = measure_and_emit(
            args, run_id, prepared, _sink(args, run_id, runs_dir, profile), profile
        )
    finally:
        if profile is not None:
            profile.stop()
    return print_result(args, run_id, runs_dir, profile, delivered)


def measure_and_emit(
    args: argparse.Namespace, run_id: str, prepared: Prepared, sink, profile
) -> bool:
    """Run every measurement, FP32 and INT8 side by side per batch size, as events."""
    from tqdm import tqdm

    from workloads.infer import measure, model
    from workloads.record.events import AgentEdges, EventWriter

    edges = AgentEdges(profile.agent_port) if profile is not None else AgentEdges.from_environment()
    writer = EventWriter(sink, run_id, 0, INFERENCE_FRAMEWORK, edges=edges)
    sessions = {p: model.open_session(path, args.threads) for p, path in prepared.paths.items()}
    provider = sessions[args.precision[0]].provider
    validation = prepared.validation
    writer.emit(
        Event.RUN_START,
        {
            Workload.MODEL: prepared.model_name,
            Workload.BATCH_SIZE: max(args.batch_sizes),
            Workload.WORLD_SIZE: 1,
            Workload.LOCAL_SIZE: 1,
            Workload.PRECISION: ",".join(args.precision),
            Workload.DATA_FORMAT: "jpeg",
            Workload.IMAGE_SIZE: prepared.image_size,
            Workload.HOST_MEMORY_BYTES: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            Workload.WARMUP_BATCHES: args.warmup_batches,
            Workload.VALIDATION_IMAGES: len(validation),
            Workload.CALIBRATION_IMAGES: prepared.calibration_images,
            Workload.EXECUTION_PROVIDER: provider,
            Workload.INT8_FORMAT: prepared.int8_format or None,
            Workload.WEIGHTS: prepared.weights,
        },
    )
    state = RunState.FAILED
    try:
        accuracy = {
            precision: measure.top1(
                session.run, validation.pixels, validation.labels, max(args.batch_sizes)
            )
            for precision, session in sessions.items()
        }
        plan = [(b, p) for b in args.batch_sizes for p in args.precision]
        for batch_size, precision in tqdm(
            plan, desc="timing", unit="measurement", disable=not sys.stderr.isatty()
        ):
            timing = measure.time_batches(
                sessions[precision].run,
                validation.pixels,
                batch_size,
                args.warmup_batches,
                min_batches=args.timed_batches,
                min_seconds=args.min_seconds,
            )
            writer.emit(
                Event.INFERENCE,
                {
                    Workload.PRECISION: precision,
                    Workload.BATCH_SIZE: batch_size,
                    Workload.WARMUP_BATCHES: args.warmup_batches,
                    Workload.TIMED_IMAGES: timing.timed.images,
                    Workload.TIMED_SECONDS: timing.timed.seconds,
                    Workload.TIMED_BATCHES: timing.timed_batches,
                    Workload.MIN_TIMED_SECONDS: args.min_seconds,
                    Workload.LATENCY_P10_SECONDS: timing.latency_percentile(10),
                    Workload.LATENCY_P50_SECONDS: timing.latency_percentile(50),
                    Workload.LATENCY_P90_SECONDS: timing.latency_percentile(90),
                    Workload.LATENCY_P99_SECONDS: timing.latency_percentile(99),
                    Workload.LATENCY_SPREAD: timing.spread,
                    Workload.TOP1: accuracy[precision],
                    Workload.EXECUTION_PROVIDER: sessions[precision].provider,
                },
            )
        state = RunState.FINISHED
    finally:
        writer.emit(Event.RUN_END, {Workload.STATE: state})
        delivered = writer.close(timeout=60.0)
    return delivered


def print_result(args, run_id: str, runs_dir: Path, profile, delivered: bool) -> int:
    """The run's table, made by the collector's one computation
    (``collector.analysis.inference``)."""
    if not delivered:
        spool = run_spool_root(runs_dir, run_id) / "rank0"
        _log(
            f"events of {run_id} are not all delivered; they wait in {spool}: "
            f"`workloads resend --spool {spool} --collector URL`"
        )
        return 3
    if profile is not None:
        _print_table(profile.db, run_id)
        print(f"dashboard: dashboard serve --db {profile.db}  (page: inference)")
        return 0
    if args.collector:
        from collector.api.client import RemoteError, fetch_view

        try:
            sys.stdout.write(
                fetch_view(
                    args.collector,
                    "inference",
                    {"run_id": run_id, "format": "table"},
                    token_or_exit(args.token_file),
                )
            )
        except RemoteError as error:
            _log(f"the events arrived, but the table could not be read back: {error}")
        return 0
    import tempfile

    from workloads.record.events import read_events_file

    events_file = runs_dir / run_id / "events" / "events-rank0.jsonl"
    with tempfile.TemporaryDirectory() as scratch:  # the collector's own store, for a moment
        from collector.store import SqliteStore

        store = SqliteStore(Path(scratch) / "events.sqlite")
        try:
            store.write_points(read_events_file(events_file))
        finally:
            store.close()
        _print_table(Path(scratch) / "events.sqlite", run_id)
    print(
        f"events of run {run_id} are in {events_file.parent}; deliver them with "
        f"`workloads resend --events {events_file.parent} --collector URL`"
    )
    return 0


def _print_table(db: Path, run_id: str) -> None:
    """``collector inference RUN`` on a store: the one computation, printed."""
    from collector.store import SqliteStore
    from collector.views.inference import print_inference

    store = SqliteStore(db)
    try:
        print_inference(store, argparse.Namespace(run_id=run_id, format="table"), sys.stdout)
    finally:
        store.close()
