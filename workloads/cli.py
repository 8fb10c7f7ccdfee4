"""``workloads`` command line: make data sets, run trainings, manage the page cache.

    workloads dataset make --format tfrecord|recordio|jpeg --images N --classes K
                           --image-size S --out DIR [--val-images M] [--shards 16]
    workloads dataset describe DIR
    workloads run --framework tensorflow|mxnet|pytorch [--data-dir D | --synthetic] ...
    workloads infer --data-dir D [--checkpoint RUN_DIR] [--precision fp32,int8]
                    [--batch-sizes 1,8,32] [--profile | --collector URL]
                                             (FP32 vs INT8 inference, ONNX Runtime)
    workloads cache report|drop DIR          (page-cache residency of a data set)
    workloads profile [--collector URL] [--data-dir D --drop-caches] -- COMMAND [ARGS]
    workloads resend --spool DIR | --events DIR --collector URL [--token-file F]
                                             (undelivered events; exit 0 once all arrived)
    workloads check-collector --collector URL [--token-file F]
                                             (takes it this host's writes? 0 yes, 2 no)
    workloads slurm task-prolog|epilog [--config /etc/epochscope/slurm.toml]
                                             (Slurm TaskProlog / Epilog: docs/slurm.md)
    workloads worker --spec ...              (one rank; started by the launcher)

Heavy frameworks are imported only by the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contract.commandline import Parser, quiet_broken_pipe
from workloads.launch.node_samples import add_samples_wait
from workloads.launch.preflight import collector_url
from workloads.record.spec import (
    FRAMEWORKS,
    MODELS,
    PRECISIONS,
    run_id_arg,
    token_or_exit,
    token_source,
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


VALIDATION_SHARE = 0.1  # of the training images, when --val-images is not given


def default_val_images(train_images: int) -> int:
    """The validation images `dataset make` writes unless told: a tenth of the training
    images, at least one, so `workloads run` reports top-1 and `workloads infer` has its
    split (before, 0 made neither possible)."""
    return max(1, round(train_images * VALIDATION_SHARE))


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if value > 1:
        value /= 100  # 74.9 means 74.9 %
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction 0..1 or a percentage (got {text})")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="workloads", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    dataset = commands.add_parser("dataset", help="make or describe a data set")
    dataset_commands = dataset.add_subparsers(dest="dataset_command", required=True)
    make = dataset_commands.add_parser("make", help="write a synthetic ImageNet-like data set")
    make.add_argument("--format", required=True, choices=("tfrecord", "recordio", "jpeg"))
    make.add_argument("--images", required=True, type=_positive, help="training images")
    make.add_argument("--classes", type=_positive, default=10)
    make.add_argument("--image-size", type=_positive, default=224, help="side in pixels")
    make.add_argument("--out", required=True, type=Path)
    make.add_argument(
        "--val-images",
        type=_non_negative,
        default=None,
        help="validation images (default: 10%% of --images, at least 1; 0 for none)",
    )
    make.add_argument("--shards", type=_positive, default=16, help="TFRecord files per split")
    make.add_argument("--seed", type=int, default=0)
    describe = dataset_commands.add_parser("describe", help="what a data set directory holds")
    describe.add_argument("dir", type=Path)

    run = commands.add_parser("run", help="train ResNet-50 and emit run/epoch/step events")
    run.add_argument("--framework", required=True, choices=FRAMEWORKS)
    run.add_argument("--model", default="resnet50", choices=MODELS)
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", type=Path, help="TFRecord / RecordIO / JPEG data set")
    source.add_argument("--synthetic", action="store_true", help="random tensors, no input I/O")
    run.add_argument("--batch-size", type=_positive, default=32, help="per rank")
    run.add_argument("--epochs", type=_positive, default=1)
    run.add_argument("--steps-per-epoch", type=_positive, help="default: the data set once")
    run.add_argument("--image-size", type=_positive, help="default: the data set's, else 224")
    run.add_argument("--num-classes", type=_positive, help="default: the data set's")
    run.add_argument("--precision", choices=PRECISIONS, default="fp32")
    run.add_argument("--np", type=_positive, default=1, help="processes in all")
    run.add_argument("--hosts", help="h1:4,h2:4 (host:slots); default localhost:NP")
    run.add_argument("--profile", action="store_true", help="collect node metrics with the run")
    run.add_argument(
        "--collector", type=collector_url, help="collector URL (InfluxDB v2 write API)"
    )
    run.add_argument("--token", help="collector token (or EPOCHSCOPE_WORKLOAD_TOKEN)")
    run.add_argument("--token-file", type=Path, help="file holding the collector token")
    add_samples_wait(run)
    run.add_argument(
        "--drop-caches",
        nargs="?",
        const="dataset",
        choices=("dataset", "node"),
        help="before training, on every host: evict the data set from the page cache "
        "(the default), or `--drop-caches node`: drop the whole node's page cache (root)",
    )
    run.add_argument(
        "--warmup-steps",
        type=_non_negative,
        help="untimed steps at the start (default: 10, fewer for a short run)",
    )
    run.add_argument(
        "--step-every",
        type=_positive,
        help="a step event every K timed steps (default: about 20 per epoch)",
    )
    run.add_argument("--target-top1", type=_fraction, help="top-1 the run aims for")
    run.add_argument("--learning-rate", type=float, default=0.0125, help="per rank")
    run.add_argument("--loader-workers", type=_positive, default=2, help="input workers/rank")
    run.add_argument("--no-validate", action="store_true", help="skip validation per epoch")
    run.add_argument(
        "--skip-data-check",
        action="store_true",
        help="do not check the data set's files before the run (framing, JPEG markers): "
        "about 0.1 ms per TFRecord record and 0.3 ms per JPEG file on a local disk",
    )
    run.add_argument(
        "--no-anatomy",
        action="store_true",
        help="leave out the step anatomy (input wait/compute/all-reduce): for overhead checks",
    )
    run.add_argument("--run-id", type=run_id_arg, help="default: <framework>-<UTC time>")
    run.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default ./runs")
    run.add_argument("--ssh-user", help="user for SSH to --hosts (default: yours)")
    run.add_argument("--ssh-port", type=int, default=22)
    run.add_argument("--ssh-key", type=Path, help="private key for SSH (default: ~/.ssh)")
    run.add_argument("--agent-port", type=int, default=9711, help="agent /metrics port")
    run.add_argument("--seed", type=int, default=0)

    cache = commands.add_parser(
        "cache",
        help="page-cache residency of a data set",
        description="How much of a data set's files sits in this node's page cache "
        "(mincore), and drop it before a measurement (docs/usage.md#workloads-cache).",
    )
    cache.add_argument(
        "action",
        choices=("report", "drop"),
        help="report: what is cached; drop: evict the data set's files (posix_fadvise "
        "DONTNEED), then report again",
    )
    cache.add_argument("dir", type=Path, help="a data set made by `workloads dataset make`")
    cache.add_argument(
        "--json", action="store_true", help="one JSON object (bytes) instead of the lines"
    )
    cache.add_argument("--node", action="store_true", help="drop: the whole node's page cache")

    resend = commands.add_parser("resend", help="deliver a run's undelivered events")
    what = resend.add_mutually_exclusive_group(required=True)
    what.add_argument("--spool", type=Path, help="a rank's spool directory")
    what.add_argument("--events", type=Path, help="a run's events directory (no collector)")
    resend.add_argument("--collector", required=True, type=collector_url)
    resend.add_argument("--token-file", type=Path, help="default: $EPOCHSCOPE_WORKLOAD_TOKEN")
    resend.add_argument("--timeout", type=float, default=60.0)

    from workloads.autoprofile.command import add_parser as add_profile_parser
    from workloads.infer.command import add_parser as add_infer_parser

    add_infer_parser(commands)

    add_profile_parser(commands)

    check = commands.add_parser("check-collector", help="does the collector take our writes?")
    check.add_argument("--collector", required=True, type=collector_url)
    check.add_argument("--token-file", type=Path, help="default: $EPOCHSCOPE_WORKLOAD_TOKEN")
    check.add_argument(
        "--agent-port",
        type=int,
        help="also warn (stderr, status 0) when the agent on this port pushes elsewhere",
    )

    slurm = commands.add_parser(
        "slurm", help="Slurm TaskProlog/Epilog: workloads slurm task-prolog|epilog [--config F]"
    )
    slurm.add_argument("hook_argv", nargs=argparse.REMAINDER, metavar="task-prolog|epilog ...")

    worker = commands.add_parser("worker", help="one rank (started by workloads run)")
    worker.add_argument("--spec", required=True)
    return parser


def quiet_frameworks() -> None:
    """TensorFlow's C++ start-up lines (CPU instructions, oneDNN, CUDA not found) on every
    run are noise to the user: warnings and errors only, unless the user set the level.
    Not for ``workloads profile``, whose command is the user's own."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str] | None = None) -> int:
    """The command's exit status; quiet when its reader goes away (``... | head``)."""
    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "profile":
        quiet_frameworks()  # inherited by the ranks
    if args.command == "dataset":
        return _dataset(args)
    if args.command == "run":
        from workloads.launch.launcher import run

        return run(args)
    if args.command == "profile":
        from workloads.autoprofile.command import run as profile

        return profile(args)
    if args.command == "infer":
        from workloads.infer.command import run as infer

        return infer(args)
    if args.command == "cache":
        return _cache(args)
    if args.command == "resend":
        return _resend(args)
    if args.command == "check-collector":
        return _check_collector(args)
    if args.command == "slurm":
        from workloads.autoprofile.slurm import main as slurm_main

        return slurm_main(args.hook_argv)
    from workloads.train.worker import main as worker_main

    return worker_main(["--spec", args.spec])


