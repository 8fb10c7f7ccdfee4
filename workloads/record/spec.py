"""What every rank of a run needs to know, passed from the launcher to the workers.

The spec travels on the worker's command line as base64 JSON (one argument that survives
horovodrun's and ssh's quoting untouched). The collector token never travels in it: the
workers read it from the ``EPOCHSCOPE_WORKLOAD_TOKEN`` environment variable, so it does
not show in ``ps``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from netserve.tokens import TokenFileError, read_token_file

TOKEN_ENV = "EPOCHSCOPE_WORKLOAD_TOKEN"
TOKEN_FILE_ENV = "EPOCHSCOPE_WORKLOAD_TOKEN_FILE"
PRECISIONS = ("fp32", "fp16", "bf16")
FRAMEWORKS = ("tensorflow", "mxnet", "pytorch")
MODELS = ("resnet50",)
SPOOL_DIR_NAME = "spool"  # a run's undelivered events: --runs-dir/<run_id>/spool/rank<N>


def run_spool_root(runs_dir: Path, run_id: str) -> Path:
    """Where a run's ranks spool the events the collector has not taken yet: beside the
    run's other files (``--runs-dir/<run_id>/spool``), not in the home directory."""
    return runs_dir / run_id / SPOOL_DIR_NAME


@dataclass
class RunSpec:
    run_id: str
    framework: str
    model: str = "resnet50"
    data_dir: str | None = None  # None: synthetic data
    dataset: dict | None = None  # datasets.DatasetInfo.to_json() of data_dir
    batch_size: int = 32  # per rank
    epochs: int = 1
    steps_per_epoch: int | None = None  # None: the data set once per epoch
    image_size: int = 224
    num_classes: int = 1000
    precision: str = "fp32"
    warmup_steps: int = 10
    step_every: int = 10
    target_top1: float | None = None
    learning_rate: float = 0.0125  # per rank; scaled by the world size
    collector_url: str | None = None
    events_dir: str | None = None  # line-protocol files when no collector
    spool_root: str | None = None  # run_spool_root(); None: ./runs/<run_id>/spool
    loader_workers: int = 2  # PyTorch DataLoader workers / MXNet decode threads per rank
    seed: int = 0
    validate: bool = True
    anatomy: bool = True  # time each step's input wait, compute and all-reduce
    resend_token_file: str | None = None  # the user's --token-file, for `workloads resend`
    checkpoint_dir: str | None = None  # PyTorch: rank 0 writes checkpoint.pt here per epoch
    stop_file: str | None = None  # written by the launcher when the user stopped the run

    @property
    def synthetic(self) -> bool:
        return self.data_dir is None

    @property
    def data_format(self) -> str:
        return "synthetic" if self.dataset is None else self.dataset["format"]

    def encode(self) -> str:
        return base64.urlsafe_b64encode(json.dumps(asdict(self)).encode()).decode()

    @classmethod
    def decode(cls, text: str) -> RunSpec:
        return cls(**json.loads(base64.urlsafe_b64decode(text.encode())))

    def spool_dir(self, rank: int) -> Path:
        root = self.spool_root or run_spool_root(Path("runs").resolve(), self.run_id)
        return Path(root) / f"rank{rank}"

    def events_file(self, rank: int) -> Path | None:
        if self.events_dir is None:
            return None
        return Path(self.events_dir) / f"events-rank{rank}.jsonl"


def token_from_env() -> str | None:
    """The token from EPOCHSCOPE_WORKLOAD_TOKEN, or from the file EPOCHSCOPE_WORKLOAD_TOKEN_FILE
    names (what a multi-host launch uses: the file is 0600 on every host)."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    path = os.environ.get(TOKEN_FILE_ENV)
    if path and Path(path).is_file():
        return Path(path).read_text().strip() or None
    return None


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_id_arg(text: str) -> str:
    """A ``--run-id`` that is one plain path component: it names a directory and files
    under ``--runs-dir`` and must never reach outside it (no ``..``, no separators)."""
    if not _RUN_ID.fullmatch(text) or ".." in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' (it names a directory under "
            "--runs-dir)"
        )
    return text


def read_token(token_file: Path | None, token: str | None = None) -> str | None:
    """The run's token: ``--token-file`` (``netserve.tokens``), else ``--token``, else
    ``$EPOCHSCOPE_WORKLOAD_TOKEN``; ``TokenFileError`` for a file that cannot be used."""
    if token_file is not None:
        return read_token_file(token_file, "--token-file")
    return token or token_from_env()


def token_source(token_file: Path | None, token: str | None = None) -> str:
    """Where the run's token comes from, as the user gave it (for messages)."""
    if token_file is not None:
        return f"--token-file {token_file}"
    return "--token" if token else TOKEN_ENV


def token_or_exit(token_file: Path | None) -> str | None:
    """``read_token`` for a command line: a file that cannot be used ends the command."""
    try:
        return read_token(token_file)
    except TokenFileError as error:
        raise SystemExit(f"workloads: {error}") from None
