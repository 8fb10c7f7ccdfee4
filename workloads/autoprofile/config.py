"""What ``workloads profile`` tells the processes of the command (environment variables).

The collector token never travels here: only the path of a 0600 file holding it
(``workloads.record.spec.TOKEN_FILE_ENV``), as for the bundled runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

RUN_ENV = "EPOCHSCOPE_PROFILE_RUN"  # JSON ProfileConfig; absent: not profiling


@dataclass(frozen=True)
class ProfileConfig:
    run_id: str
    collector_url: str
    spool_root: str
    step_every: int = 10
    data_format: str | None = None  # of --data-dir
    dataset_images: int | None = None
    dataset_bytes: int | None = None

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ProfileConfig | None:
        text = (os.environ if environ is None else environ).get(RUN_ENV)
        if not text:
            return None
        return cls(**json.loads(text))

    def spool_dir(self, rank: int) -> Path:
        return Path(self.spool_root) / f"rank{rank}-pid{os.getpid()}"


def site_dir() -> Path:
    """The directory whose ``sitecustomize.py`` instruments a process."""
    return Path(__file__).resolve().parent / "site"