def _dataset(args: argparse.Namespace) -> int:
    from workloads.train.datasets import DatasetError, describe, make_dataset

    try:
        if args.dataset_command == "make":
            info = make_dataset(
                args.out,
                args.format,
                images=args.images,
                classes=args.classes,
                image_size=args.image_size,
                val_images=(
                    default_val_images(args.images) if args.val_images is None else args.val_images
                ),
                shards=args.shards,
                seed=args.seed,
            )
        else:
            info = describe(args.dir)
    except DatasetError as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    print(
        f"{info.root}: {info.format}, {info.classes} classes, "
        f"train {info.train.images} images {info.train.bytes} bytes in {len(info.train.files)} "
        f"files, validation {info.val.images} images {info.val.bytes} bytes"
    )
    return 0


def _cache(args: argparse.Namespace) -> int:
    from workloads.train import pagecache
    from workloads.train.datasets import DatasetError, describe

    try:
        info = describe(args.dir)
    except DatasetError as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    paths = info.paths("train") + info.paths("val")
    result: dict[str, object] = {}
    before = pagecache.residency(paths)
    result["before_resident_bytes"] = before.resident_bytes
    result["total_bytes"] = before.total_bytes
    if args.action == "drop":
        result["method"] = pagecache.drop(paths, node=args.node)
        result["after_resident_bytes"] = pagecache.residency(paths).resident_bytes
    if args.json:
        print(json.dumps(result))
    else:
        print(f"before: {before.describe()}")
        if args.action == "drop":
            after = pagecache.residency(paths)
            print(f"{result['method']}; after: {after.describe()}")
    return 0


