"""One rank of a run: ``python -m workloads worker --spec <base64>``.

horovodrun and torchrun start this once per process (``workloads run`` calls ``main``
in-process for a one-process run). It builds the rank's event writer and recorder, hands
them to the framework's trainer and writes ``run_end`` (finished, failed, or interrupted
when the user stopped the run: ``workloads.record.stopping.stop_was_asked``) whatever
happens.
"""

from __future__ import annotations

import socket
import sys
import traceback

from contract.schema import RunState, Workload
from workloads.record.cpus import cpu_fields
from workloads.record.delivery import UNDELIVERED_EXIT, holds_events, resend_command
from workloads.record.events import AgentEdges, EventWriter, make_sink
from workloads.record.spec import TOKEN_ENV, RunSpec, token_from_env
from workloads.record.stopping import Interrupted, raise_on_signals, stop_was_asked
from workloads.record.timing import Recorder
from workloads.train.placement import Placement, host_memory_bytes

DELIVERY_TIMEOUT_SECONDS = 60.0


def run_start_fields(spec: RunSpec, placement: Placement) -> dict[str, object]:
    dataset = spec.dataset or {}
    train = dataset.get("train", {})
    return {
        Workload.MODEL: spec.model,
        Workload.BATCH_SIZE: spec.batch_size,
        Workload.WORLD_SIZE: placement.world_size,
        Workload.LOCAL_SIZE: placement.local_size,
        Workload.PRECISION: spec.precision,
        Workload.DATA_FORMAT: spec.data_format,
        Workload.DATASET_IMAGES: train.get("images", 0),
        Workload.DATASET_BYTES: train.get("bytes", 0),
        Workload.IMAGE_SIZE: spec.image_size,
        Workload.HOST_MEMORY_BYTES: host_memory_bytes(),
        Workload.WARMUP_STEPS: spec.warmup_steps,
        Workload.TARGET_TOP1: spec.target_top1,
        # the bundled PyTorch loader keeps its workers across epochs
        **cpu_fields(
            spec.loader_workers, spec.loader_workers > 0 if spec.framework == "pytorch" else None
        ),
        Workload.NUM_CLASSES: spec.num_classes,
    }


def residency_probe(spec: RunSpec, placement: Placement):
    """What measures the data set's page-cache residency for this rank's events: one rank per
    host (local rank 0) with a data set; None otherwise."""
    if spec.dataset is None or placement.local_rank != 0:
        return None
    from workloads.train.datasets import DatasetInfo
    from workloads.train.pagecache import DatasetResidency

    info = DatasetInfo.from_json(spec.dataset)
    residency = DatasetResidency(
        info.paths("train") + info.paths("val"), total_bytes=info.train.bytes + info.val.bytes
    )

    def measure() -> tuple[int, int]:
        now = residency.measure()
        return now.resident_bytes, now.total_bytes

    return measure


def make_recorder(spec: RunSpec, placement: Placement) -> Recorder:
    sink = make_sink(
        spec.collector_url,
        token_from_env(),
        spec.spool_dir(placement.rank),
        spec.events_file(placement.rank),
    )
    edges = AgentEdges.from_environment() if spec.collector_url else None
    writer = EventWriter(
        sink, spec.run_id, placement.rank, spec.framework, socket.gethostname(), edges=edges
    )
    return Recorder(
        writer,
        batch_size=spec.batch_size,
        warmup_steps=spec.warmup_steps,
        step_every=spec.step_every,
        verbose=placement.is_chief,
        dataset_residency=residency_probe(spec, placement),
    )


def train(spec: RunSpec, start_recorder) -> Recorder:
    """Dispatch to the framework's trainer, which calls ``start_recorder(placement)``."""
    if spec.framework == "tensorflow":
        from workloads.train import tf_train as trainer
    elif spec.framework == "mxnet":
        from workloads.train import mx_train as trainer
    else:
        from workloads.train import torch_train as trainer
    return trainer.run(spec, start_recorder)


def run_rank(spec: RunSpec) -> int:
    """Train this rank, always closing with run_end; returns the exit status."""
    started: list[tuple[Placement, Recorder]] = []

    def start_recorder(placement: Placement) -> Recorder:
        recorder = make_recorder(spec, placement)
        recorder.run_start(run_start_fields(spec, placement))
        started.append((placement, recorder))
        return recorder

    status, state = 0, RunState.FINISHED
    try:
        train(spec, start_recorder)
    except BaseException as error:  # a failed run still says so in its events
        state = RunState.FAILED
        if isinstance(error, Interrupted):
            status = error.exit_status
            asked = stop_was_asked(spec.stop_file)
            state = RunState.INTERRUPTED if asked else RunState.FAILED
            print(f"rank stopped by {error}" + (" (the run was stopped)" if asked else ""),
                  file=sys.stderr, flush=True)  # fmt: skip
        elif spec.stop_file is not None and stop_was_asked(spec.stop_file):
            # The user's stop can reach a rank as another error: the signal's Interrupted,
            # raised inside a framework's C++ call, comes back wrapped (TensorFlow: "MISMATCH
            # of original and normalized active exception types ... REPLACED BY
            # Interrupted"), or a peer that stopped first breaks this rank's collective.
            status, state = 1, RunState.INTERRUPTED
            reason = str(error).splitlines()[0] if str(error) else ""
            print(f"rank stopped by {type(error).__name__} while the run was stopped: "
                  f"{reason}", file=sys.stderr, flush=True)  # fmt: skip
        else:
            status = 130 if isinstance(error, KeyboardInterrupt) else 1
            traceback.print_exc()
    for placement, recorder in started:
        recorder.run_end(state)
        # every rank says its own images/s (the launcher prints the run's sum after them)
        print(f"rank {placement.rank}: {recorder.summary()}", flush=True)
        if not recorder.writer.close(DELIVERY_TIMEOUT_SECONDS):
            print(undelivered_message(spec, placement.rank), file=sys.stderr, flush=True)
            if status == 0:
                status = UNDELIVERED_EXIT
    if state == RunState.INTERRUPTED and spec.stop_file is not None:
        # stopped as asked: torchrun (horovodrun) then sees its ranks done and exits
        # quietly, rather than printing a traceback about a rank that failed
        return 0
    return status


def undelivered_message(spec: RunSpec, rank: int) -> str:
    """Where a rank's undelivered events wait, and the command that delivers them."""
    spool = spec.spool_dir(rank)
    if not holds_events(spool):  # none reached the disk (or they were sent after all)
        return (
            f"rank {rank}: events not delivered to {spec.collector_url}, and none kept on "
            "disk to resend"
        )
    command = resend_command(spool, spec.collector_url or "URL", spec.resend_token_file)
    with_token = ""
    if spec.resend_token_file is None and token_from_env():
        with_token = f" (with the token in {TOKEN_ENV}, as for the run)"
    return (
        f"rank {rank}: events not delivered to {spec.collector_url}; they wait in {spool}\n"
        f"deliver them with{with_token}:\n  {command}"
    )


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="workloads worker")
    parser.add_argument("--spec", required=True, help="base64 JSON RunSpec from the launcher")
    args = parser.parse_args(argv)
    # the launcher stops a run with SIGTERM to each rank: run_end (interrupted) still goes out
    raise_on_signals()
    return run_rank(RunSpec.decode(args.spec))