def _check_collector(args: argparse.Namespace) -> int:
    import socket

    from workloads.launch.preflight import CollectorUnusable, check_collector

    try:
        check_collector(
            args.collector,
            token_or_exit(args.token_file),
            token_source(args.token_file),
            socket.gethostname(),
        )
    except CollectorUnusable as error:
        print(f"workloads: {error}", file=sys.stderr)
        return 2
    print(f"the collector at {args.collector} takes writes from {socket.gethostname()}")
    if args.agent_port is not None:
        from workloads.launch.agent_target import WARNING_PREFIX, push_warning

        warning = push_warning(args.agent_port, args.collector)
        if warning:
            print(f"{WARNING_PREFIX}{warning}", file=sys.stderr)
    return 0


def _resend(args: argparse.Namespace) -> int:
    from workloads.launch.preflight import CollectorUnreachable, CollectorUnusable, check_collector
    from workloads.record.events import ShipperSink

    token = token_or_exit(args.token_file)
    try:  # a refused token would only retry until --timeout: say so now
        check_collector(args.collector, token, token_source(args.token_file))
    except CollectorUnreachable:
        pass  # perhaps starting: the shipper retries until --timeout
    except CollectorUnusable as error:
        print(f"workloads: {error}; the events stay where they are", file=sys.stderr)
        return 2
    if args.spool is not None:
        if not args.spool.is_dir():
            print(f"workloads: no spool directory {args.spool}", file=sys.stderr)
            return 2
        spool = args.spool
        source = f"the spool {spool}"
        sink = ShipperSink(args.collector, token, spool)
    else:
        from workloads.launch.summary import read_events_dir

        points = read_events_dir(args.events)
        spool = args.events.parent / "resend-spool"
        source = f"{args.events} (through the spool {spool})"
        sink = ShipperSink(args.collector, token, spool)
        sink.submit(points)
        print(f"{len(points)} events from {args.events}")
    delivered = sink.close(args.timeout)
    print(f"{_amount(*sink.delivered())} delivered to {args.collector} from {source}")
    if not delivered:
        print(f"still undelivered: {_amount(*sink.waiting())}, kept in {spool}")
    return 0 if delivered else 1


def _amount(events: int, size: int) -> str:
    from contract.units import human_bytes

    return f"{events} event{'' if events == 1 else 's'} ({human_bytes(size)})"


if __name__ == "__main__":
    sys.exit(main())
